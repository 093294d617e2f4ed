# convgen_checkpoint: training checkpoints (runtime/checkpoint.h) and their tests.
# Included from the top-level CMakeLists.txt; every path is relative to this file, so a
# scratch project can include it as well.
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
get_filename_component(_convgen_checkpoint_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

add_library(convgen_checkpoint STATIC "${_convgen_checkpoint_root}/runtime/checkpoint.cpp")
target_include_directories(convgen_checkpoint PUBLIC
  "$<BUILD_INTERFACE:${_convgen_checkpoint_root}/runtime>"
  "$<BUILD_INTERFACE:${_convgen_checkpoint_root}/generator>"  # errors.h
  "$<INSTALL_INTERFACE:include/convgen>")
target_link_libraries(convgen_checkpoint PRIVATE ZLIB::ZLIB nlohmann_json::nlohmann_json)
target_compile_features(convgen_checkpoint PUBLIC cxx_std_17)
target_compile_options(convgen_checkpoint PRIVATE -Wall -Wextra)

if(CONVGEN_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
  add_executable(convgen_checkpoint_tests
    "${_convgen_checkpoint_root}/tests/test_main.cpp"
    "${_convgen_checkpoint_root}/tests/test_checkpoint.cpp")
  target_link_libraries(convgen_checkpoint_tests PRIVATE convgen_checkpoint Catch2::Catch2)
  target_compile_options(convgen_checkpoint_tests PRIVATE -Wall -Wextra)
  catch_discover_tests(convgen_checkpoint_tests PROPERTIES TIMEOUT 120 LABELS train)
endif()
