// Compiled with -mavx512f -mfma (CMakeLists.txt sets it on this file only); called only
// after runtime/probe/fma_probe_avx2.cpp has checked that the CPU has AVX-512F.
#include <immintrin.h>

#include "runtime/probe/fma_probe_kernel.h"

namespace convgen {
namespace {

volatile float g_sink = 0.0f;

struct Avx512Ops {
  using vec = __m512;
  static constexpr int lanes = 16;
  static vec set1(float x) { return _mm512_set1_ps(x); }
  static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static float sum(vec v) { return _mm512_reduce_add_ps(v); }
};

}  // namespace

double measure_fma_peak_avx512_gflops(int threads) {
  return fma_probe_detail::best_of_three<Avx512Ops>(threads, &g_sink);
}

}  // namespace convgen
