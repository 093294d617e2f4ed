// The per-element loops of training-mode BatchNormalization over channels-last data
// ([pixels][channels]). Each channel's sums run over the pixels in order, so the bits
// do not depend on the vector width (the channel loops are `omp simd`: independent
// channels, no reassociation); the file is compiled with -ffp-contract=off and
// each loop is cloned for AVX-512, AVX2 and the baseline, which all give the same bits.
//
// An activation fused after the normalisation (the trainer's BatchNormalization + Relu
// or + Clip) is applied in the forward's store, as ops::unary would apply it. Its backward
// masks dy exactly as the separate node's backward would have: a ReLU passes dy where its
// output `y` (the fused output) is > 0; a Clip passes dy where its input, recomputed from
// x with the forward's per-channel alpha and beta, lies in [lo, hi].
#pragma once

#include <cstdint>

namespace convgen::model::bn {

enum class Fused { None, Relu, Clip };

struct FusedActivation {
  Fused kind = Fused::None;
  const float* y = nullptr;                           // Relu: the fused output
  const float* alpha = nullptr, *beta = nullptr;      // Clip: the forward's x * alpha + beta
  float lo = 0.0f, hi = 0.0f;                         // Clip: the bounds
};

// The batch statistics' sums in one pass, shifted by a per-channel constant for
// accuracy: d = x[p][c] - shift[c] in double, s1[c] += d, s2[c] += d * d over the
// pixels. mean = shift + S1/n, var = S2/n - (S1/n)^2 (BatchNormalization's combine).
void add_shifted_moments(const float* x, int64_t pixels, int64_t channels, const float* shift, double* s1,
                         double* s2);

// dy_sum[c] += dy[p][c]; dy_xhat_sum[c] += dy[p][c] * xhat, xhat = (x - mean) * invstd.
void add_gradient_sums(const float* x, const float* dy, const FusedActivation& act, int64_t pixels, int64_t channels,
                       const double* mean, const float* invstd, double* dy_sum, double* dy_xhat_sum);

// y[p][c] = x[p][c] * alpha[c] + beta[c], then the fused activation (act.kind, act.lo, act.hi;
// its pointers are not read).
void scale_shift(const float* x, int64_t pixels, int64_t channels, const float* alpha, const float* beta,
                 const FusedActivation& act, float* y);

// dx = a[c] * (dy - m1[c] - xhat * m2[c]) in double, xhat as above; added to dx when
// `accumulate`, stored otherwise.
void input_gradient(const float* x, const float* dy, const FusedActivation& act, int64_t pixels, int64_t channels,
                    const double* mean, const float* invstd, const double* a, const double* m1, const double* m2,
                    bool accumulate, float* dx);

}  // namespace convgen::model::bn
