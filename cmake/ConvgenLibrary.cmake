# convgen_library(<target> SOURCES <file>...): one folder's static library. Every header is
# included with its folder from the source root ("runtime/ops/tensor.h"), in the build
# tree and, under include/convgen, in the installed package; tests/layering checks that
# includes only point down (docs/architecture.md).
function(convgen_library target)
  cmake_parse_arguments(ARG "" "" "SOURCES" ${ARGN})
  add_library(${target} STATIC ${ARG_SOURCES})
  target_include_directories(${target} PUBLIC
    "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>"
    "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/convgen>")
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  # Generated model drivers may be linked into shared objects.
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()
