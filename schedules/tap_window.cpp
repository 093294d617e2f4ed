#include "schedules/tap_window.h"

#include <algorithm>
#include <vector>

namespace convgen {

namespace {

// [first, last] useful taps along one axis (first > last: none): tap t reads input row
// p * stride - pad + t * dilation for output rows p = 0 .. out - 1.
std::pair<int64_t, int64_t> useful_range(int64_t in, int64_t out, int64_t taps, int64_t stride, int64_t pad,
                                         int64_t dilation) {
  int64_t first = taps, last = -1;
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p = 0; p < out; ++p) {
      const int64_t row = p * stride - pad + t * dilation;
      if (row >= 0 && row < in) {
        first = std::min(first, t);
        last = std::max(last, t);
        break;
      }
    }
  return {first, last};
}

}  // namespace

TapWindow useful_taps(const ConvDescriptor& d) {
  const TapWindow whole{0, d.kh, 0, d.kw};
  const auto [r0, r1] = useful_range(d.ih, d.oh(), d.kh, d.sh, d.pt, d.dh);
  const auto [s0, s1] = useful_range(d.iw, d.ow(), d.kw, d.sw, d.pl, d.dw);
  if (r0 > r1 || s0 > s1) return whole;  // no tap reads input: nothing to gain, keep the layer as it is
  const TapWindow w{r0, r1 - r0 + 1, s0, s1 - s0 + 1};
  if (w.whole(d)) return whole;
  const ConvDescriptor c = cropped(d, w);
  if (c.pt < 0 || c.pb < 0 || c.pl < 0 || c.pr < 0 || c.oh() != d.oh() || c.ow() != d.ow()) return whole;
  return w;
}

ConvDescriptor cropped(const ConvDescriptor& d, const TapWindow& w) {
  if (w.whole(d)) return d;
  ConvDescriptor c = d;
  c.kh = w.kh, c.kw = w.kw;
  // Output pixel p's first tap now reads row p * sh - pt + r0 * dh.
  c.pt = d.pt - w.r0 * d.dh;
  c.pl = d.pl - w.s0 * d.dw;
  // The bottom / right padding that keeps the output size (the last output row's last
  // kept tap must stay inside the padded extent).
  c.pb = std::max<int64_t>(0, (d.oh() - 1) * d.sh + (w.kh - 1) * d.dh + 1 - d.ih - c.pt);
  c.pr = std::max<int64_t>(0, (d.ow() - 1) * d.sw + (w.kw - 1) * d.dw + 1 - d.iw - c.pl);
  return c;
}

void crop_weights(const ConvDescriptor& d, const TapWindow& w, const float* full, float* out, int64_t oc_begin,
                  int64_t oc_end) {
  const int64_t icg = d.icg(), taps = d.kh * d.kw, kept = w.kh * w.kw;
  for (int64_t k = oc_begin; k < oc_end; ++k)
    for (int64_t c = 0; c < icg; ++c) {
      const float* from = full + (k * icg + c) * taps;
      float* to = out + (k * icg + c) * kept;
      for (int64_t r = 0; r < w.kh; ++r)
        for (int64_t s = 0; s < w.kw; ++s) to[r * w.kw + s] = from[(w.r0 + r) * d.kw + w.s0 + s];
    }
}

void expand_weight_gradient(const ConvDescriptor& d, const TapWindow& w, const float* cropped_dw, float* full,
                            int64_t oc_begin, int64_t oc_end) {
  const int64_t icg = d.icg(), taps = d.kh * d.kw, kept = w.kh * w.kw;
  for (int64_t k = oc_begin; k < oc_end; ++k)
    for (int64_t c = 0; c < icg; ++c) {
      const float* from = cropped_dw + (k * icg + c) * kept;
      float* to = full + (k * icg + c) * taps;
      std::fill(to, to + taps, 0.0f);
      for (int64_t r = 0; r < w.kh; ++r)
        for (int64_t s = 0; s < w.kw; ++s) to[(w.r0 + r) * d.kw + w.s0 + s] = from[r * w.kw + s];
    }
}

void expand_weight_gradient_elements(const ConvDescriptor& d, const TapWindow& w, const float* cropped_dw,
                                     int64_t begin, int64_t end, float* out) {
  const int64_t taps = d.kh * d.kw, kept = w.kh * w.kw;
  // Each tap of d: its index among the kept taps, or -1; each kept tap: its tap of d.
  std::vector<int64_t> source(static_cast<size_t>(taps), -1), target(static_cast<size_t>(kept));
  for (int64_t r = 0; r < w.kh; ++r)
    for (int64_t s = 0; s < w.kw; ++s) {
      const int64_t t = (w.r0 + r) * d.kw + w.s0 + s;
      source[static_cast<size_t>(t)] = r * w.kw + s;
      target[static_cast<size_t>(r * w.kw + s)] = t;
    }
  for (int64_t group = begin / taps; group * taps < end; ++group) {  // one (output, input channel) pair
    const int64_t first = group * taps, lo = std::max(begin, first), hi = std::min(end, first + taps);
    const float* from = cropped_dw + group * kept;
    if (lo == first && hi == first + taps) {  // the whole group: zeros, then the kept taps
      float* to = out + (first - begin);
      std::fill(to, to + taps, 0.0f);
      for (int64_t j = 0; j < kept; ++j) to[target[static_cast<size_t>(j)]] = from[j];
      continue;
    }
    for (int64_t i = lo; i < hi; ++i) {  // a group cut by the range's ends
      const int64_t t = source[static_cast<size_t>(i - first)];
      out[i - begin] = t >= 0 ? from[t] : 0.0f;
    }
  }
}

}  // namespace convgen
