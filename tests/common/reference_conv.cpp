#include "tests/common/reference_conv.h"

#include <cmath>

namespace convgen::test {

ReferenceResult reference_forward(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b) {
  const long P = d.oh(), Q = d.ow(), Cg = d.ic / d.g, Kg = d.oc / d.g;
  ReferenceResult r;
  r.y.assign(d.mb * P * Q * d.oc, 0.0);
  r.abs_sum.assign(r.y.size(), 0.0);
  for (long n = 0; n < d.mb; ++n)
    for (long p = 0; p < P; ++p)
      for (long q = 0; q < Q; ++q)
        for (long k = 0; k < d.oc; ++k) {
          const long group = k / Kg;
          double acc = d.bias ? b[k] : 0.0;
          double mag = d.bias ? std::fabs(b[k]) : 0.0;
          for (long c = 0; c < Cg; ++c)
            for (long i = 0; i < d.kh; ++i)
              for (long j = 0; j < d.kw; ++j) {
                const long row = p * d.sh - d.pt + i * d.dh;
                const long col = q * d.sw - d.pl + j * d.dw;
                if (row < 0 || row >= d.ih || col < 0 || col >= d.iw) continue;  // zero padding
                const double xv = x[((n * d.ih + row) * d.iw + col) * d.ic + group * Cg + c];
                const double wv = w[((k * Cg + c) * d.kh + i) * d.kw + j];
                acc += xv * wv;
                mag += std::fabs(xv * wv);
              }
          if (d.relu && acc < 0) acc = 0;
          const long o = ((n * P + p) * Q + q) * d.oc + k;
          r.y[o] = acc;
          r.abs_sum[o] = mag;
        }
  return r;
}

}  // namespace convgen::test
