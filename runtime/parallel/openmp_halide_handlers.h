// Halide's parallel runtime on OpenMP, as the handler functions a Halide runtime is
// given (halide_set_custom_parallel_runtime): shared by the AOT runtime hook
// (parallel_runtime.cpp) and runtimes loaded at run time (openmp_handlers_into.cpp).
// Internal to runtime/parallel.
#pragma once

#include <atomic>

#include <HalideRuntime.h>

#include "runtime/parallel/openmp_par_for.h"

namespace convgen::openmp_halide {

inline int omp_do_par_for(void* user_context, halide_task_t f, int min, int size, uint8_t* closure) {
  return openmp_par_for(user_context, f, min, size, closure);
}

inline int omp_do_task(void* user_context, halide_task_t f, int idx, uint8_t* closure) {
  return f(user_context, idx, closure);
}

inline int omp_do_loop_task(void* user_context, halide_loop_task_t f, int min, int extent, uint8_t* closure,
                            void* task_parent) {
  return f(user_context, min, extent, closure, task_parent);
}

// convgen schedules use no async producers, so tasks never wait on each other's
// semaphores and can run one after another.
inline int omp_do_parallel_tasks(void* user_context, int num_tasks, struct halide_parallel_task_t* tasks,
                                 void* task_parent) {
  for (int t = 0; t < num_tasks; ++t) {
    int result = tasks[t].fn(user_context, tasks[t].min, tasks[t].extent, tasks[t].closure, task_parent);
    if (result != 0) return result;
  }
  return 0;
}

struct Semaphore {
  std::atomic<int> value;
};
static_assert(sizeof(Semaphore) <= sizeof(halide_semaphore_t), "semaphore does not fit");

inline int omp_semaphore_init(halide_semaphore_t* s, int n) {
  reinterpret_cast<Semaphore*>(s)->value.store(n);
  return n;
}

inline bool omp_semaphore_try_acquire(halide_semaphore_t* s, int n) {
  auto& v = reinterpret_cast<Semaphore*>(s)->value;
  int current = v.load();
  while (current >= n) {
    if (v.compare_exchange_weak(current, current - n)) return true;
  }
  return false;
}

inline int omp_semaphore_release(halide_semaphore_t* s, int n) {
  return reinterpret_cast<Semaphore*>(s)->value.fetch_add(n) + n;
}

}  // namespace convgen::openmp_halide
