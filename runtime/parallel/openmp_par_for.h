// Halide's parallel-for on the process's OpenMP threads, shared by the AOT runtime hook
// (runtime/parallel/parallel_runtime.cpp) and the JIT kernels (generator/conv/jit.cpp), which differ only
// in the user-context type Halide passes. Iterations are split statically; inside an
// enclosing parallel region OpenMP runs them on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace convgen {

// Runs task(context, i, closure) for i in [min, min + extent); returns 0 or the first
// non-zero status a task returned.
template <typename Context>
int openmp_par_for(Context* context, int (*task)(Context*, int, uint8_t*), int min, int extent, uint8_t* closure) {
  std::atomic<int> first_error{0};
#pragma omp parallel for schedule(static)
  for (int i = min; i < min + extent; ++i) {
    const int status = task(context, i, closure);
    if (status != 0) {
      int expected = 0;
      first_error.compare_exchange_strong(expected, status);
    }
  }
  return first_error.load();
}

}  // namespace convgen
