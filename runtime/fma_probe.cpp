// Compiled with -mavx2 -mfma (bench/CMakeLists.txt sets it on this file only).
#include "fma_probe.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

namespace convgen {
namespace {

constexpr int kChains = 12;            // independent accumulators (latency 4 x 2 pipes = 8 needed)
constexpr int64_t kInnerIters = 2048;  // FMA rounds between clock checks (~25k FMAs, ~10 us)
constexpr double kDurationSeconds = 0.2;

double clock_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Sink the compiler cannot see through, so no chain is dead code.
volatile float g_sink = 0.0f;

// Runs rounds of kInnerIters x kChains FMAs until `deadline`; returns the number of
// rounds done. acc = acc * a + b converges to b / (1 - a) = 1, so no value overflows
// or goes denormal however long it runs.
__attribute__((noinline)) int64_t fma_rounds_until(double deadline, float seed) {
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-6f);
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(seed + 0.001f * i);
  int64_t rounds = 0;
  do {
    for (int64_t it = 0; it < kInnerIters; ++it) {
      acc[0] = _mm256_fmadd_ps(acc[0], a, b);
      acc[1] = _mm256_fmadd_ps(acc[1], a, b);
      acc[2] = _mm256_fmadd_ps(acc[2], a, b);
      acc[3] = _mm256_fmadd_ps(acc[3], a, b);
      acc[4] = _mm256_fmadd_ps(acc[4], a, b);
      acc[5] = _mm256_fmadd_ps(acc[5], a, b);
      acc[6] = _mm256_fmadd_ps(acc[6], a, b);
      acc[7] = _mm256_fmadd_ps(acc[7], a, b);
      acc[8] = _mm256_fmadd_ps(acc[8], a, b);
      acc[9] = _mm256_fmadd_ps(acc[9], a, b);
      acc[10] = _mm256_fmadd_ps(acc[10], a, b);
      acc[11] = _mm256_fmadd_ps(acc[11], a, b);
    }
    ++rounds;
  } while (clock_seconds() < deadline);
  __m256 sum = acc[0];
  for (int i = 1; i < kChains; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0.0f;
  for (float v : lanes) total += v;
  g_sink = g_sink + total;
  return rounds;
}

// One trial: all threads start together, run until a common deadline, and the rate is
// the total work over the wall time from the common start to the last thread's end.
double one_trial(int threads) {
  std::atomic<int64_t> total_rounds{0};
  double start = 0.0, end = 0.0;
#pragma omp parallel num_threads(threads)
  {
#pragma omp barrier
#pragma omp single
    start = clock_seconds();
    // implicit barrier after single: every thread sees `start`
    const int64_t rounds =
        fma_rounds_until(start + kDurationSeconds, 1.0f + 0.01f * omp_get_thread_num());
    total_rounds.fetch_add(rounds, std::memory_order_relaxed);
#pragma omp barrier
#pragma omp single
    end = clock_seconds();
  }
  const double flops = static_cast<double>(total_rounds.load()) * kInnerIters * kChains * 8 * 2;
  return flops / (end - start) * 1e-9;
}

}  // namespace

double measure_fma_peak_gflops(int threads) {
  threads = std::max(threads, 1);
  double best = 0.0;
  for (int trial = 0; trial < 3; ++trial) best = std::max(best, one_trial(threads));
  return best;
}

}  // namespace convgen
