// Batch-level parallel inference: a batch of B samples run as B/M independent calls of
// a plan made for a per-call batch of M, the calls spread over the OpenMP threads, each
// thread on its own arena (the founding idea of batch-level parallelism applied to
// inference). A call computes exactly what it would alone -- the same plan, kernels and
// operators over its own samples -- so the outputs are the same bits whichever thread
// runs it and however many threads there are. Shared by the in-process executor
// (generator/model/executor.h) and the generated model driver.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace convgen {

class CallArenas {
 public:
  // Each arena holds `floats` floats and starts on a 64-byte boundary (the plan's offsets
  // are multiples of 64 bytes). Arenas are allocated (zeroed) on first use, one per thread
  // that runs calls, each apart from the others (no cache line shared between threads).
  explicit CallArenas(int64_t floats) : floats_(floats) {}

  // Runs body(call, thread, arena) for every call in [0, calls), statically split over
  // omp_get_max_threads() threads; inside, each thread's parallel loops run serially
  // (OpenMP's default of one active level). With fewer calls than threads, or inside a
  // parallel region of the caller, the calls run one after another on the calling thread
  // (thread 0, arena 0), their own loops taking the threads. Which thread runs a call never
  // changes its bits. Exceptions are caught per call; the one of the lowest call is
  // rethrown after every call ended.
  void run(int64_t calls, const std::function<void(int64_t call, int thread, float* arena)>& body);

  // The arenas allocated so far, and the floats of each (the memory they hold).
  size_t arenas() const { return storage_.size(); }
  int64_t floats_per_arena() const { return floats_; }

 private:
  float* arena(size_t i);
  int64_t floats_;
  std::vector<std::unique_ptr<float[]>> storage_;
};

}  // namespace convgen
