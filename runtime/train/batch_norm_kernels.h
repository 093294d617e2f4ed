// The per-element loops of training-mode BatchNormalization over channels-last data
// ([pixels][channels]). Each channel's sums run over the pixels in order, so the bits
// do not depend on the vector width (the channel loops are `omp simd`: independent
// channels, no reassociation); the file is compiled with -ffp-contract=off and
// each loop is cloned for AVX-512, AVX2 and the baseline, which all give the same bits.
//
// A ReLU fused after the normalisation (the trainer's BatchNormalization + Relu) is
// applied in the forward's store; its backward is the mask `relu_y` (the fused output):
// dy counts where relu_y > 0 and is zero elsewhere, exactly as a separate Relu backward
// would have written it. relu_y is null when no ReLU is fused.
#pragma once

#include <cstdint>

namespace convgen::model::bn {

// The batch statistics' sums in one pass, shifted by a per-channel constant for
// accuracy: d = x[p][c] - shift[c] in double, s1[c] += d, s2[c] += d * d over the
// pixels. mean = shift + S1/n, var = S2/n - (S1/n)^2 (BatchNormalization's combine).
void add_shifted_moments(const float* x, int64_t pixels, int64_t channels, const float* shift, double* s1,
                         double* s2);

// dy_sum[c] += dy[p][c]; dy_xhat_sum[c] += dy[p][c] * xhat, xhat = (x - mean) * invstd.
void add_gradient_sums(const float* x, const float* dy, const float* relu_y, int64_t pixels, int64_t channels,
                       const double* mean, const float* invstd, double* dy_sum, double* dy_xhat_sum);

// y[p][c] = x[p][c] * alpha[c] + beta[c], then max(0, y) when `relu`.
void scale_shift(const float* x, int64_t pixels, int64_t channels, const float* alpha, const float* beta, bool relu,
                 float* y);

// dx = a[c] * (dy - m1[c] - xhat * m2[c]) in double, xhat as above; added to dx when
// `accumulate`, stored otherwise.
void input_gradient(const float* x, const float* dy, const float* relu_y, int64_t pixels, int64_t channels,
                    const double* mean, const float* invstd, const double* a, const double* m1, const double* m2,
                    bool accumulate, float* dx);

}  // namespace convgen::model::bn
