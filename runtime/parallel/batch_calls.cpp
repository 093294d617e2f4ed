#include "runtime/parallel/batch_calls.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>

namespace convgen {

float* CallArenas::arena(size_t i) {
  // 15 floats of slack to reach a 64-byte boundary.
  float* base = storage_[i].get();
  return reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(base) + 63) & ~std::uintptr_t{63});
}

void CallArenas::run(int64_t calls, const std::function<void(int64_t, int, float*)>& body) {
  if (calls <= 0) return;
  const int max_threads = std::max(1, omp_get_max_threads());
  if (calls < max_threads || omp_in_parallel()) {
    // Fewer calls than threads (their own loops then take all the threads), or inside the
    // caller's parallel region: the calls one after another on this thread's arena.
    if (storage_.empty()) storage_.push_back(std::make_unique<float[]>(static_cast<size_t>(floats_ + 15)));
    std::exception_ptr first;
    for (int64_t c = 0; c < calls; ++c) {
      try {
        body(c, 0, arena(0));
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    return;
  }
  const int threads = max_threads;
  while (storage_.size() < static_cast<size_t>(threads)) {
    // Value-initialised: zeroed, as the whole-batch arena is.
    storage_.push_back(std::make_unique<float[]>(static_cast<size_t>(floats_ + 15)));
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(calls));
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t c = 0; c < calls; ++c) {
    const int t = omp_get_thread_num();
    try {
      body(c, t, arena(static_cast<size_t>(t)));
    } catch (...) {
      errors[static_cast<size_t>(c)] = std::current_exception();
    }
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace convgen
