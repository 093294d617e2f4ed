#include "runtime/parallel/openmp_halide_handlers.h"
#include "runtime/parallel/parallel_runtime.h"

// Apart from parallel_runtime.cpp, whose hooks call the Halide runtime linked into the
// program: this file calls only the setter it is given.
namespace convgen {

void install_openmp_parallel_runtime_into(void* set_custom_parallel_runtime) {
  using namespace openmp_halide;
  using Setter = decltype(&halide_set_custom_parallel_runtime);
  reinterpret_cast<Setter>(set_custom_parallel_runtime)(omp_do_par_for, omp_do_task, omp_do_loop_task,
                                                         omp_do_parallel_tasks, omp_semaphore_init,
                                                         omp_semaphore_try_acquire, omp_semaphore_release);
}

}  // namespace convgen
