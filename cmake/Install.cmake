# cmake --install: the convgen CLI, the runtime libraries and their headers, and a
# relocatable CMake package (find_package(convgen 0.1) -> convgen::runtime,
# convgen::convgen, convgen_add_model()). Included from the top-level CMakeLists.txt.
include(CMakePackageConfigHelpers)

set(CONVGEN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/convgen")

# Every library a generated model driver links, exported under convgen:: (their static
# link dependencies -- BLIS, OpenMP, fmt, zlib -- are found again by convgenConfig.cmake).
set_target_properties(convgen_core PROPERTIES EXPORT_NAME core)
set_target_properties(convgen_ops PROPERTIES EXPORT_NAME ops)
set_target_properties(convgen_trainer PROPERTIES EXPORT_NAME trainer)
set_target_properties(convgen_data PROPERTIES EXPORT_NAME data)
set_target_properties(convgen_checkpoint PROPERTIES EXPORT_NAME checkpoint)
set_target_properties(convgen PROPERTIES EXPORT_NAME convgen)
install(TARGETS convgen convgen_runtime convgen_ops convgen_trainer convgen_core convgen_data convgen_checkpoint
  EXPORT convgenTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")

# The headers generated drivers and their users include, flat under include/convgen.
install(FILES
  runtime/checkpoint.h
  runtime/layout.h
  runtime/model_runtime.h
  runtime/onnx_weights.h
  runtime/ops.h
  runtime/parallel_runtime.h
  runtime/tensor.h
  runtime/train_data.h
  runtime/weights_file.h
  generator/conv_descriptor.h
  generator/errors.h
  generator/model_graph.h
  generator/model_trainer.h
  generator/train_conv.h
  generator/train_conv_aot.h
  generator/train_graph.h
  generator/trainer_state.h
  schedules/conv_schedule.h
  schedules/schedule_selection.h
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/convgen")

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
