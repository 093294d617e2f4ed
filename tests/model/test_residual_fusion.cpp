// A residual Add after a Conv folds into the Conv's kernel as its residual input
// (generator/model/fusion.h): the sum comes after the bias and before the activation, in
// float as the separate Add does, so the fused graph gives the unfused graph's bits --
// with real-valued inputs too, where the order of the additions shows. Refused: a Conv
// whose output is read elsewhere, a broadcast, an activation before the sum.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "tests/common/onnx_test_models.h"
#include "tests/model/integer_model_run.h"

using namespace convgen;
using namespace convgen::model;

namespace {

using test::run_on_integers;

// x [2, 8, 6, 6]:
//   basic:      Relu(Add(Conv3x3(Relu(Conv3x3(x)), bias), x))                  -> y_basic
//   downsample: Add(Conv3x3 s2(x), Conv1x1 s2(x)) (the later Conv takes it)   -> y_down
//   inverted:   Add(x, Conv1x1(x)) (the skip first)                            -> y_inverted
//   shared:     Add(Conv1x1(x), x), the Conv's output also a graph output      -> y_shared_sum, y_shared
//   broadcast:  Add(Conv1x1(x) [2, 4, 6, 6], per-channel [1, 4, 1, 1])         -> y_broadcast
//   relu first: Add(Relu(Conv1x1(x)), x)                                        -> y_relu_first
std::string residual_model() {
  test::OnnxModelBuilder b(14);
  b.input("x", {2, 8, 6, 6});
  for (const char* y : {"y_basic", "y_down", "y_inverted", "y_shared_sum", "y_shared", "y_broadcast", "y_relu_first"})
    b.output(y, 4);
  unsigned seed = 1;
  auto weights = [&](const std::string& name, const std::vector<int64_t>& shape) {
    test::integer_initializer(b, name, shape, seed++);
  };
  weights("w_a", {8, 8, 3, 3});
  weights("w_b", {8, 8, 3, 3});
  weights("b_b", {8});
  weights("w_main", {8, 8, 3, 3});
  weights("w_down", {8, 8, 1, 1});
  weights("w_inv", {8, 8, 1, 1});
  weights("w_shared", {8, 8, 1, 1});
  weights("w_bc", {4, 8, 1, 1});
  weights("per_channel", {1, 4, 1, 1});
  weights("w_rf", {8, 8, 1, 1});
  auto conv = [&](const std::string& x, const std::string& w, const std::string& y, const std::string& name,
                  int pad, int stride) -> onnx::NodeProto& {
    onnx::NodeProto& n = b.node("Conv", {x, w}, {y}, name);
    test::set_ints(n, "pads", {pad, pad, pad, pad});
    test::set_ints(n, "strides", {stride, stride});
    return n;
  };
  conv("x", "w_a", "c_a", "conv_a", 1, 1);
  b.node("Relu", {"c_a"}, {"r_a"}, "relu_a");
  onnx::NodeProto& conv_b = b.node("Conv", {"r_a", "w_b", "b_b"}, {"c_b"}, "conv_b");
  test::set_ints(conv_b, "pads", {1, 1, 1, 1});
  b.node("Add", {"c_b", "x"}, {"sum_basic"}, "add_basic");
  b.node("Relu", {"sum_basic"}, {"y_basic"}, "relu_basic");
  conv("x", "w_main", "c_main", "conv_main", 1, 2);
  conv("x", "w_down", "c_down", "conv_down", 0, 2);
  b.node("Add", {"c_main", "c_down"}, {"y_down"}, "add_down");
  conv("x", "w_inv", "c_inv", "conv_inv", 0, 1);
  b.node("Add", {"x", "c_inv"}, {"y_inverted"}, "add_inverted");
  conv("x", "w_shared", "y_shared", "conv_shared", 0, 1);
  b.node("Add", {"y_shared", "x"}, {"y_shared_sum"}, "add_shared");
  conv("x", "w_bc", "c_bc", "conv_bc", 0, 1);
  b.node("Add", {"c_bc", "per_channel"}, {"y_broadcast"}, "add_broadcast");
  conv("x", "w_rf", "c_rf", "conv_rf", 0, 1);
  b.node("Relu", {"c_rf"}, {"r_rf"}, "relu_rf");
  b.node("Add", {"r_rf", "x"}, {"y_relu_first"}, "add_relu_first");
  return b.write("residual");
}

bool said(const std::vector<std::string>& why, const std::string& text) {
  return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("residual fusion: an Add after a Conv becomes its residual input, a Relu after it the epilogue",
          "[executor][fusion]") {
  const Graph g = import_onnx(residual_model());
  Graph fused = g;
  std::vector<std::string> why;
  fuse_for_inference(fused, &why);
  INFO([&] {
    std::string all;
    for (const auto& w : why) all += w + "\n";
    return all;
  }());
  CHECK(said(why, "add_basic fused into conv_b's epilogue (residual input 'x')"));
  CHECK(said(why, "relu_basic fused into conv_b's epilogue"));
  CHECK(said(why, "add_down fused into conv_down's epilogue (residual input 'c_main')"));
  CHECK(said(why, "add_inverted fused into conv_inv's epilogue (residual input 'x')"));
  CHECK(said(why, "add_broadcast not fused into conv_bc: its operands' shapes differ"));
  CHECK_FALSE(said(why, "add_shared fused"));
  CHECK_FALSE(said(why, "add_relu_first fused"));
  std::map<std::string, std::string> flags;
  std::map<Op, int> ops;
  for (const Node& n : fused.nodes) {
    ++ops[n.op];
    if (n.op == Op::Conv) flags[n.name] = conv_descriptor(fused, n).normalised();
  }
  CHECK(ops[Op::Add] == 3);  // shared, broadcast, relu first
  CHECK(ops[Op::Relu] == 0);
  auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  CHECK(ends_with(flags["conv_b"], "+bias+residual+relu"));
  CHECK(ends_with(flags["conv_down"], "+residual"));
  CHECK(ends_with(flags["conv_main"], "dw0"));
  CHECK(ends_with(flags["conv_inv"], "+residual"));
  CHECK(ends_with(flags["conv_rf"], "+relu"));
  // The fused Conv runs where the Add was: after every producer of its inputs.
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < fused.nodes.size(); ++i) at[fused.nodes[i].name] = i;
  CHECK(at["conv_main"] < at["conv_down"]);
}

TEST_CASE("residual fusion: the unfused graph's bits, integer and real data, 1 and 2 threads", "[executor][fusion]") {
  const Graph g = import_onnx(residual_model());
  for (int threads : {1, 2}) {
    test::compare_fused_with_unfused(g, threads, 3, [](const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                                                       const std::string& what) {
      INFO(what);
      CHECK(test::first_difference(got, want) == "");
      // The sums bite: the basic block's Relu clears some, and its sums are not the Conv's.
      const auto& basic = got[0].data;
      CHECK(std::count(basic.begin(), basic.end(), 0.0f) > 0);
      CHECK(*std::max_element(basic.begin(), basic.end()) > 0.0f);
    });
  }
}
