// Halide's parallel-for on the process's OpenMP threads, shared by the AOT runtime hook
// (runtime/parallel/parallel_runtime.cpp) and the JIT kernels (generator/conv/jit.cpp), which differ only
// in the user-context type Halide passes. Iterations are split statically over a new
// team; inside an active parallel region they run on the calling thread, or, while the
// thread holds a LoopsAsTasks, become tasks that the calling thread runs and waits for
// and that the team's other threads take up when they reach a barrier (the trainer's
// whole-batch weight gradients: one kernel per thread, the idle threads helping). Which
// thread runs an iteration never changes what it computes.
#pragma once

#include <atomic>
#include <cstdint>

#include <omp.h>

namespace convgen {

inline thread_local bool nested_loops_as_tasks = false;

// While alive, this thread's parallel loops inside a parallel region are shared as tasks.
class LoopsAsTasks {
 public:
  LoopsAsTasks() : saved_(nested_loops_as_tasks) { nested_loops_as_tasks = true; }
  ~LoopsAsTasks() { nested_loops_as_tasks = saved_; }
  LoopsAsTasks(const LoopsAsTasks&) = delete;
  LoopsAsTasks& operator=(const LoopsAsTasks&) = delete;

 private:
  bool saved_;
};

// Runs task(context, i, closure) for i in [min, min + extent); returns 0 or the first
// non-zero status a task returned.
template <typename Context>
int openmp_par_for(Context* context, int (*task)(Context*, int, uint8_t*), int min, int extent, uint8_t* closure) {
  std::atomic<int> first_error{0};
  auto run = [&](int i) {
    const int status = task(context, i, closure);
    if (status != 0) {
      int expected = 0;
      first_error.compare_exchange_strong(expected, status);
    }
  };
  if (nested_loops_as_tasks && omp_in_parallel()) {
#pragma omp taskloop grainsize(1) shared(first_error)
    for (int i = min; i < min + extent; ++i) run(i);
    return first_error.load();
  }
#pragma omp parallel for schedule(static)
  for (int i = min; i < min + extent; ++i) run(i);
  return first_error.load();
}

}  // namespace convgen
