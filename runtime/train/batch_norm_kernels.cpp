#include "runtime/train/batch_norm_kernels.h"

namespace convgen::model::bn {

#define CONVGEN_BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {

// dy where the fused ReLU passed its input (relu_y > 0), else 0; dy itself without one.
template <bool kRelu>
__attribute__((always_inline)) inline float masked(const float* __restrict dy, const float* __restrict relu_y,
                                                   int64_t c) {
  const float g = dy[c];  // loaded unconditionally: a select, not a branch, so the loop vectorises
  if constexpr (kRelu) return relu_y[c] > 0.0f ? g : 0.0f;
  return g;
}

// x's normalised value at channel c, in double.
__attribute__((always_inline)) inline double normalised(const float* __restrict x, const double* __restrict mean,
                                                        const float* __restrict invstd, int64_t c) {
  return (double(x[c]) - mean[c]) * double(invstd[c]);
}

template <bool kRelu>
__attribute__((always_inline)) inline void gradient_sums(const float* __restrict x, const float* __restrict dy,
                                                         const float* __restrict relu_y, int64_t pixels,
                                                         int64_t channels, const double* __restrict mean,
                                                         const float* __restrict invstd, double* __restrict dy_sum,
                                                         double* __restrict dy_xhat_sum) {
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t o = p * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      const double xhat = normalised(x + o, mean, invstd, c);
      const float g = masked<kRelu>(dy + o, kRelu ? relu_y + o : nullptr, c);
      dy_sum[c] += g;
      dy_xhat_sum[c] += double(g) * xhat;
    }
  }
}

template <bool kRelu, bool kAccumulate>
__attribute__((always_inline)) inline void gradient(const float* __restrict x, const float* __restrict dy,
                                                    const float* __restrict relu_y, int64_t pixels, int64_t channels,
                                                    const double* __restrict mean, const float* __restrict invstd,
                                                    const double* __restrict a, const double* __restrict m1,
                                                    const double* __restrict m2, float* __restrict dx) {
  for (int64_t p = 0; p < pixels; ++p) {
    const int64_t o = p * channels;
#pragma omp simd
    for (int64_t c = 0; c < channels; ++c) {
      const double xhat = normalised(x + o, mean, invstd, c);
      const float g = masked<kRelu>(dy + o, kRelu ? relu_y + o : nullptr, c);
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

CONVGEN_BN_CLONES void add_gradient_sums(const float* x, const float* dy, const float* relu_y, int64_t pixels,
                                         int64_t channels, const double* mean, const float* invstd, double* dy_sum,
                                         double* dy_xhat_sum) {
  if (relu_y) return gradient_sums<true>(x, dy, relu_y, pixels, channels, mean, invstd, dy_sum, dy_xhat_sum);
  gradient_sums<false>(x, dy, nullptr, pixels, channels, mean, invstd, dy_sum, dy_xhat_sum);
}

CONVGEN_BN_CLONES void scale_shift(const float* __restrict x, int64_t pixels, int64_t channels,
                                   const float* __restrict alpha, const float* __restrict beta, bool relu,
                                   float* __restrict y) {
  if (relu) {
    for (int64_t p = 0; p < pixels; ++p, x += channels, y += channels)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) {
        const float v = x[c] * alpha[c] + beta[c];
        y[c] = v > 0.0f ? v : 0.0f;  // ops::unary's Relu, bit for bit
      }
  } else {
    for (int64_t p = 0; p < pixels; ++p, x += channels, y += channels)
#pragma omp simd
      for (int64_t c = 0; c < channels; ++c) y[c] = x[c] * alpha[c] + beta[c];
  }
}

CONVGEN_BN_CLONES void input_gradient(const float* x, const float* dy, const float* relu_y, int64_t pixels,
                                      int64_t channels, const double* mean, const float* invstd, const double* a,
                                      const double* m1, const double* m2, bool accumulate, float* dx) {
  if (relu_y) {
    if (accumulate) return gradient<true, true>(x, dy, relu_y, pixels, channels, mean, invstd, a, m1, m2, dx);
    return gradient<true, false>(x, dy, relu_y, pixels, channels, mean, invstd, a, m1, m2, dx);
  }
  if (accumulate) return gradient<false, true>(x, dy, nullptr, pixels, channels, mean, invstd, a, m1, m2, dx);
  gradient<false, false>(x, dy, nullptr, pixels, channels, mean, invstd, a, m1, m2, dx);
}

}  // namespace convgen::model::bn
