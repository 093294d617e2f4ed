# convgen_content_hash(<out-var> FILES <f>...): SHA-256 over the named files' contents,
# in the order given. Used as the "generator content hash" that keys schedule records
# and provenance headers: it changes exactly when generator or schedule code changes.
function(convgen_content_hash out_var)
  cmake_parse_arguments(ARG "" "" "FILES" ${ARGN})
  set(all "")
  foreach(f IN LISTS ARG_FILES)
    get_filename_component(f "${f}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    file(SHA256 "${f}" h)
    string(APPEND all "${h}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${f}")
  endforeach()
  string(SHA256 combined "${all}")
  set(${out_var} "${combined}" PARENT_SCOPE)
endfunction()
