// Channel shuffles (Reshape-Transpose-Reshape, ShuffleNet's) import as one channel
// Gather and fold away where the graph allows (into the Concat before them or the 1x1 /
// 3x3 Convs after them); wherever they go, the model's outputs are the same bits as the
// three-copy chain's on integer data, on 1 and 2 threads. The layout-aware ops under them
// (concat with an order, gather and its backward in channels-last) against the dense forms.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/channel_shuffle.h"
#include "generator/onnx/import.h"
#include "runtime/ops/layout.h"
#include "runtime/ops/ops.h"
#include "tests/common/onnx_test_models.h"
#include "tests/model/integer_model_run.h"

using namespace convgen;
using namespace convgen::model;

namespace {

using test::integer_floats;
using test::run_on_integers;

// x [2, 8, 5, 5] -> conv_a (1x1, 4) and conv_b (3x3 pad 1, 4) -> Concat -> shuffle(2) ->
// conv_c (1x1, 6) -> y_concat; x -> shuffle(4) -> conv_d (3x3 pad 1, 3) -> y_conv;
// x -> conv_e (1x1, 8) -> shuffle(2) -> Relu -> y_pass (channels-last; a Relu reads it: a pass).
// `broken`: an Identity inside every chain, so none is recognised (the three-copy path).
// Plus a grouping Reshape of x whose output nothing reads.
std::string shuffle_model(bool broken) {
  test::OnnxModelBuilder b(13);
  b.input("x", {2, 8, 5, 5});
  b.output("y_concat", 4).output("y_conv", 4).output("y_pass", 4);
  auto weights = [&](const std::string& name, const std::vector<int64_t>& shape, unsigned seed) {
    test::integer_initializer(b, name, shape, seed);
  };
  weights("wa", {4, 8, 1, 1}, 1);
  weights("wb", {4, 8, 3, 3}, 2);
  weights("wc", {6, 8, 1, 1}, 3);
  weights("wd", {3, 8, 3, 3}, 4);
  weights("we", {8, 8, 1, 1}, 6);
  b.float_initializer("bc", {6}, integer_floats(6, -3, 3, 5));
  b.node("Conv", {"x", "wa"}, {"a"}, "conv_a");
  test::set_ints(b.node("Conv", {"x", "wb"}, {"bo"}, "conv_b"), "pads", {1, 1, 1, 1});
  test::set_int(b.node("Concat", {"a", "bo"}, {"cat"}, "concat"), "axis", 1);
  auto shuffle = [&](const std::string& in, const std::string& out, int64_t groups, const std::string& name) {
    b.int64_initializer(name + "_split", {2, groups, 8 / groups, 5, 5});
    b.int64_initializer(name + "_merge", {2, 8, 5, 5});
    b.node("Reshape", {in, name + "_split"}, {name + "_g"}, name + "_reshape1");
    test::set_ints(b.node("Transpose", {name + "_g"}, {name + "_t"}, name), "perm", {0, 2, 1, 3, 4});
    std::string t = name + "_t";
    if (broken) {
      b.node("Identity", {t}, {name + "_i"}, name + "_identity");
      t = name + "_i";
    }
    b.node("Reshape", {t, name + "_merge"}, {out}, name + "_reshape2");
  };
  shuffle("cat", "s1", 2, "shuffle_concat");
  b.node("Conv", {"s1", "wc", "bc"}, {"y_concat"}, "conv_c");
  shuffle("x", "s2", 4, "shuffle_conv");
  test::set_ints(b.node("Conv", {"s2", "wd"}, {"y_conv"}, "conv_d"), "pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "we"}, {"e"}, "conv_e");
  shuffle("e", "s3", 2, "shuffle_pass");
  b.node("Relu", {"s3"}, {"y_pass"}, "relu");
  // A grouping Reshape nothing reads (import keeps unused nodes): not a shuffle, no error.
  b.int64_initializer("unused_split", {2, 2, 4, 5, 5});
  b.node("Reshape", {"x", "unused_split"}, {"unused"}, "unused_reshape");
  return b.write(broken ? "shuffle_broken" : "shuffle");
}

}  // namespace

TEST_CASE("channel shuffle: the Reshape-Transpose-Reshape chain imports as one channel Gather", "[import][shuffle]") {
  CHECK(channel_shuffle_order(8, 2) == std::vector<int64_t>{0, 4, 1, 5, 2, 6, 3, 7});
  CHECK(channel_shuffle_order(8, 4) == std::vector<int64_t>{0, 2, 4, 6, 1, 3, 5, 7});
  const Graph g = import_onnx(shuffle_model(false));
  int gathers = 0;
  for (const Node& n : g.nodes) {
    CHECK(n.op != Op::Transpose);
    CHECK((n.op != Op::Reshape || n.name == "unused_reshape"));
    if (n.op != Op::Gather) continue;
    ++gathers;
    CHECK(n.attributes.axis == 1);
    CHECK(n.attributes.indices == channel_shuffle_order(8, n.name == "shuffle_conv" ? 4 : 2));
  }
  CHECK(gathers == 3);
  // With an Identity inside, the chain is not a shuffle: it stays as written.
  const Graph broken = import_onnx(shuffle_model(true));
  CHECK(std::count_if(broken.nodes.begin(), broken.nodes.end(), [](const Node& n) { return n.op == Op::Transpose; }) == 3);
  CHECK(std::none_of(broken.nodes.begin(), broken.nodes.end(), [](const Node& n) { return n.op == Op::Gather; }));
}

TEST_CASE("channel shuffle: folds into the Concat or the Convs, else one pass, same bits as the chain",
          "[executor][shuffle]") {
  const Graph g = import_onnx(shuffle_model(false));
  std::vector<std::string> why;
  Graph fused = g;
  fuse_for_inference(fused, &why);
  auto said = [&](const std::string& text) {
    return std::any_of(why.begin(), why.end(), [&](const std::string& w) { return w.find(text) != std::string::npos; });
  };
  CHECK(said("shuffle_concat (channel permutation) folded into concat"));
  CHECK(said("shuffle_conv (channel permutation) folded into the input-channel weights of 1 Conv(s)"));
  CHECK(said("shuffle_pass (channel permutation) kept as a pass"));
  CHECK(std::count_if(fused.nodes.begin(), fused.nodes.end(), [](const Node& n) { return n.op == Op::Gather; }) == 1);

  const Graph chain = import_onnx(shuffle_model(true));
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    const std::vector<Tensor> want = run_on_integers(chain, true, threads);
    for (bool fuse : {true, false}) {
      INFO("fused " << fuse);
      const std::vector<Tensor> got = run_on_integers(g, fuse, threads);
      REQUIRE(got.size() == want.size());
      for (size_t o = 0; o < got.size(); ++o) {
        INFO("output " << o);
        CHECK(got[o].shape == want[o].shape);
        CHECK(got[o].data == want[o].data);
      }
    }
  }
}

