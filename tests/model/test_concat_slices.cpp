// A channel Concat of Conv outputs is written in place by the Convs' kernels
// (generator/model/concat_slices.h): no Concat step, the Convs' outputs placed inside the
// Concat's buffer, the same bits as the copying Concat. Refused, with the reason: an input
// that is not a Conv's output, or a Conv output read elsewhere too.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/model/plan.h"
#include "generator/onnx/import.h"
#include "tests/common/onnx_test_models.h"
#include "tests/model/integer_model_run.h"

using namespace convgen;
using namespace convgen::model;

namespace {

using test::run_on_integers;

// x [2, 6, 7, 7]:
//   fire:    Concat(Relu(Conv1x1 -> 3), Conv3x3 pad 1 -> 5, Conv1x1 s1 of MaxPool(x) -> 4) -> y_fire
//   mixed:   Concat(Conv1x1(x) -> 2, x)                                                  -> y_mixed
//   shared:  Concat(Conv1x1(x) -> 2 (also y_shared), Conv1x1(x) -> 3)                      -> y_shared_cat
std::string concat_model() {
  test::OnnxModelBuilder b(13);
  b.input("x", {2, 6, 7, 7});
  for (const char* y : {"y_fire", "y_mixed", "y_shared_cat", "y_shared"}) b.output(y, 4);
  unsigned seed = 1;
  auto weights = [&](const std::string& name, const std::vector<int64_t>& shape) {
    test::integer_initializer(b, name, shape, seed++);
  };
  weights("w_e1", {3, 6, 1, 1});
  weights("w_e3", {5, 6, 3, 3});
  weights("b_e3", {5});
  weights("w_pool", {4, 6, 1, 1});
  weights("w_mixed", {2, 6, 1, 1});
  weights("w_s1", {2, 6, 1, 1});
  weights("w_s2", {3, 6, 1, 1});
  b.node("Conv", {"x", "w_e1"}, {"c_e1"}, "conv_e1");
  b.node("Relu", {"c_e1"}, {"e1"}, "relu_e1");
  test::set_ints(b.node("Conv", {"x", "w_e3", "b_e3"}, {"e3"}, "conv_e3"), "pads", {1, 1, 1, 1});
  onnx::NodeProto& pool = b.node("MaxPool", {"x"}, {"pooled"}, "pool");
  test::set_ints(pool, "kernel_shape", {3, 3});
  test::set_ints(pool, "pads", {1, 1, 1, 1});
  b.node("Conv", {"pooled", "w_pool"}, {"e_pool"}, "conv_pool");
  test::set_int(b.node("Concat", {"e1", "e3", "e_pool"}, {"y_fire"}, "concat_fire"), "axis", 1);
  b.node("Conv", {"x", "w_mixed"}, {"c_mixed"}, "conv_mixed");
  test::set_int(b.node("Concat", {"c_mixed", "x"}, {"y_mixed"}, "concat_mixed"), "axis", 1);
  b.node("Conv", {"x", "w_s1"}, {"y_shared"}, "conv_s1");
  b.node("Conv", {"x", "w_s2"}, {"c_s2"}, "conv_s2");
  test::set_int(b.node("Concat", {"y_shared", "c_s2"}, {"y_shared_cat"}, "concat_shared"), "axis", 1);
  return b.write("concat_slices");
}

bool said(const std::vector<std::string>& why, const std::string& text) {
  return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("concat slices: the Convs of a channel Concat write their slices, the Concat copies nothing",
          "[executor][fusion]") {
  const Graph g = import_onnx(concat_model());
  Graph fused = g;
  std::vector<std::string> why;
  fuse_for_inference(fused, &why);
  CHECK(said(why, "concat_fire: its 3 Convs write their channels in place"));
  CHECK(said(why, "concat_mixed copies its inputs: input 'x' is not a Conv's output"));
  CHECK(said(why, "concat_shared copies its inputs: input 'y_shared' is read elsewhere too"));
  std::map<std::string, ConvDescriptor> layers;
  for (const Node& n : fused.nodes)
    if (n.op == Op::Conv) layers[n.name] = conv_descriptor(fused, n);
  CHECK(layers["conv_e1"].out_stride == 12);
  CHECK(layers["conv_e3"].out_stride == 12);
  CHECK(layers["conv_pool"].out_stride == 12);
  CHECK(layers["conv_mixed"].out_pixel_stride() == 2);

  // The plan: one Concat step fewer, the three outputs inside y_fire at channels 0, 3, 8.
  ModelExecutor exec(fused, default_target(), "", nullptr, 1);
  const Plan& plan = exec.plan();
  int concats = 0;
  for (const PlanStep& s : plan.steps) concats += s.kind == StepKind::Concat;
  CHECK(concats == 2);
  std::map<std::string, const PlanBuffer*> by_value;
  for (const PlanBuffer& b : plan.buffers) by_value[b.value] = &b;
  const PlanBuffer& parent = *by_value.at("y_fire");
  CHECK(by_value.at("e1")->offset == parent.offset + 0);
  CHECK(by_value.at("e3")->offset == parent.offset + 3);
  CHECK(by_value.at("e_pool")->offset == parent.offset + 8);
}

TEST_CASE("concat slices: the copying Concat's bits, integer and real data, 1 and 2 threads", "[executor][fusion]") {
  const Graph g = import_onnx(concat_model());
  for (int threads : {1, 2}) {
    test::compare_fused_with_unfused(g, threads, 5, [](const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                                       const std::string& what) {
      INFO(what);
      CHECK(test::first_difference(got, want) == "");
    });
  }
}

TEST_CASE("relabels in place: the GlobalAveragePool-Flatten-Gemm tail is a pool and a kernel, no copies",
          "[executor][fusion]") {
  // x [2, 8, 4, 4] -> Conv 3x3 -> GlobalAveragePool -> Flatten -> Gemm (constant weights,
  // bias) -> y; and Reshape of a value read elsewhere too (y2 and y3), which must copy.
  // The pool averages 2x2 pixels: quarters of integers, so every later sum is exact in
  // fp32 and both graphs must agree bit for bit whatever their order of summation (an
  // average over 9 pixels rounds, and the fused and unfused classifiers then differed in
  // the last bit on an Intel Xeon AVX-512 target).
  test::OnnxModelBuilder b(13);
  b.input("x", {2, 8, 4, 4});
  b.output("y", 2).output("y2", 2).output("y3", 4);
  test::integer_initializer(b, "w", {16, 8, 3, 3}, 1);
  test::integer_initializer(b, "fc_w", {10, 16}, 2);
  test::integer_initializer(b, "fc_b", {10}, 3);
  test::integer_initializer(b, "w3", {4, 8, 1, 1}, 4);
  b.int64_initializer("rows", {2, -1});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("GlobalAveragePool", {"c"}, {"pooled"}, "gap");
  b.node("Flatten", {"pooled"}, {"flat"}, "flatten");
  onnx::NodeProto& fc = b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"y"}, "fc");
  test::set_int(fc, "transB", 1);
  b.node("Conv", {"x", "w3"}, {"y3"}, "conv3");
  b.node("Reshape", {"y3", "rows"}, {"y2"}, "reshape_shared");
  const Graph g = import_onnx(b.write("tail"));
  Graph fused = g;
  fuse_for_inference(fused);
  ModelExecutor exec(fused, default_target(), "", nullptr, 1);
  std::vector<std::string> steps;
  for (const PlanStep& s : exec.plan().steps) steps.push_back(s.node + ":" + op_name(s.op));
  INFO([&] {
    std::string all;
    for (const auto& s : steps) all += s + "\n";
    return all;
  }());
  // After the pool: the classifier's kernel alone (its Reshapes and layout change alias).
  const auto gap = std::find(steps.begin(), steps.end(), "gap:GlobalAveragePool");
  REQUIRE(gap != steps.end());
  REQUIRE(gap + 1 != steps.end());
  CHECK(*(gap + 1) == "fc:Conv");
  CHECK(std::count(steps.begin(), steps.end(), "reshape_shared:Reshape") == 1);  // y3 is read elsewhere: a copy
  // And the values are the unfused graph's.
  for (int threads : {1, 2}) {
    const std::vector<Tensor> want = run_on_integers(g, false, threads), got = run_on_integers(g, true, threads);
    REQUIRE(got.size() == want.size());
    for (size_t o = 0; o < got.size(); ++o) CHECK(got[o].data == want[o].data);
  }
}
