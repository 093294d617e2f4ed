// One thread pool per process: Halide's parallel loops in AOT kernels run on the
// process's OpenMP threads instead of Halide's own pool (two pools fighting over the
// same cores is a classic slowdown). convgen kernels only parallelise non-reduction
// loops, so results do not depend on how iterations are spread over threads.
#pragma once

namespace convgen {

// Installs the OpenMP parallel runtime into the Halide runtime linked with the AOT
// kernels. Idempotent; call before the first kernel runs.
void install_openmp_parallel_runtime();

// The same, into a Halide runtime loaded at run time (the kernel cache's shared
// runtime, generator/kernel_cache): `set_custom_parallel_runtime` is that runtime's
// halide_set_custom_parallel_runtime, found with dlsym. (void*: this header stays free
// of Halide's runtime types.)
void install_openmp_parallel_runtime_into(void* set_custom_parallel_runtime);

// Installs every hook of the process into that Halide runtime: the OpenMP parallel
// runtime and the kernel heap (runtime/parallel/kernel_heap.h). What generated drivers
// call. Idempotent; call before the first kernel runs.
void install_kernel_runtime();

}  // namespace convgen
