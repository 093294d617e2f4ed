// Activations after a Conv fold into its kernel's epilogue (generator/model/fusion.h):
// Clip and LeakyRelu give the unfused graph's bits, HardSwish and SiLU (x * Sigmoid(x))
// agree within the bound generator/conv/epilogue.h states; a Conv whose output is read
// elsewhere too keeps its activation as a separate op. Integer data, 1 and 2 threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "tests/common/onnx_test_models.h"
#include "tests/model/integer_model_run.h"

using namespace convgen;
using namespace convgen::model;

namespace {

using test::integer_floats;
using test::run_on_integers;

// x [2, 8, 6, 6] -> conv_clip (3x3 pad 1) -> Clip(0, 6) -> y_clip;
//   conv_leaky (1x1) -> LeakyRelu(0.1) -> y_leaky;  conv_hardswish (3x3) -> HardSwish -> y_hardswish;
//   conv_silu (1x1, bias) -> Sigmoid, Mul(conv, sigmoid) -> y_silu;
//   conv_shared (1x1) -> Clip(-2, 2) -> y_shared_clip, and conv_shared's output is y_shared too.
std::string activations_model() {
  test::OnnxModelBuilder b(14);
  b.input("x", {2, 8, 6, 6});
  for (const char* y : {"y_clip", "y_leaky", "y_hardswish", "y_silu", "y_shared_clip", "y_shared"}) b.output(y, 4);
  auto weights = [&](const std::string& name, const std::vector<int64_t>& shape, unsigned seed) {
    test::integer_initializer(b, name, shape, seed);
  };
  weights("w_clip", {8, 8, 3, 3}, 1);
  weights("w_leaky", {4, 8, 1, 1}, 2);
  weights("w_hardswish", {4, 8, 3, 3}, 3);
  weights("w_silu", {6, 8, 1, 1}, 4);
  weights("b_silu", {6}, 5);
  weights("w_shared", {4, 8, 1, 1}, 6);
  b.float_initializer("zero", {}, {0.0f});
  b.float_initializer("six", {}, {6.0f});
  b.float_initializer("minus_two", {}, {-2.0f});
  b.float_initializer("two", {}, {2.0f});
  test::set_ints(b.node("Conv", {"x", "w_clip"}, {"c_clip"}, "conv_clip"), "pads", {1, 1, 1, 1});
  b.node("Clip", {"c_clip", "zero", "six"}, {"y_clip"}, "clip");
  b.node("Conv", {"x", "w_leaky"}, {"c_leaky"}, "conv_leaky");
  test::set_float(b.node("LeakyRelu", {"c_leaky"}, {"y_leaky"}, "leaky"), "alpha", 0.1f);
  b.node("Conv", {"x", "w_hardswish"}, {"c_hardswish"}, "conv_hardswish");
  b.node("HardSwish", {"c_hardswish"}, {"y_hardswish"}, "hardswish");
  b.node("Conv", {"x", "w_silu", "b_silu"}, {"c_silu"}, "conv_silu");
  b.node("Sigmoid", {"c_silu"}, {"gate"}, "sigmoid");
  b.node("Mul", {"gate", "c_silu"}, {"y_silu"}, "mul");
  b.node("Conv", {"x", "w_shared"}, {"y_shared"}, "conv_shared");
  b.node("Clip", {"y_shared", "minus_two", "two"}, {"y_shared_clip"}, "shared_clip");
  return b.write("activations");
}

}  // namespace

