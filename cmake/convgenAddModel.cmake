# convgen_add_model(<target> MODEL <file.onnx>
#                   [BATCH <n> [PER_CALL_BATCH <m>]] [TRAIN [MICRO_BATCH <m>] [SAMPLES <n>...]]
#                   [SCHEDULES <records.jsonl>] [TARGET <halide-target>] [NAMESPACE <ns>])
#
# Compiles an ONNX model with `convgen compile` at build time (never at configure time)
# into a static library <target>: the generated driver (<target>.h, class Model -- or
# Trainer with TRAIN -- in namespace <ns>, default convgen_model_<target>) and its
# kernels, linked to convgen::runtime, which owns the process's one Halide runtime. So
#   target_link_libraries(app PRIVATE <target>)
# is all a user writes. The weights file the driver loads is <target>.weights in the
# build tree: its path is the compile definition <TARGET>_WEIGHTS_FILE (upper case,
# non-identifier characters as _) of every target linking <target>, and the target
# property CONVGEN_WEIGHTS_FILE.
#
# It regenerates exactly when the model, the schedule records, the options or the
# convgen executable (so its version) change: the options are a stamp file rewritten
# only when they differ. Errors (a missing model, an unsupported op, a bad option) stop
# the build with convgen's one-line message. The kernel cache is per build tree
# (CONVGEN_CACHE_DIR, default <build>/convgen-cache), so builds never write to $HOME.
#
# BATCH: inference batch (default 1) or, with TRAIN, the mini-batch (default 64).
# PER_CALL_BATCH: inference only, the samples per call when the batch runs as calls over the threads
# (convgen compile --per-call-batch; default: convgen's, where the model allows).
# SAMPLES: with TRAIN, data sizes whose last partial batch gets kernels (e.g. 60000 10000).
# TARGET: a Halide target string (default host: the build machine's widest; pin one for
# libraries deployed to other CPUs, docs/cmake.md).
include_guard(GLOBAL)

set(CONVGEN_CACHE_DIR "${CMAKE_BINARY_DIR}/convgen-cache" CACHE PATH "Kernel cache of convgen_add_model")

function(convgen_add_model target)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "TRAIN" "MODEL;BATCH;PER_CALL_BATCH;MICRO_BATCH;SCHEDULES;TARGET;NAMESPACE" "SAMPLES")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "convgen_add_model(${target}): unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_MODEL)
    message(FATAL_ERROR "convgen_add_model(${target}): MODEL <file.onnx> is required")
  endif()
  if(NOT TARGET convgen::convgen)
    message(FATAL_ERROR "convgen_add_model(${target}): convgen::convgen is not defined (find_package(convgen))")
  endif()
  string(MAKE_C_IDENTIFIER "${target}" name)
  string(TOUPPER "${name}" upper)
  get_filename_component(model "${ARG_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(out "${CMAKE_CURRENT_BINARY_DIR}/convgen_models/${name}")

  set(args compile "${model}" -o "${out}" --name "${name}" --cache-dir "${CONVGEN_CACHE_DIR}")
  if(DEFINED ARG_BATCH)
    list(APPEND args --batch "${ARG_BATCH}")
  endif()
  if(DEFINED ARG_PER_CALL_BATCH)
    list(APPEND args --per-call-batch "${ARG_PER_CALL_BATCH}")
  endif()
  if(ARG_TRAIN)
    list(APPEND args --train)
  endif()
  if(DEFINED ARG_MICRO_BATCH)
    list(APPEND args --micro-batch "${ARG_MICRO_BATCH}")
  endif()
  if(ARG_SAMPLES)
    list(JOIN ARG_SAMPLES "," samples)
    list(APPEND args --samples "${samples}")
  endif()
  set(depends "")
  if(ARG_SCHEDULES)
    get_filename_component(schedules "${ARG_SCHEDULES}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND args --schedules "${schedules}")
    if(EXISTS "${schedules}")
      list(APPEND depends "${schedules}")
    endif()
  endif()
  if(ARG_TARGET)
    list(APPEND args --target "${ARG_TARGET}")
  endif()
  if(ARG_NAMESPACE)
    list(APPEND args --namespace "${ARG_NAMESPACE}")
  endif()
  # A model that does not exist is not a dependency (Make and Ninja would stop with
  # "no rule to make ..."): convgen itself then says which file it cannot read.
  if(EXISTS "${model}")
    list(APPEND depends "${model}")
  endif()
  # The options as a stamp: written only when they change, so a changed option
  # regenerates with Makefiles too (Ninja also tracks the command line).
  file(CONFIGURE OUTPUT "${out}.options" CONTENT "${args}\n" @ONLY)

  set(outputs "${out}/${name}.a" "${out}/${name}.cpp" "${out}/${name}.h" "${out}/${name}.weights"
              "${out}/${name}.manifest.json")
  add_custom_command(
    OUTPUT ${outputs}
    COMMAND convgen::convgen ${args}
    DEPENDS ${depends} "${out}.options" convgen::convgen
    COMMENT "convgen: compiling ${ARG_MODEL} into ${target}"
    VERBATIM)
  add_library(${target} STATIC "${out}/${name}.cpp" "${out}/${name}.h")
  target_include_directories(${target} PUBLIC "${out}")
  target_link_libraries(${target} PUBLIC "${out}/${name}.a" convgen::runtime)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_definitions(${target} INTERFACE "${upper}_WEIGHTS_FILE=\"${out}/${name}.weights\"")
  set_target_properties(${target} PROPERTIES CONVGEN_WEIGHTS_FILE "${out}/${name}.weights")
endfunction()
