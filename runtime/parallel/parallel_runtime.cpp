#include "runtime/parallel/parallel_runtime.h"

#include <atomic>
#include <mutex>

#include <HalideRuntime.h>
#include <omp.h>

#include "runtime/parallel/kernel_heap.h"
#include "runtime/parallel/openmp_halide_handlers.h"

namespace convgen {

namespace {

void* kernel_heap_malloc(void*, std::size_t bytes) { return kernel_heap_allocate(bytes); }
void kernel_heap_free(void*, void* block) { kernel_heap_release(block); }

}  // namespace

void install_openmp_parallel_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    using namespace openmp_halide;
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
