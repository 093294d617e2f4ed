#include "tests/common/reference_conv_backward.h"

namespace convgen::test {

std::vector<double> reference_backward_data(const ConvDescriptor& d, const std::vector<float>& dy,
                                            const std::vector<float>& w) {
  const long P = d.oh(), Q = d.ow(), Cg = d.ic / d.g, Kg = d.oc / d.g;
  std::vector<double> dx(d.mb * d.ih * d.iw * d.ic, 0.0);
  for (long n = 0; n < d.mb; ++n)
    for (long p = 0; p < P; ++p)
      for (long q = 0; q < Q; ++q)
        for (long k = 0; k < d.oc; ++k) {
          const double g = dy[((n * P + p) * Q + q) * d.oc + k];
          const long group = k / Kg;
          for (long c = 0; c < Cg; ++c)
            for (long i = 0; i < d.kh; ++i)
              for (long j = 0; j < d.kw; ++j) {
                const long row = p * d.sh - d.pt + i * d.dh;
                const long col = q * d.sw - d.pl + j * d.dw;
                if (row < 0 || row >= d.ih || col < 0 || col >= d.iw) continue;  // a padding tap
                dx[((n * d.ih + row) * d.iw + col) * d.ic + group * Cg + c] +=
                    g * w[((k * Cg + c) * d.kh + i) * d.kw + j];
              }
        }
  return dx;
}

WeightGradients reference_backward_weights(const ConvDescriptor& d, const std::vector<float>& x,
                                           const std::vector<float>& dy) {
  const long P = d.oh(), Q = d.ow(), Cg = d.ic / d.g, Kg = d.oc / d.g;
  WeightGradients r;
  r.dw.assign(d.oc * Cg * d.kh * d.kw, 0.0);
  r.db.assign(d.oc, 0.0);
  for (long k = 0; k < d.oc; ++k) {
    const long group = k / Kg;
    for (long n = 0; n < d.mb; ++n)
      for (long p = 0; p < P; ++p)
        for (long q = 0; q < Q; ++q) r.db[k] += dy[((n * P + p) * Q + q) * d.oc + k];
    for (long c = 0; c < Cg; ++c)
      for (long i = 0; i < d.kh; ++i)
        for (long j = 0; j < d.kw; ++j) {
          double sum = 0.0;
          for (long n = 0; n < d.mb; ++n)
            for (long p = 0; p < P; ++p)
              for (long q = 0; q < Q; ++q) {
                const long row = p * d.sh - d.pt + i * d.dh;
                const long col = q * d.sw - d.pl + j * d.dw;
                if (row < 0 || row >= d.ih || col < 0 || col >= d.iw) continue;
                sum += static_cast<double>(dy[((n * P + p) * Q + q) * d.oc + k]) *
                       x[((n * d.ih + row) * d.iw + col) * d.ic + group * Cg + c];
              }
          r.dw[((k * Cg + c) * d.kh + i) * d.kw + j] = sum;
        }
  }
  return r;
}

}  // namespace convgen::test
