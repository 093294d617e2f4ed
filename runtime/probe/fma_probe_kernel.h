// The probe's timed loop, written once for any vector type. Included only by the files
// compiled for the ISA of that type (runtime/probe/fma_probe_avx2.cpp, runtime/probe/fma_probe_avx512.cpp).
#pragma once

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace convgen::fma_probe_detail {

constexpr int kChains = 12;            // independent accumulators (latency 4 x 2 pipes = 8 needed)
constexpr int64_t kInnerIters = 2048;  // FMA rounds between clock checks (~25k FMAs, ~10 us)
constexpr double kDurationSeconds = 0.2;

inline double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ops: a struct with `using vec`, `static constexpr int lanes`, set1(float),
// fmadd(a, b, c) = a * b + c and sum(vec) -> float.
// Runs rounds of kInnerIters x kChains FMAs until `deadline`; returns the number of
// rounds done. acc = acc * a + b converges to b / (1 - a) = 1, so no value overflows
// or goes denormal however long it runs. `sink` keeps every chain live.
template <typename Ops>
__attribute__((noinline)) int64_t fma_rounds_until(double deadline, float seed, volatile float* sink) {
  using V = typename Ops::vec;
  const V a = Ops::set1(0.999999f);
  const V b = Ops::set1(1e-6f);
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = Ops::set1(seed + 0.001f * i);
  int64_t rounds = 0;
  do {
    for (int64_t it = 0; it < kInnerIters; ++it) {
#pragma GCC unroll 12
      for (int c = 0; c < kChains; ++c) acc[c] = Ops::fmadd(acc[c], a, b);
    }
    ++rounds;
  } while (clock_seconds() < deadline);
  float total = 0.0f;
  for (int i = 0; i < kChains; ++i) total += Ops::sum(acc[i]);
  *sink = *sink + total;
  return rounds;
}

// One trial: all threads start together, run until a common deadline, and the rate is
// the total work over the wall time from the common start to the last thread's end.
template <typename Ops>
double one_trial(int threads, volatile float* sink) {
  std::atomic<int64_t> total_rounds{0};
  double start = 0.0, end = 0.0;
#pragma omp parallel num_threads(threads)
  {
#pragma omp barrier
#pragma omp single
    start = clock_seconds();
    // implicit barrier after single: every thread sees `start`
    const int64_t rounds =
        fma_rounds_until<Ops>(start + kDurationSeconds, 1.0f + 0.01f * omp_get_thread_num(), sink);
    total_rounds.fetch_add(rounds, std::memory_order_relaxed);
#pragma omp barrier
#pragma omp single
    end = clock_seconds();
  }
  const double flops =
      static_cast<double>(total_rounds.load()) * kInnerIters * kChains * Ops::lanes * 2;
  return flops / (end - start) * 1e-9;
}

template <typename Ops>
double best_of_three(int threads, volatile float* sink) {
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) {
    const double r = one_trial<Ops>(threads, sink);
    if (r > best) best = r;
  }
  return best;
}

}  // namespace convgen::fma_probe_detail
