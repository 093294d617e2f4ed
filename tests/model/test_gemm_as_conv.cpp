// A Gemm of activations by constant weights runs as a 1x1 convolution for inference
// (generator/model/gemm_as_conv.h): both orientations of B, a bias of shape [N] or [1, N],
// none; alpha != 1 or a non-constant B stay BLIS Gemms. On integer data the outputs are
// the BLIS path's exactly (every sum exact in any order), on 1 and 2 threads.
#include <catch2/catch.hpp>

#include <algorithm>

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

// x [3, 40] -> fc_t (transB, bias [24]) -> y_t; x -> fc_n (B [40, 24], bias [1, 24]) -> y_n;
// x -> fc_plain (transB, no C) -> y_plain; x -> fc_half (alpha 0.5) -> y_half;
// x -> fc_var (B = x's own transpose-free product partner: a graph input) -> y_var.
std::string gemm_model() {
  test::OnnxModelBuilder b(13);
  b.input("x", {3, 40}).input("v", {40, 5});
  for (const char* y : {"y_t", "y_n", "y_plain", "y_half", "y_var"}) b.output(y, 2);
  b.float_initializer("w_t", {24, 40}, integer_floats(24 * 40, -2, 2, 1));
  b.float_initializer("w_n", {40, 24}, integer_floats(40 * 24, -2, 2, 2));
  b.float_initializer("b24", {24}, integer_floats(24, -5, 5, 3));
  b.float_initializer("b1x24", {1, 24}, integer_floats(24, -5, 5, 4));
  test::set_int(b.node("Gemm", {"x", "w_t", "b24"}, {"y_t"}, "fc_t"), "transB", 1);
  b.node("Gemm", {"x", "w_n", "b1x24"}, {"y_n"}, "fc_n");
  test::set_int(b.node("Gemm", {"x", "w_t"}, {"y_plain"}, "fc_plain"), "transB", 1);
  auto& half = b.node("Gemm", {"x", "w_t", "b24"}, {"y_half"}, "fc_half");
  test::set_int(half, "transB", 1);
  test::set_float(half, "alpha", 0.5f);
  b.node("Gemm", {"x", "v"}, {"y_var"}, "fc_var");
  return b.write("gemms");
}

}  // namespace

TEST_CASE("gemm as conv: constant-weight Gemms run as 1x1 convolutions, the same values", "[executor][fusion]") {
  const Graph g = import_onnx(gemm_model());
  std::vector<std::string> why;
  Graph fused = g;
  fuse_for_inference(fused, &why);
  auto said = [&](const std::string& text) {
    return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  CHECK(said("fc_t runs as a 1x1 convolution of 3 one-pixel images (40 -> 24 channels)"));
  CHECK(said("fc_n runs as a 1x1 convolution"));
  CHECK(said("fc_plain runs as a 1x1 convolution"));
  CHECK(said("fc_half kept as a BLIS Gemm: alpha is not 1"));
  CHECK(said("fc_var kept as a BLIS Gemm: B is not a constant"));
  CHECK(std::count_if(fused.nodes.begin(), fused.nodes.end(), [](const Node& n) { return n.op == Op::Conv; }) == 3);
  CHECK(std::count_if(fused.nodes.begin(), fused.nodes.end(), [](const Node& n) { return n.op == Op::Gemm; }) == 2);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    const std::vector<Tensor> want = run_on_integers(g, false, threads), got = run_on_integers(g, true, threads);
    REQUIRE(got.size() == want.size());
    for (size_t o = 0; o < got.size(); ++o) {
      INFO("output " << o);
      CHECK(got[o].shape == want[o].shape);
      CHECK(got[o].data == want[o].data);
    }
  }
}
