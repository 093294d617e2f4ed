# convgen_data: the training data library (runtime/train_data.h) and its tests.
# Included from the top-level CMakeLists.txt; every path is relative to this file, so a
# scratch project can include it as well.
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)
get_filename_component(_convgen_data_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

add_library(convgen_data STATIC "${_convgen_data_root}/runtime/train_data.cpp")
target_include_directories(convgen_data PUBLIC
  "$<BUILD_INTERFACE:${_convgen_data_root}/runtime>"
  "$<BUILD_INTERFACE:${_convgen_data_root}/generator>"  # errors.h
  "$<INSTALL_INTERFACE:include/convgen>")
target_link_libraries(convgen_data PUBLIC Threads::Threads PRIVATE ZLIB::ZLIB)
target_compile_features(convgen_data PUBLIC cxx_std_17)
target_compile_options(convgen_data PRIVATE -Wall -Wextra)

if(CONVGEN_BUILD_TESTS)
  find_package(Catch2 2 REQUIRED)
  include(Catch)
  add_executable(convgen_data_tests
    "${_convgen_data_root}/tests/test_main.cpp"
    "${_convgen_data_root}/tests/test_train_data.cpp")
  target_link_libraries(convgen_data_tests PRIVATE convgen_data Catch2::Catch2 ZLIB::ZLIB)
  target_compile_options(convgen_data_tests PRIVATE -Wall -Wextra)
  catch_discover_tests(convgen_data_tests PROPERTIES TIMEOUT 120 LABELS data)
endif()
