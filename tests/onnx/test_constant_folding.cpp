// The import's constant evaluator (generator/onnx/constant_folding.h), op by op on small
// constants with the edges ONNX defines (negative indices and steps, clamping,
// broadcasting, allowzero, wrapping casts), its errors naming the node, and PyTorch's
// F.pad chain end to end.
#include <catch2/catch.hpp>

#include <limits>

#include "generator/onnx/constant_folding.h"
#include "generator/onnx/import.h"
#include "schedules/errors.h"
#include "tests/common/onnx_test_models.h"

using namespace convgen;
using namespace convgen::model;

namespace {

Value ints(std::vector<int64_t> data, std::vector<int64_t> shape) {
  Value v;
  v.is_constant = true;
  v.is_int64 = true;
  v.int64_data = std::move(data);
  v.shape = std::move(shape);
  return v;
}

Value floats(std::vector<float> data, std::vector<int64_t> shape) {
  Value v;
  v.is_constant = true;
  v.data = std::move(data);
  v.shape = std::move(shape);
  return v;
}

struct Folding {
  Graph g;
  onnx::NodeProto node;

  Folding(const std::string& op, const std::vector<std::pair<std::string, Value>>& inputs) {
    g.source = "m.onnx";
    node.set_op_type(op);
    node.set_name("n");
    for (const auto& [name, v] : inputs) {
      node.add_input(name);
      if (!name.empty()) g.values[name] = v;
    }
    node.add_output("y");
  }
  Folding& attr_ints(const std::string& key, const std::vector<int64_t>& v) {
    convgen::test::set_ints(node, key, v);
    return *this;
  }
  Folding& attr_int(const std::string& key, int64_t v) {
    convgen::test::set_int(node, key, v);
    return *this;
  }
  const Value& run() {
    NodeContext c(node, 0, g);
    REQUIRE(fold_node(c, g));
    return g.values.at("y");
  }
  std::string error() {
    NodeContext c(node, 0, g);
    try {
      fold_node(c, g);
    } catch (const Error& e) {
      return e.what();
    }
    FAIL("folding succeeded, an error was expected");
    return "";
  }
};

}  // namespace

TEST_CASE("folding: Gather on any axis, negative indices, out of range named", "[import][fold]") {
  const Value m = ints({0, 1, 2, 3, 4, 5}, {2, 3});
  const Value y = Folding("Gather", {{"m", m}, {"i", ints({-1, 0}, {2})}}).attr_int("axis", 1).run();
  CHECK(y.shape == std::vector<int64_t>{2, 2});
  CHECK(y.int64_data == std::vector<int64_t>{2, 0, 5, 3});
  const Value s = Folding("Gather", {{"m", m}, {"i", ints({1}, {})}}).run();  // scalar index drops the axis
  CHECK(s.shape == std::vector<int64_t>{3});
  CHECK(s.int64_data == std::vector<int64_t>{3, 4, 5});
  CHECK_THAT(Folding("Gather", {{"m", m}, {"i", ints({2}, {})}}).error(),
             Catch::Contains("node 'n' (Gather)") && Catch::Contains("index 2 out of range"));
}

