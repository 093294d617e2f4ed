#include "runtime/train/batch_norm_kernels.h"

namespace convgen::model::bn {

#define CONVGEN_BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {

// dy where the fused activation passed its input, else 0; dy itself without one. At
// pixel offset o, channel c.
template <Fused kFused>
__attribute__((always_inline)) inline float masked(const float* __restrict x, const float* __restrict dy,
                                                   const FusedActivation& act, int64_t o, int64_t c) {
  const float g = dy[o + c];  // loaded unconditionally: a select, not a branch, so the loop vectorises
  if constexpr (kFused == Fused::Relu) return act.y[o + c] > 0.0f ? g : 0.0f;
  if constexpr (kFused == Fused::Clip) {
    const float z = x[o + c] * act.alpha[c] + act.beta[c];  // scale_shift's value, bit for bit
    return (z >= act.lo && z <= act.hi) ? g : 0.0f;          // ops::unary_backward's Clip
  }
  return g;
}

// x's normalised value at channel c, in double.
__attribute__((always_inline)) inline double normalised(const float* __restrict x, const double* __restrict mean,
                                                        const float* __restrict invstd, int64_t c) {
  return (double(x[c]) - mean[c]) * double(invstd[c]);
}

template <Fused kFused>
__attribute__((always_inline)) inline void gradient_sums(const float* __restrict x, const float* __restrict dy,
                                                         const FusedActivation& act, int64_t pixels, int64_t channels,
                                                         const double* __restrict mean,
                                                         const float* __restrict invstd, double* __restrict dy_sum,
                                                         double* __restrict dy_xhat_sum) {
  const FusedActivation f = act;  // a local copy: its pointers stay in registers across the stores
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t o = p * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      const double xhat = normalised(x + o, mean, invstd, c);
      const float g = masked<kFused>(x, dy, f, o, c);
      dy_sum[c] += g;
      dy_xhat_sum[c] += double(g) * xhat;
    }
  }
}

template <Fused kFused, bool kAccumulate>
__attribute__((always_inline)) inline void gradient(const float* __restrict x, const float* __restrict dy,
                                                    const FusedActivation& act, int64_t pixels, int64_t channels,
                                                    const double* __restrict mean, const float* __restrict invstd,
                                                    const double* __restrict a, const double* __restrict m1,
                                                    const double* __restrict m2, float* __restrict dx) {
  const FusedActivation f = act;  // a local copy: its pointers stay in registers across the stores
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t o = p * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      const double xhat = normalised(x + o, mean, invstd, c);
      const float g = masked<kFused>(x, dy, f, o, c);
      const float v = float(a[c] * (double(g) - m1[c] - xhat * m2[c]));
      if constexpr (kAccumulate)
        dx[o + c] += v;
      else
        dx[o + c] = v;
    }
  }
}

}  // namespace

CONVGEN_BN_CLONES void add_shifted_moments(const float* __restrict x, int64_t pixels, int64_t channels,
                                           const float* __restrict shift, double* __restrict s1,
                                           double* __restrict s2) {
  for (int64_t p = 0; p < pixels; ++p, x += channels)
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      const double d = double(x[c]) - double(shift[c]);
      s1[c] += d;
      s2[c] += d * d;
    }
}

CONVGEN_BN_CLONES void add_gradient_sums(const float* x, const float* dy, const FusedActivation& act, int64_t pixels,
                                         int64_t channels, const double* mean, const float* invstd, double* dy_sum,
                                         double* dy_xhat_sum) {
  switch (act.kind) {
    case Fused::Relu:
      return gradient_sums<Fused::Relu>(x, dy, act, pixels, channels, mean, invstd, dy_sum, dy_xhat_sum);
    case Fused::Clip:
      return gradient_sums<Fused::Clip>(x, dy, act, pixels, channels, mean, invstd, dy_sum, dy_xhat_sum);
    case Fused::None:
      return gradient_sums<Fused::None>(x, dy, act, pixels, channels, mean, invstd, dy_sum, dy_xhat_sum);
  }
}

CONVGEN_BN_CLONES void scale_shift(const float* __restrict x, int64_t pixels, int64_t channels,
                                   const float* __restrict alpha, const float* __restrict beta,
                                   const FusedActivation& act, float* __restrict y) {
  if (act.kind == Fused::Relu) {
    for (int64_t p = 0; p < pixels; ++p, x += channels, y += channels)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) {
        const float v = x[c] * alpha[c] + beta[c];
        y[c] = v > 0.0f ? v : 0.0f;  // ops::unary's Relu, bit for bit
      }
  } else if (act.kind == Fused::Clip) {
    const float lo = act.lo, hi = act.hi;
    for (int64_t p = 0; p < pixels; ++p, x += channels, y += channels)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) {
        const float v = x[c] * alpha[c] + beta[c];
        const float m = v < lo ? lo : v;  // ops::unary's std::min(std::max(v, lo), hi), bit for bit
        y[c] = hi < m ? hi : m;
      }
  } else {
    for (int64_t p = 0; p < pixels; ++p, x += channels, y += channels)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) y[c] = x[c] * alpha[c] + beta[c];
  }
}

CONVGEN_BN_CLONES void input_gradient(const float* x, const float* dy, const FusedActivation& act, int64_t pixels,
                                      int64_t channels, const double* mean, const float* invstd, const double* a,
                                      const double* m1, const double* m2, bool accumulate, float* dx) {
  switch (act.kind) {
    case Fused::Relu:
      if (accumulate) return gradient<Fused::Relu, true>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
      return gradient<Fused::Relu, false>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
    case Fused::Clip:
      if (accumulate) return gradient<Fused::Clip, true>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
      return gradient<Fused::Clip, false>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
    case Fused::None:
      if (accumulate) return gradient<Fused::None, true>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
      return gradient<Fused::None, false>(x, dy, act, pixels, channels, mean, invstd, a, m1, m2, dx);
  }
}

}  // namespace convgen::model::bn
