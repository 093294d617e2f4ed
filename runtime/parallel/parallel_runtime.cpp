#include "runtime/parallel/parallel_runtime.h"

#include <atomic>
#include <mutex>

#include <HalideRuntime.h>
#include <omp.h>

#include "runtime/parallel/kernel_heap.h"
#include "runtime/parallel/openmp_par_for.h"

namespace convgen {

namespace {

int omp_do_par_for(void* user_context, halide_task_t f, int min, int size, uint8_t* closure) {
  return openmp_par_for(user_context, f, min, size, closure);
}

int omp_do_task(void* user_context, halide_task_t f, int idx, uint8_t* closure) {
  return f(user_context, idx, closure);
}

int omp_do_loop_task(void* user_context, halide_loop_task_t f, int min, int extent, uint8_t* closure,
                     void* task_parent) {
  return f(user_context, min, extent, closure, task_parent);
}

// convgen schedules use no async producers, so tasks never wait on each other's
// semaphores and can run one after another.
int omp_do_parallel_tasks(void* user_context, int num_tasks, struct halide_parallel_task_t* tasks,
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

int omp_semaphore_init(halide_semaphore_t* s, int n) {
  reinterpret_cast<Semaphore*>(s)->value.store(n);
  return n;
}

bool omp_semaphore_try_acquire(halide_semaphore_t* s, int n) {
  auto& v = reinterpret_cast<Semaphore*>(s)->value;
  int current = v.load();
  while (current >= n) {
    if (v.compare_exchange_weak(current, current - n)) return true;
  }
  return false;
}

int omp_semaphore_release(halide_semaphore_t* s, int n) {
  return reinterpret_cast<Semaphore*>(s)->value.fetch_add(n) + n;
}

void* kernel_heap_malloc(void*, std::size_t bytes) { return kernel_heap_allocate(bytes); }
void kernel_heap_free(void*, void* block) { kernel_heap_release(block); }

}  // namespace

void install_openmp_parallel_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    halide_set_custom_parallel_runtime(omp_do_par_for, omp_do_task, omp_do_loop_task, omp_do_parallel_tasks,
                                       omp_semaphore_init, omp_semaphore_try_acquire, omp_semaphore_release);
  });
}

void install_kernel_runtime() {
  install_openmp_parallel_runtime();
  static std::once_flag once;
  std::call_once(once, [] {
    halide_set_custom_malloc(kernel_heap_malloc);
    halide_set_custom_free(kernel_heap_free);
  });
}

}  // namespace convgen