TEST_CASE("folding: Slice clamps, steps backwards, slices several axes", "[import][fold]") {
  const Value m = ints({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  // Rows reversed (PyTorch's pad chain: start -1, end INT64_MIN, step -1), columns 1..3 by 2.
  const Value y = Folding("Slice", {{"m", m}, {"s", ints({-1, 1}, {2})}, {"e", ints({kMin, kMax}, {2})},
                                     {"a", ints({0, -1}, {2})}, {"st", ints({-1, 2}, {2})}})
                       .run();
  CHECK(y.shape == std::vector<int64_t>{3, 2});
  CHECK(y.int64_data == std::vector<int64_t>{9, 11, 5, 7, 1, 3});
  // Without axes and steps; an empty range.
  const Value e = Folding("Slice", {{"m", m}, {"s", ints({2}, {1})}, {"e", ints({1}, {1})}}).run();
  CHECK(e.shape == std::vector<int64_t>{0, 4});
  CHECK_THAT(Folding("Slice", {{"m", m}, {"s", ints({0}, {1})}, {"e", ints({1}, {1})}, {"a", ints({0}, {1})},
                               {"st", ints({0}, {1})}})
                 .error(),
             Catch::Contains("step of 0"));
}

TEST_CASE("folding: Range, ConstantOfShape, Shape with start and end", "[import][fold]") {
  CHECK(Folding("Range", {{"a", ints({5}, {})}, {"b", ints({-2}, {})}, {"d", ints({-3}, {})}}).run().int64_data ==
        std::vector<int64_t>{5, 2, -1});
  CHECK(Folding("Range", {{"a", ints({3}, {})}, {"b", ints({3}, {})}, {"d", ints({1}, {})}}).run().shape ==
        std::vector<int64_t>{0});
  CHECK(Folding("Range", {{"a", floats({0.5f}, {})}, {"b", floats({2.0f}, {})}, {"d", floats({0.5f}, {})}}).run().data ==
        std::vector<float>{0.5f, 1.0f, 1.5f});
  const Value z = Folding("ConstantOfShape", {{"s", ints({2, 3}, {2})}}).run();
  CHECK(z.shape == std::vector<int64_t>{2, 3});
  CHECK(z.data == std::vector<float>(6, 0.0f));
  Folding s("Shape", {{"x", floats({}, {2, 3, 4, 5})}});
  s.g.values["x"].is_constant = false;  // only its shape is known
  s.attr_int("start", 1).attr_int("end", -1);
  CHECK(s.run().int64_data == std::vector<int64_t>{3, 4});
}

TEST_CASE("folding: Reshape's 0 and -1, allowzero; Squeeze and Unsqueeze; Transpose", "[import][fold]") {
  const Value m = ints({0, 1, 2, 3, 4, 5}, {2, 3});
  CHECK(Folding("Reshape", {{"m", m}, {"s", ints({0, -1, 1}, {3})}}).run().shape == std::vector<int64_t>{2, 3, 1});
  CHECK_THAT(Folding("Reshape", {{"m", m}, {"s", ints({0, 6}, {2})}}).attr_int("allowzero", 1).error(),
             Catch::Contains("cannot reshape 6 elements to [0,6]"));
  CHECK(Folding("Unsqueeze", {{"m", m}, {"a", ints({-1, 0}, {2})}}).run().shape == std::vector<int64_t>{1, 2, 3, 1});
  CHECK(Folding("Squeeze", {{"m", ints({7}, {1, 1, 1})}}).run().shape == std::vector<int64_t>{});
  CHECK_THAT(Folding("Squeeze", {{"m", m}, {"a", ints({0}, {1})}}).error(), Catch::Contains("extent 2, not 1"));
  const Value t = Folding("Transpose", {{"m", m}}).attr_ints("perm", {1, 0}).run();
  CHECK(t.shape == std::vector<int64_t>{3, 2});
  CHECK(t.int64_data == std::vector<int64_t>{0, 3, 1, 4, 2, 5});
}

TEST_CASE("folding: broadcasting arithmetic, comparisons, Where, Not, Min/Max, Expand", "[import][fold]") {
  const Value col = ints({1, 2}, {2, 1}), row = ints({10, 20, 30}, {3});
  CHECK(Folding("Add", {{"a", col}, {"b", row}}).run().int64_data == std::vector<int64_t>{11, 21, 31, 12, 22, 32});
  CHECK(Folding("Div", {{"a", ints({-7}, {})}, {"b", ints({2}, {})}}).run().int64_data == std::vector<int64_t>{-3});
  CHECK_THAT(Folding("Div", {{"a", row}, {"b", ints({0}, {})}}).error(), Catch::Contains("division by zero"));
  CHECK_THAT(Folding("Add", {{"a", ints({1, 2}, {2})}, {"b", row}}).error(), Catch::Contains("do not broadcast"));
  const Value less = Folding("Less", {{"a", row}, {"b", ints({20}, {})}}).run();
  CHECK(less.int64_data == std::vector<int64_t>{1, 0, 0});
  CHECK(Folding("Not", {{"a", less}}).run().int64_data == std::vector<int64_t>{0, 1, 1});
  CHECK(Folding("Where", {{"c", less}, {"x", row}, {"y", ints({-1}, {})}}).run().int64_data ==
        std::vector<int64_t>{10, -1, -1});
  CHECK(Folding("Max", {{"a", row}, {"b", ints({15}, {})}, {"c", ints({25, 0, 0}, {3})}}).run().int64_data ==
        std::vector<int64_t>{25, 20, 30});
  CHECK(Folding("Equal", {{"a", floats({1.0f, 2.0f}, {2})}, {"b", floats({2.0f}, {})}}).run().int64_data ==
        std::vector<int64_t>{0, 1});
  const Value e = Folding("Expand", {{"a", col}, {"s", ints({2, 2}, {2})}}).run();
  CHECK(e.shape == std::vector<int64_t>{2, 2});
  CHECK(e.int64_data == std::vector<int64_t>{1, 1, 2, 2});
}

TEST_CASE("folding: Cast truncates floats, wraps narrow integers, makes bools", "[import][fold]") {
  const Value f = floats({-2.7f, 0.0f, 3.9f}, {3});
  CHECK(Folding("Cast", {{"f", f}}).attr_int("to", onnx::TensorProto_DataType_INT64).run().int64_data ==
        std::vector<int64_t>{-2, 0, 3});
  CHECK(Folding("Cast", {{"f", f}}).attr_int("to", onnx::TensorProto_DataType_BOOL).run().int64_data ==
        std::vector<int64_t>{1, 0, 1});
  CHECK(Folding("Cast", {{"i", ints({int64_t(1) << 32 | 5}, {1})}})
            .attr_int("to", onnx::TensorProto_DataType_INT32)
            .run()
            .int64_data == std::vector<int64_t>{5});
  CHECK(Folding("Cast", {{"i", ints({3}, {1})}}).attr_int("to", onnx::TensorProto_DataType_FLOAT).run().data ==
        std::vector<float>{3.0f});
  CHECK_THAT(Folding("Cast", {{"f", f}}).attr_int("to", onnx::TensorProto_DataType_DOUBLE).error(),
             Catch::Contains("'to' = 11"));
}

TEST_CASE("folding: a result that disagrees with shape inference is an error", "[import][fold]") {
  Folding f("Identity", {{"a", ints({1, 2}, {2})}});
  Value inferred;
  inferred.shape = {3};
  f.g.values["y"] = inferred;
  CHECK_THAT(f.error(), Catch::Contains("folds to shape [2], shape inference says [3]"));
}

TEST_CASE("folding: PyTorch's F.pad chain (ConstantOfShape, Concat, Slice, Transpose, Cast) gives Pad its pads",
          "[import][fold]") {
  // torch.onnx.export of F.pad(x, (1, 2, 0, 3)) at opset 13: the pads of the last two
  // axes, padded with zeros to the rank, reversed in pairs, begins then ends.
  convgen::test::OnnxModelBuilder b(13);
  b.input("x", {1, 2, 4, 5}).output("y", 4);
  b.int64_initializer("torch_pads", {1, 2, 0, 3});
  b.int64_initializer("four", {4});
  b.node("ConstantOfShape", {"four"}, {"zeros"});
  {
    auto* t = b.model().mutable_graph()->mutable_node()->rbegin()->add_attribute();
    t->set_name("value");
    t->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    t->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
    t->mutable_t()->add_dims(1);
    t->mutable_t()->add_int64_data(0);
  }
  convgen::test::set_int(b.node("Concat", {"torch_pads", "zeros"}, {"all"}), "axis", 0);
  b.int64_initializer("pairs", {-1, 2});
  b.node("Reshape", {"all", "pairs"}, {"paired"});
  b.int64_initializer("start", {-1});
  b.int64_initializer("end", {std::numeric_limits<int64_t>::min() + 1});
  b.int64_initializer("axis0", {0});
  b.int64_initializer("back", {-1});
  b.node("Slice", {"paired", "start", "end", "axis0", "back"}, {"reversed"});
  convgen::test::set_ints(b.node("Transpose", {"reversed"}, {"swapped"}), "perm", {1, 0});
  b.int64_initializer("flat", {-1});
  b.node("Reshape", {"swapped", "flat"}, {"pads_any"});
  convgen::test::set_int(b.node("Cast", {"pads_any"}, {"pads"}), "to", onnx::TensorProto_DataType_INT64);
  b.node("Pad", {"x", "pads"}, {"y"});
  const Graph g = import_onnx(b.write("fpad"));
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == Op::Pad);
  // Begins of N, C, H, W then ends: W gets (1, 2), H gets (0, 3).
  CHECK(g.nodes[0].attributes.pad_amounts == std::vector<int64_t>{0, 0, 0, 1, 0, 0, 3, 2});
  CHECK(g.value("y").shape == std::vector<int64_t>{1, 2, 7, 8});
}

TEST_CASE("folding: an op convgen only folds, on a non-constant input, is refused naming the node", "[import][fold]") {
  convgen::test::OnnxModelBuilder b(13);
  b.input("x", {1, 4}).output("y", 2).int64_initializer("shape", {3, 4});
  b.node("Expand", {"x", "shape"}, {"y"}, "expand1");
  try {
    import_onnx(b.write("expand"));
    FAIL("import succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'expand1' (Expand): not supported: op Expand on a value that is not a "
                                         "constant"));
  }
}
