# FindBLIS: Debian ships BLIS without CMake or pkg-config files. We link the OpenMP
# variant explicitly (libblis.so itself is an alternatives link to any variant).
#   BLIS::BLIS  imported target;  BLIS_INCLUDE_DIR, BLIS_LIBRARY
include(FindPackageHandleStandardArgs)
find_path(BLIS_INCLUDE_DIR blis.h
  PATHS /usr/include/x86_64-linux-gnu/blis-openmp
  NO_DEFAULT_PATH)
find_path(BLIS_INCLUDE_DIR blis.h PATH_SUFFIXES blis)
find_library(BLIS_LIBRARY NAMES blis
  PATHS /usr/lib/x86_64-linux-gnu/blis-openmp
  NO_DEFAULT_PATH)
find_library(BLIS_LIBRARY NAMES blis)
find_package_handle_standard_args(BLIS REQUIRED_VARS BLIS_LIBRARY BLIS_INCLUDE_DIR)
if(BLIS_FOUND AND NOT TARGET BLIS::BLIS)
  add_library(BLIS::BLIS UNKNOWN IMPORTED)
  set_target_properties(BLIS::BLIS PROPERTIES
    IMPORTED_LOCATION "${BLIS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${BLIS_INCLUDE_DIR}")
endif()
mark_as_advanced(BLIS_INCLUDE_DIR BLIS_LIBRARY)
