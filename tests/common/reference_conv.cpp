#include "tests/common/reference_conv.h"

#include <cmath>

namespace convgen::test {

double reference_activation(const ConvDescriptor& d, double v) {
  if (d.relu) return v < 0 ? 0.0 : v;
  const float f = static_cast<float>(v);
  switch (d.activation) {
    case Activation::None: return v;
    case Activation::Clip: return std::fmin(std::fmax(f, d.clip_lo), d.clip_hi);
    case Activation::LeakyRelu: return f >= 0.0f ? f : d.leaky_alpha * f;
    case Activation::HardSwish: return v * std::fmin(std::fmax(v / 6.0 + 0.5, 0.0), 1.0);
    case Activation::Silu: return v / (1.0 + std::exp(-v));
  }
  return v;
}

ReferenceResult reference_forward(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b) {
  return reference_forward(d, x, w, b, {});
}

ReferenceResult reference_forward(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, const std::vector<float>& residual) {
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
          const long o = ((n * P + p) * Q + q) * d.oc + k;
          if (d.residual) {
            acc += residual.at(o);
            mag += std::fabs(residual[o]);
          }
          acc = reference_activation(d, acc);
          r.y[o] = acc;
          r.abs_sum[o] = mag;
        }
  return r;
}

}  // namespace convgen::test
