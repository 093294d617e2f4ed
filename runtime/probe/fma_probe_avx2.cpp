// Compiled with -mavx2 -mfma (CMakeLists.txt sets it on this file only). Also holds the
// entry point, which checks the CPU for AVX-512F before it calls that probe.
#include <immintrin.h>

#include <algorithm>
#include <stdexcept>

#include "runtime/probe/fma_probe.h"
#include "runtime/probe/fma_probe_kernel.h"

namespace convgen {

double measure_fma_peak_avx512_gflops(int threads);  // runtime/probe/fma_probe_avx512.cpp

namespace {

volatile float g_sink = 0.0f;

struct Avx2Ops {
  using vec = __m256;
  static constexpr int lanes = 8;
  static vec set1(float x) { return _mm256_set1_ps(x); }
  static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  static float sum(vec v) {
    alignas(32) float l[8];
    _mm256_store_ps(l, v);
    float s = 0.0f;
    for (float x : l) s += x;
    return s;
  }
};

}  // namespace

double measure_fma_peak_gflops(int threads, int vector_floats) {
  threads = std::max(threads, 1);
  if (fma_probe_lanes(vector_floats) == 16) {
    if (!__builtin_cpu_supports("avx512f"))
      throw std::invalid_argument("FMA probe: 16-lane (AVX-512F) peak asked for on a CPU without AVX-512F");
    return measure_fma_peak_avx512_gflops(threads);
  }
  return fma_probe_detail::best_of_three<Avx2Ops>(threads, &g_sink);
}

}  // namespace convgen