TEST_CASE("epilogue fusion: Clip, LeakyRelu, HardSwish and SiLU fold into their Conv", "[executor][fusion]") {
  const Graph g = import_onnx(activations_model());
  Graph fused = g;
  std::vector<std::string> why;
  fuse_for_inference(fused, &why);
  auto said = [&](const std::string& text) {
    return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  CHECK(said("clip fused into conv_clip's epilogue"));
  CHECK(said("leaky fused into conv_leaky's epilogue"));
  CHECK(said("hardswish fused into conv_hardswish's epilogue"));
  CHECK(said("sigmoid and mul (x * Sigmoid(x)) fused into conv_silu's epilogue"));
  CHECK_FALSE(said("shared_clip fused"));
  std::map<Op, int> ops;
  for (const Node& n : fused.nodes) ++ops[n.op];
  CHECK(ops[Op::Conv] == 5);
  CHECK(ops[Op::Clip] == 1);  // the shared Conv's
  CHECK(ops[Op::LeakyRelu] + ops[Op::HardSwish] + ops[Op::Sigmoid] + ops[Op::Mul] == 0);
  for (const Node& n : fused.nodes) {
    if (n.op != Op::Conv) continue;
    INFO(n.name);
    const ConvDescriptor d = conv_descriptor(fused, n);
    const std::string flag = activation_flag(d);
    if (n.name == "conv_clip") CHECK(flag == "clip(0,6)");
    if (n.name == "conv_leaky") CHECK(flag == "leakyrelu(0.1)");
    if (n.name == "conv_hardswish") CHECK(flag == "hardswish");
    if (n.name == "conv_silu") CHECK(flag == "silu");
    if (n.name == "conv_shared") CHECK(flag.empty());
  }
}

TEST_CASE("epilogue fusion: same bits as the separate ops, HardSwish and SiLU within 8 ulps", "[executor][fusion]") {
  const Graph g = import_onnx(activations_model());
  const std::vector<std::string> names = {"y_clip", "y_leaky", "y_hardswish", "y_silu", "y_shared_clip", "y_shared"};
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    const std::vector<Tensor> want = run_on_integers(g, false, threads);
    const std::vector<Tensor> got = run_on_integers(g, true, threads);
    REQUIRE(got.size() == names.size());
    for (size_t o = 0; o < names.size(); ++o) {
      INFO(names[o]);
      REQUIRE(got[o].shape == want[o].shape);
      const bool exact = names[o] != "y_hardswish" && names[o] != "y_silu";
      size_t off = 0, inexact = 0;
      for (size_t i = 0; i < got[o].data.size(); ++i) {
        const double a = got[o].data[i], b = want[o].data[i];
        inexact += a != b;
        off += std::fabs(a - b) > inexact_activation_bound(b);
      }
      CHECK(off == 0);
      if (exact) CHECK(inexact == 0);
    }
    // The activations bite: Clip caps at 6, LeakyRelu scales negatives, SiLU is not x.
    const auto& clip = got[0].data;
    CHECK(*std::max_element(clip.begin(), clip.end()) == 6.0f);
    CHECK(*std::min_element(clip.begin(), clip.end()) == 0.0f);
    const auto& silu = got[3].data;
    CHECK(std::any_of(silu.begin(), silu.end(), [](float v) { return v < 0.0f && v > -0.3f; }));
  }
  // NaN goes through Clip and LeakyRelu as through the separate ops (std::max/min keep it).
  {
    auto with_nan = [&](bool fuse) {
      return run_on_integers(g, fuse, 1, [](std::map<std::string, Tensor>& in) { in.at("x").data[100] = std::nanf(""); });
    };
    const std::vector<Tensor> want = with_nan(false), got = with_nan(true);
    for (size_t o : {size_t(0), size_t(1)}) {
      INFO(names[o] << " with a NaN input");
      size_t nans = 0, differ = 0;
      for (size_t i = 0; i < got[o].data.size(); ++i) {
        nans += std::isnan(want[o].data[i]);
        differ += std::isnan(got[o].data[i]) != std::isnan(want[o].data[i]) ||
                  (!std::isnan(want[o].data[i]) && got[o].data[i] != want[o].data[i]);
      }
      CHECK(nans > 0);
      CHECK(differ == 0);
    }
  }
  // And the fused outputs are the same bits on 1 and 2 threads.
  const std::vector<Tensor> one = run_on_integers(g, true, 1), two = run_on_integers(g, true, 2);
  for (size_t o = 0; o < one.size(); ++o) CHECK(one[o].data == two[o].data);
}

TEST_CASE("epilogue fusion: a Clip of unbounded range or a LeakyRelu of infinite slope stays a separate op",
          "[executor][fusion]") {
  // The descriptor grammar holds finite numbers only (docs/descriptor.md): these must not
  // reach a kernel, and --verbose says why.
  test::OnnxModelBuilder b(14);
  b.input("x", {1, 4, 5, 5});
  b.output("y_clip", 4).output("y_leaky", 4);
  test::integer_initializer(b, "w_clip", {4, 4, 1, 1}, 1);
  test::integer_initializer(b, "w_leaky", {4, 4, 1, 1}, 2);
  b.float_initializer("low", {}, {-std::numeric_limits<float>::infinity()});
  b.float_initializer("six", {}, {6.0f});
  b.node("Conv", {"x", "w_clip"}, {"c_clip"}, "conv_clip");
  b.node("Clip", {"c_clip", "low", "six"}, {"y_clip"}, "clip");
  b.node("Conv", {"x", "w_leaky"}, {"c_leaky"}, "conv_leaky");
  test::set_float(b.node("LeakyRelu", {"c_leaky"}, {"y_leaky"}, "leaky"), "alpha",
                  std::numeric_limits<float>::infinity());
  Graph g = import_onnx(b.write("unbounded"));
  std::vector<std::string> why;
  fuse_for_inference(g, &why);
  auto said = [&](const std::string& text) {
    return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  CHECK(said("clip not fused into conv_clip: its bounds are not finite and ordered"));
  CHECK(said("leaky not fused into conv_leaky: its slope is not finite"));
  std::map<Op, int> ops;
  for (const Node& n : g.nodes) ++ops[n.op];
  CHECK(ops[Op::Clip] == 1);
  CHECK(ops[Op::LeakyRelu] == 1);
}
