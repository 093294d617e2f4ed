// Activation layout conversions at the API boundary. Kernels work in NHWC (channels
// innermost, so the fused im2col packs contiguous channel runs); NCHW callers convert here.
#pragma once

#include <cstdint>

namespace convgen {

// dst[n][h][w][c] = src[n][c][h][w]
void nchw_to_nhwc(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w);
// dst[n][c][h][w] = src[n][h][w][c]
void nhwc_to_nchw(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w);

}  // namespace convgen