TEST_CASE("ops: concat with an order and channel gathers give the dense forms' values in any layout",
          "[ops][shuffle]") {
  const std::vector<int64_t> a_shape = {2, 3, 2, 3}, b_shape = {2, 5, 2, 3}, y_shape = {2, 8, 2, 3};
  const std::vector<float> a = integer_floats(36, -9, 9, 11), b = integer_floats(60, -9, 9, 12);
  const std::vector<int64_t> order = {7, 0, 3, 5, 1, 6, 2, 4};
  // Dense reference: y[n][k] = joined[n][order[k]].
  std::vector<float> want(96);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t k = 0; k < 8; ++k)
      for (int64_t p = 0; p < 6; ++p) {
        const int64_t c = order[size_t(k)];
        want[size_t((n * 8 + k) * 6 + p)] = c < 3 ? a[size_t((n * 3 + c) * 6 + p)] : b[size_t((n * 5 + c - 3) * 6 + p)];
      }
  auto in_layout = [](const std::vector<float>& dense, const std::vector<int64_t>& shape, bool cl) {
    std::vector<float> out(dense.size());
    copy_layout(ConstView{dense.data(), shape, false}, View{out.data(), shape, cl});
    return out;
  };
  for (int mask = 0; mask < 8; ++mask) {
    const bool a_cl = mask & 1, b_cl = mask & 2, y_cl = mask & 4;
    INFO("layouts a " << a_cl << " b " << b_cl << " y " << y_cl);
    const std::vector<float> al = in_layout(a, a_shape, a_cl), bl = in_layout(b, b_shape, b_cl);
    std::vector<float> y(96), back(96);
    ops::concat({ConstView{al.data(), a_shape, a_cl}, ConstView{bl.data(), b_shape, b_cl}}, 1,
                View{y.data(), y_shape, y_cl}, order);
    copy_layout(ConstView{y.data(), y_shape, y_cl}, View{back.data(), y_shape, false});
    CHECK(back == want);
  }

  // gather and gather_backward along the channels: channels-last and mixed layouts equal
  // the dense blocks' result (indices pick one channel twice, one never).
  const std::vector<int64_t> x_shape = {2, 5, 3, 2}, g_shape = {2, 4, 3, 2};
  const std::vector<int64_t> picks = {4, 0, 4, 2};
  const std::vector<float> x = integer_floats(60, -9, 9, 13), dy = integer_floats(48, -9, 9, 14);
  std::vector<float> y_dense(48), dx_dense(60, 1.0f);
  ops::gather(ConstView{x.data(), x_shape, false}, 1, picks, View{y_dense.data(), g_shape, false});
  ops::gather_backward(ConstView{dy.data(), g_shape, false}, 1, picks, View{dx_dense.data(), x_shape, false}, true);
  REQUIRE(ops::gather_layouts_supported(x_shape, 1, g_shape));
  CHECK_FALSE(ops::gather_layouts_supported(x_shape, 2, {2, 5, 4, 2}));
  for (int mask = 1; mask < 4; ++mask) {
    const bool x_cl = mask & 1, y_cl = mask & 2;
    INFO("layouts x " << x_cl << " y " << y_cl);
    const std::vector<float> xl = in_layout(x, x_shape, x_cl), dyl = in_layout(dy, g_shape, y_cl);
    std::vector<float> y(48), back(48), dx = in_layout(std::vector<float>(60, 1.0f), x_shape, x_cl), dx_back(60);
    ops::gather(ConstView{xl.data(), x_shape, x_cl}, 1, picks, View{y.data(), g_shape, y_cl});
    copy_layout(ConstView{y.data(), g_shape, y_cl}, View{back.data(), g_shape, false});
    CHECK(back == y_dense);
    ops::gather_backward(ConstView{dyl.data(), g_shape, y_cl}, 1, picks, View{dx.data(), x_shape, x_cl}, true);
    copy_layout(ConstView{dx.data(), x_shape, x_cl}, View{dx_back.data(), x_shape, false});
    CHECK(dx_back == dx_dense);
  }
}
