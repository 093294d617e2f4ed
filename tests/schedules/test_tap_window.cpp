// Cropped taps (schedules/tap_window.h) against the definitional references: over a sweep
// of small images, kernels, strides, asymmetric pads and dilations, the cropped layer on
// cropped weights gives d's forward and backward-data exactly, the expanded cropped
// weight gradient is d's exactly (integer-valued data: every sum is exact), and the
// window is tight (its first and last rows and columns each read input somewhere).
#include <catch2/catch.hpp>

#include <random>

#include "schedules/tap_window.h"
#include "tests/common/reference_conv.h"
#include "tests/common/reference_conv_backward.h"

using namespace convgen;

namespace {

std::vector<float> integers(size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (float& x : v) x = float(int(rng() % 7) - 3);
  return v;
}

// Does tap t of an axis read input for some output position?
bool reads_input(int64_t t, int64_t in, int64_t out, int64_t stride, int64_t pad, int64_t dilation) {
  for (int64_t p = 0; p < out; ++p) {
    const int64_t i = p * stride - pad + t * dilation;
    if (i >= 0 && i < in) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("cropped taps: same outputs and gradients as the whole kernel, tight windows", "[tap_window]") {
  std::mt19937 rng(5);
  int cropped_layers = 0, total = 0;
  for (int64_t ih : {1, 2, 3, 4})
    for (int64_t iw : {1, 2, 4})
      for (int64_t k : {1, 2, 3, 5})
        for (int64_t stride : {1, 2, 3})
          for (int64_t pad : {0, 1, 2})
            for (int64_t dilation : {1, 2}) {
              ConvDescriptor d;
              d.mb = 2, d.ic = 2, d.oc = 3, d.ih = ih, d.iw = iw, d.kh = k, d.kw = k == 5 ? 3 : k;
              d.sh = stride, d.sw = stride == 3 ? 1 : stride;
              d.pt = pad, d.pb = pad == 2 ? 1 : pad, d.pl = pad == 1 ? 0 : pad, d.pr = pad;
              d.dh = dilation, d.dw = 1;
              d.bias = true;
              if (d.oh() < 1 || d.ow() < 1) continue;
              ++total;
              const TapWindow w = useful_taps(d);
              const ConvDescriptor c = cropped(d, w);
              INFO(d.normalised() << " -> " << c.normalised());
              REQUIRE(c.oh() == d.oh());
              REQUIRE(c.ow() == d.ow());
              if (w.whole(d)) {
                REQUIRE(c.normalised() == d.normalised());
                continue;
              }
              ++cropped_layers;
              CHECK(reads_input(w.r0, d.ih, d.oh(), d.sh, d.pt, d.dh));
              CHECK(reads_input(w.r0 + w.kh - 1, d.ih, d.oh(), d.sh, d.pt, d.dh));
              CHECK(reads_input(w.s0, d.iw, d.ow(), d.sw, d.pl, d.dw));
              CHECK(reads_input(w.s0 + w.kw - 1, d.iw, d.ow(), d.sw, d.pl, d.dw));
              const std::vector<float> x = integers(size_t(d.mb * d.ih * d.iw * d.ic), rng);
              const std::vector<float> wt = integers(size_t(d.oc * d.icg() * d.kh * d.kw), rng);
              const std::vector<float> b = integers(size_t(d.oc), rng);
              const std::vector<float> dy = integers(size_t(d.mb * d.oh() * d.ow() * d.oc), rng);
              std::vector<float> wc(size_t(d.oc * d.icg() * w.kh * w.kw));
              crop_weights(d, w, wt.data(), wc.data(), 0, d.oc);
              CHECK(test::reference_forward(c, x, wc, b).y == test::reference_forward(d, x, wt, b).y);
              CHECK(test::reference_backward_data(c, dy, wc) == test::reference_backward_data(d, dy, wt));
              const test::WeightGradients whole = test::reference_backward_weights(d, x, dy);
              const test::WeightGradients part = test::reference_backward_weights(c, x, dy);
              std::vector<float> part_f(part.dw.begin(), part.dw.end()), expanded(wt.size(), 7.0f);
              expand_weight_gradient(d, w, part_f.data(), expanded.data(), 0, d.oc);
              CHECK(std::vector<double>(expanded.begin(), expanded.end()) == whole.dw);
              CHECK(part.db == whole.db);
            }
  // The sweep must actually crop: 1x1 and 2x2 images under 3x3 and 5x3 kernels do.
  CHECK(cropped_layers > 50);
  CHECK(total > cropped_layers);
}

TEST_CASE("cropped taps: the cases the trainer meets", "[tap_window]") {
  ConvDescriptor d = parse_descriptor("mb16ic512ih1iw1oc512kh3kw3ph1pw1");
  TapWindow w = useful_taps(d);
  CHECK((w.r0 == 1 && w.kh == 1 && w.s0 == 1 && w.kw == 1));
  CHECK(cropped(d, w).normalised() == parse_descriptor("mb16ic512ih1iw1oc512kh1kw1").normalised());
  d = parse_descriptor("mb16ic256ih2iw2oc512kh3kw3sh2sw2ph1pw1");  // ResNet's layer4.0 at 32x32
  w = useful_taps(d);
  CHECK((w.r0 == 1 && w.kh == 2 && w.s0 == 1 && w.kw == 2));
  CHECK(cropped(d, w).normalised() == parse_descriptor("mb16ic256ih2iw2oc512kh2kw2sh2sw2").normalised());
  d = parse_descriptor("mb16ic256ih2iw2oc256kh3kw3ph1pw1");  // every tap reads input somewhere
  CHECK(useful_taps(d).whole(d));
}
