#include "runtime/ops/layout.h"

namespace convgen {

void nchw_to_nhwc(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch) dst[(i * hw + p) * c + ch] = src[(i * c + ch) * hw + p];
}

void nhwc_to_nchw(const float* src, float* dst, int64_t n, int64_t c, int64_t h, int64_t w) {
  const int64_t hw = h * w;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) dst[(i * c + ch) * hw + p] = src[(i * hw + p) * c + ch];
}

}  // namespace convgen
