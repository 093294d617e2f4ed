# cmake --install: the convgen CLI, the runtime libraries and their headers, and a
# relocatable CMake package (find_package(convgen 0.1) -> convgen::runtime,
# convgen::convgen, convgen_add_model()). Included from the top-level CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(CONVGEN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/convgen")

# Every library a generated model driver links, exported under convgen:: by its folder's
# name (their static link dependencies -- BLIS, OpenMP, fmt, zlib -- are found again by
# convgenConfig.cmake).
set(CONVGEN_INSTALLED_LIBRARIES
  convgen_runtime convgen_trainer convgen_graph convgen_parallel convgen_ops convgen_schedules
  convgen_data convgen_checkpoint convgen_memory)
foreach(lib IN LISTS CONVGEN_INSTALLED_LIBRARIES)
  string(REPLACE "convgen_" "" export_name "${lib}")
  set_target_properties(${lib} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
set_target_properties(convgen PROPERTIES EXPORT_NAME convgen)
install(TARGETS convgen ${CONVGEN_INSTALLED_LIBRARIES}
  EXPORT convgenTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")

# The headers generated drivers and their users include, under include/convgen with the
# folders they are included by ("runtime/train/trainer.h").
set(CONVGEN_INSTALLED_HEADERS
  runtime/checkpoint/checkpoint.h
  runtime/data/train_data.h
  runtime/driver/cpu_features.h
  runtime/driver/model_runtime.h
  runtime/graph/model_graph.h
  runtime/graph/train_graph.h
  runtime/memory/aligned_buffer.h
  runtime/memory/page_allocation.h
  runtime/ops/layout.h
  runtime/ops/ops.h
  runtime/ops/resize.h
  runtime/ops/tensor.h
  runtime/ops/weights_file.h
  runtime/parallel/batch_calls.h
  runtime/parallel/kernel_heap.h
  runtime/parallel/parallel_runtime.h
  runtime/parallel/process_group.h
  runtime/train/onnx_weights.h
  runtime/train/train_conv.h
  runtime/train/train_conv_aot.h
  runtime/train/trainer.h
  runtime/train/trainer_state.h
  schedules/conv_descriptor.h
  schedules/conv_schedule.h
  schedules/errors.h
  schedules/schedule_selection.h
  schedules/weight_panels.h)
foreach(header IN LISTS CONVGEN_INSTALLED_HEADERS)
  get_filename_component(folder "${header}" DIRECTORY)
  install(FILES "${header}" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/convgen/${folder}")
endforeach()

# The bundled models, for the examples and for trying convgen_add_model.
set(CONVGEN_INSTALL_MODELSDIR "${CMAKE_INSTALL_DATADIR}/convgen/models")
install(FILES models/lenet.onnx models/cifar10_full.onnx models/small_resnet.onnx
  DESTINATION "${CONVGEN_INSTALL_MODELSDIR}")

install(EXPORT convgenTargets NAMESPACE convgen:: DESTINATION "${CONVGEN_INSTALL_CMAKEDIR}")
configure_package_config_file(cmake/convgenConfig.cmake.in "${CMAKE_CURRENT_BINARY_DIR}/convgenConfig.cmake"
  INSTALL_DESTINATION "${CONVGEN_INSTALL_CMAKEDIR}"
  PATH_VARS CONVGEN_INSTALL_MODELSDIR)
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file("${CMAKE_CURRENT_BINARY_DIR}/convgenConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/convgenConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/convgenConfigVersion.cmake"
  cmake/convgenAddModel.cmake
  cmake/FindBLIS.cmake
  DESTINATION "${CONVGEN_INSTALL_CMAKEDIR}")
