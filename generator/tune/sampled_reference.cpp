#include "generator/tune/sampled_reference.h"

#include <algorithm>
#include <cmath>

namespace convgen {
namespace {

// dY as the backward passes read it: masked by the forward output when ReLU was fused.
double masked_dy(const ConvDescriptor& d, const PassTensors& in, int64_t i) {
  if (d.relu && !(in.y[static_cast<size_t>(i)] > 0)) return 0.0;
  return in.dy[static_cast<size_t>(i)];
}

// The fused activation of an exact sum: in float where the kernel's result is exact (ReLU,
// Clip, LeakyRelu), by definition in double for HardSwish and Silu.
double activated(const ConvDescriptor& d, double acc) {
  const float f = static_cast<float>(acc);
  if (d.relu) return std::max(acc, 0.0);
  if (d.activation == Activation::Clip) return std::min(std::max(f, d.clip_lo), d.clip_hi);
  if (d.activation == Activation::LeakyRelu) return f >= 0.0f ? f : d.leaky_alpha * f;
  if (d.activation == Activation::HardSwish) return acc * std::clamp(acc / 6.0 + 0.5, 0.0, 1.0);
  if (d.activation == Activation::Silu) return acc / (1.0 + std::exp(-acc));
  return acc;
}

}  // namespace

double reference_forward_at(const ConvDescriptor& d, const PassTensors& in, int64_t index) {
  const int64_t K = d.oc, Q = d.ow(), P = d.oh(), cg = d.icg(), kg = d.ocg();
  const int64_t k = index % K, q = index / K % Q, p = index / (K * Q) % P, n = index / (K * Q * P);
  const int64_t g = k / kg;
  double acc = d.bias ? in.bias[static_cast<size_t>(k)] : 0.0;
  for (int64_t r = 0; r < d.kh; ++r) {
    const int64_t h = p * d.sh - d.pt + r * d.dh;
    if (h < 0 || h >= d.ih) continue;
    for (int64_t s = 0; s < d.kw; ++s) {
      const int64_t w = q * d.sw - d.pl + s * d.dw;
      if (w < 0 || w >= d.iw) continue;
      for (int64_t c = 0; c < cg; ++c) {
        const double xv = in.x[static_cast<size_t>(((n * d.ih + h) * d.iw + w) * d.ic + g * cg + c)];
        const double wv = in.w[static_cast<size_t>(((k * cg + c) * d.kh + r) * d.kw + s)];
        acc += xv * wv;
      }
    }
  }
  if (d.residual) acc += in.residual[static_cast<size_t>(index)];
  return activated(d, acc);
}

double reference_backward_data_at(const ConvDescriptor& d, const PassTensors& in, int64_t index) {
  const int64_t C = d.ic, W = d.iw, H = d.ih, P = d.oh(), Q = d.ow(), cg = d.icg(), kg = d.ocg();
  const int64_t c = index % C, w = index / C % W, h = index / (C * W) % H, n = index / (C * W * H);
  const int64_t g = c / cg, cl = c % cg;
  double acc = 0.0;
  for (int64_t r = 0; r < d.kh; ++r) {
    const int64_t ph = h + d.pt - r * d.dh;
    if (ph < 0 || ph % d.sh != 0 || ph / d.sh >= P) continue;
    const int64_t p = ph / d.sh;
    for (int64_t s = 0; s < d.kw; ++s) {
      const int64_t qw = w + d.pl - s * d.dw;
      if (qw < 0 || qw % d.sw != 0 || qw / d.sw >= Q) continue;
      const int64_t q = qw / d.sw;
      for (int64_t kk = 0; kk < kg; ++kk) {
        const int64_t k = g * kg + kk;
        const double dyv = masked_dy(d, in, ((n * P + p) * Q + q) * d.oc + k);
        acc += dyv * in.w[static_cast<size_t>(((k * cg + cl) * d.kh + r) * d.kw + s)];
      }
    }
  }
  return acc;
}

double reference_backward_weights_at(const ConvDescriptor& d, const PassTensors& in, int64_t index) {
  const int64_t P = d.oh(), Q = d.ow(), cg = d.icg(), kg = d.ocg();
  const int64_t weights = d.oc * cg * d.kh * d.kw;
  if (index >= weights) {
    const int64_t k = index - weights;
    double acc = 0.0;
    for (int64_t i = k; i < d.mb * P * Q * d.oc; i += d.oc) acc += masked_dy(d, in, i);
    return acc;
  }
  const int64_t s = index % d.kw, r = index / d.kw % d.kh, c = index / (d.kw * d.kh) % cg,
                k = index / (d.kw * d.kh * cg);
  const int64_t g = k / kg;
  double acc = 0.0;
  for (int64_t n = 0; n < d.mb; ++n)
    for (int64_t p = 0; p < P; ++p) {
      const int64_t h = p * d.sh - d.pt + r * d.dh;
      if (h < 0 || h >= d.ih) continue;
      for (int64_t q = 0; q < Q; ++q) {
        const int64_t w = q * d.sw - d.pl + s * d.dw;
        if (w < 0 || w >= d.iw) continue;
        acc += double(in.x[static_cast<size_t>(((n * d.ih + h) * d.iw + w) * d.ic + g * cg + c)]) *
               masked_dy(d, in, ((n * P + p) * Q + q) * d.oc + k);
      }
    }
  return acc;
}

}  // namespace convgen
