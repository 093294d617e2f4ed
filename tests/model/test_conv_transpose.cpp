// ConvTranspose in the in-process executor (the backward-data kernel of its convolution,
// then the bias) against a direct loop over ONNX's definition, bit for bit on integer
// data, over a sweep that hits every attribute: strides, pads, output_padding,
// output_shape, SAME auto_pad, dilations, groups, depthwise, Conv1d, batch > 1, and 1
// and 2 threads (the pixel- and image-parallel kernel variants).
#include <catch2/catch.hpp>

#include <random>

#include <fmt/format.h>

#include "generator/model/executor.h"
#include "generator/onnx/import.h"
#include "tests/common/onnx_test_models.h"

using namespace convgen;

namespace {

struct TransposeCase {
  int64_t mb, cin, cout, h, w;  // h = 0: Conv1d
  std::vector<int64_t> kernel, strides, pads, output_padding, dilations;
  int64_t group = 1;
  bool bias = true;
  std::string auto_pad = "NOTSET";
  std::vector<int64_t> output_shape;
};

// y[n][g*Cog+co][i*s - pb + r*d] += x[n][g*Cig+ci][i] * w[g*Cig+ci][co][r], per spatial axis.
std::vector<float> reference(const TransposeCase& t, const std::vector<float>& x, const std::vector<float>& w,
                             const std::vector<float>& b, const std::vector<int64_t>& out_shape,
                             const std::vector<int64_t>& pads_begin) {
  const bool one_d = t.h == 0;
  const int64_t ih = one_d ? 1 : t.h, iw = t.w, oh = one_d ? 1 : out_shape[2], ow = out_shape.back();
  const int64_t kh = one_d ? 1 : t.kernel[0], kw = t.kernel.back();
  const int64_t sh = one_d ? 1 : t.strides[0], sw = t.strides.back();
  const int64_t dh = one_d ? 1 : t.dilations[0], dw = t.dilations.back();
  const int64_t ph = one_d ? 0 : pads_begin[0], pw = pads_begin.back();
  const int64_t cig = t.cin / t.group, cog = t.cout / t.group;
  std::vector<float> y(static_cast<size_t>(t.mb * t.cout * oh * ow), 0.0f);
  for (int64_t n = 0; n < t.mb; ++n)
    for (int64_t c = 0; c < t.cin; ++c)
      for (int64_t co = 0; co < cog; ++co)
        for (int64_t i = 0; i < ih; ++i)
          for (int64_t j = 0; j < iw; ++j)
            for (int64_t r = 0; r < kh; ++r)
              for (int64_t s = 0; s < kw; ++s) {
                const int64_t oi = i * sh - ph + r * dh, oj = j * sw - pw + s * dw;
                if (oi < 0 || oi >= oh || oj < 0 || oj >= ow) continue;
                const int64_t k = (c / cig) * cog + co;
                y[static_cast<size_t>(((n * t.cout + k) * oh + oi) * ow + oj)] +=
                    x[static_cast<size_t>(((n * t.cin + c) * ih + i) * iw + j)] *
                    w[static_cast<size_t>(((c * cog + co) * kh + r) * kw + s)];
              }
  if (t.bias)
    for (int64_t n = 0; n < t.mb; ++n)
      for (int64_t k = 0; k < t.cout; ++k)
        for (int64_t p = 0; p < oh * ow; ++p) y[static_cast<size_t>((n * t.cout + k) * oh * ow + p)] += b[size_t(k)];
  return y;
}

std::vector<float> integers(size_t n, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<float> v(n);
  for (float& e : v) e = static_cast<float>(d(rng));
  return v;
}

void check_case(const TransposeCase& t, int threads) {
  std::mt19937 rng(static_cast<unsigned>(t.cin * 131 + t.cout * 17 + t.w));
  const bool one_d = t.h == 0;
  const std::vector<int64_t> x_shape = one_d ? std::vector<int64_t>{t.mb, t.cin, t.w} : std::vector<int64_t>{t.mb, t.cin, t.h, t.w};
  std::vector<int64_t> w_shape = {t.cin, t.cout / t.group};
  w_shape.insert(w_shape.end(), t.kernel.begin(), t.kernel.end());
  int64_t w_elements = 1;
  for (int64_t e : w_shape) w_elements *= e;
  const std::vector<float> x = integers(size_t(t.mb * t.cin * (one_d ? 1 : t.h) * t.w), -3, 3, rng);
  const std::vector<float> w = integers(size_t(w_elements), -2, 2, rng);
  const std::vector<float> b = integers(size_t(t.cout), -4, 4, rng);

  test::OnnxModelBuilder m(13);
  m.input("x", x_shape).output("y", int(x_shape.size())).float_initializer("w", w_shape, w);
  std::vector<std::string> inputs = {"x", "w"};
  if (t.bias) {
    m.float_initializer("b", {t.cout}, b);
    inputs.push_back("b");
  }
  onnx::NodeProto& n = m.node("ConvTranspose", inputs, {"y"}, "up");
  test::set_ints(n, "kernel_shape", t.kernel);
  test::set_ints(n, "strides", t.strides);
  if (!t.pads.empty()) test::set_ints(n, "pads", t.pads);
  if (!t.output_padding.empty()) test::set_ints(n, "output_padding", t.output_padding);
  test::set_ints(n, "dilations", t.dilations);
  test::set_int(n, "group", t.group);
  if (t.auto_pad != "NOTSET") test::set_string(n, "auto_pad", t.auto_pad);
  if (!t.output_shape.empty()) test::set_ints(n, "output_shape", t.output_shape);

  model::ImportOptions options;
  options.batch = t.mb;
  model::Graph g = model::import_onnx(m.write("conv_transpose"), options);
  const std::vector<int64_t> out_shape = g.value("y").shape;
  const std::vector<int64_t> pads_begin = g.nodes.at(0).attributes.pads_begin;
  model::ModelExecutor exec(std::move(g), default_target(), "", nullptr, threads);
  Tensor in(x_shape, false);
  in.data.assign(x.begin(), x.end());
  const std::vector<Tensor> out = exec.run({{"x", in}});
  const std::vector<float> want = reference(t, x, w, b, out_shape, pads_begin);
  REQUIRE(out.at(0).data.size() == want.size());
  size_t differ = 0;
  for (size_t i = 0; i < want.size(); ++i) differ += out[0].data[i] != want[i];
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("ConvTranspose: the backward-data kernel matches ONNX's definition bit for bit", "[executor][conv_transpose]") {
  const std::vector<TransposeCase> cases = {
      // U-Net / FCN / DCGAN up-sampling: k2 s2, k4 s2 p1, k3 s2 p1 output_padding 1
      {2, 16, 8, 5, 6, {2, 2}, {2, 2}, {0, 0, 0, 0}, {}, {1, 1}},
      {1, 8, 16, 4, 4, {4, 4}, {2, 2}, {1, 1, 1, 1}, {}, {1, 1}},
      {3, 17, 5, 5, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}},
      // stride 1 (a "full" convolution), asymmetric pads and kernels, stride 3 with
      // output_padding 2, different strides per axis
      {1, 5, 7, 6, 5, {3, 3}, {1, 1}, {0, 0, 0, 0}, {}, {1, 1}, 1, false},
      {2, 6, 9, 4, 7, {3, 2}, {2, 3}, {2, 0, 1, 1}, {1, 2}, {1, 1}},
      {1, 4, 4, 3, 3, {3, 3}, {3, 3}, {0, 0, 0, 0}, {2, 1}, {1, 1}},
      // dilation, groups, depthwise, 1x1
      {1, 6, 6, 5, 5, {3, 3}, {2, 2}, {2, 2, 2, 2}, {1, 1}, {2, 2}},
      {2, 8, 12, 5, 4, {3, 3}, {2, 2}, {1, 1, 1, 1}, {0, 1}, {1, 1}, 4},
      {4, 16, 16, 6, 6, {4, 4}, {2, 2}, {1, 1, 1, 1}, {}, {1, 1}, 16},
      {5, 32, 24, 3, 3, {1, 1}, {1, 1}, {0, 0, 0, 0}, {}, {1, 1}},
      // output_shape and SAME auto_pad resolve to pads
      {1, 3, 2, 3, 3, {3, 3}, {3, 2}, {}, {}, {1, 1}, 1, true, "NOTSET", {10, 8}},
      {2, 4, 3, 4, 5, {3, 3}, {2, 2}, {}, {}, {1, 1}, 1, true, "SAME_UPPER"},
      {2, 4, 3, 4, 5, {4, 4}, {2, 2}, {}, {}, {1, 1}, 1, true, "SAME_LOWER"},
      // Conv1d
      {3, 7, 5, 0, 9, {4}, {2}, {1, 1}, {1}, {1}},
  };
  for (int threads : {1, 2})
    for (size_t i = 0; i < cases.size(); ++i) {
      INFO(fmt::format("case {}, {} threads", i, threads));
      check_case(cases[i], threads);
    }
}
