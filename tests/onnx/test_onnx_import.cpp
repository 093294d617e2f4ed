// ONNX import: what a model lowers to, and that every kind of bad model file gets a
// one-line error naming the file (and node, op and attribute) with its stable exit code.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "generator/onnx/lowering.h"
#include "schedules/errors.h"
#include "schedules/sha256.h"
#include "tests/common/onnx_test_models.h"

using namespace convgen;
using namespace convgen::model;
using convgen::test::OnnxModelBuilder;

namespace {

// The error import_onnx throws for `path`, or fails the test when it succeeds.
Error import_error(const std::string& path, const ImportOptions& options = {}) {
  try {
    import_onnx(path, options);
  } catch (const Error& e) {
    return e;
  }
  FAIL("import of " << path << " succeeded, an error was expected");
  return Error(ExitCode::Ok, "");
}

const Node& only_node(const Graph& g, Op op) {
  const Node* found = nullptr;
  for (const auto& n : g.nodes)
    if (n.op == op) found = &n;
  REQUIRE(found != nullptr);
  return *found;
}

OnnxModelBuilder conv_model(const std::string& auto_pad, const std::vector<int64_t>& strides, int64_t opset = 13) {
  OnnxModelBuilder b(opset);
  b.input("x", {-1, 4, 7, 9}).weights("w", {8, 4, 3, 2}).weights("b", {8}).output("y", 4);
  auto& conv = b.node("Conv", {"x", "w", "b"}, {"y"}, "conv1");
  if (!auto_pad.empty()) convgen::test::set_string(conv, "auto_pad", auto_pad);
  convgen::test::set_ints(conv, "strides", strides);
  return b;
}

}  // namespace

TEST_CASE("import: Conv lowers to a layer descriptor; auto_pad resolves to explicit pads", "[import]") {
  struct Case {
    std::string auto_pad;
    std::vector<int64_t> strides;
    int64_t pt, pb, pl, pr;
  };
  // 7x9 input, 3x2 kernel. SAME at stride 2: out 4x5, total pad rows 2, cols 1.
  for (const Case& c : {Case{"VALID", {1, 1}, 0, 0, 0, 0}, Case{"SAME_UPPER", {1, 1}, 1, 1, 0, 1},
                        Case{"SAME_LOWER", {1, 1}, 1, 1, 1, 0}, Case{"SAME_UPPER", {2, 2}, 1, 1, 0, 1},
                        Case{"SAME_LOWER", {2, 2}, 1, 1, 1, 0}}) {
    INFO(c.auto_pad << " stride " << c.strides[0]);
    ImportOptions options;
    options.batch = 3;
    const Graph g = import_onnx(conv_model(c.auto_pad, c.strides).write("conv"), options);
    const ConvDescriptor d = conv_descriptor(g, only_node(g, Op::Conv));
    CHECK(d.mb == 3);
    CHECK(d.ic == 4);
    CHECK(d.oc == 8);
    CHECK(d.kh == 3);
    CHECK(d.kw == 2);
    CHECK(d.pt == c.pt);
    CHECK(d.pb == c.pb);
    CHECK(d.pl == c.pl);
    CHECK(d.pr == c.pr);
    CHECK(d.bias);
    if (c.auto_pad != "VALID") {
      CHECK(d.oh() == (7 + c.strides[0] - 1) / c.strides[0]);
      CHECK(d.ow() == (9 + c.strides[1] - 1) / c.strides[1]);
    }
    CHECK(g.value("y").shape == std::vector<int64_t>{3, 8, d.oh(), d.ow()});
  }
}

TEST_CASE("import: Conv1d is the H = 1 case; groups and dilations carry over", "[import]") {
  OnnxModelBuilder b;
  b.input("x", {2, 6, 20}).weights("w", {6, 2, 3}).output("y", 3);
  auto& conv = b.node("Conv", {"x", "w"}, {"y"});
  convgen::test::set_int(conv, "group", 3);
  convgen::test::set_ints(conv, "dilations", {2});
  convgen::test::set_ints(conv, "pads", {1, 3});
  const Graph g = import_onnx(b.write("conv1d"));
  const ConvDescriptor d = conv_descriptor(g, only_node(g, Op::Conv));
  CHECK(d.ih == 1);
  CHECK(d.kh == 1);
  CHECK(d.iw == 20);
  CHECK(d.kw == 3);
  CHECK(d.dw == 2);
  CHECK(d.g == 3);
  CHECK(d.pl == 1);
  CHECK(d.pr == 3);
  CHECK(!d.bias);
  CHECK(only_node(g, Op::Conv).name == "Conv_0");  // unnamed nodes get op_index names
}

TEST_CASE("import: PyTorch's Shape/Gather/Unsqueeze/Concat flatten chain folds into one Reshape", "[import]") {
  OnnxModelBuilder b(11);
  b.input("x", {-1, 3, 4, 5}).output("y", 2);
  b.node("Shape", {"x"}, {"s"});
  b.node("Constant", {}, {"zero"});
  {
    auto& c = b.model().mutable_graph()->mutable_node()->at(1);
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
    a->mutable_t()->add_int64_data(0);
  }
  b.node("Gather", {"s", "zero"}, {"n"});
  auto& unsq = b.node("Unsqueeze", {"n"}, {"n1"});
  convgen::test::set_ints(unsq, "axes", {0});
  b.int64_initializer("minus_one", {-1});
  auto& cat = b.node("Concat", {"n1", "minus_one"}, {"shape"});
  convgen::test::set_int(cat, "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"});
  ImportOptions options;
  options.batch = 5;
  const Graph g = import_onnx(b.write("flatten"), options);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == Op::Reshape);
  CHECK(g.nodes[0].attributes.shape == std::vector<int64_t>{5, 60});
  CHECK(g.nodes[0].inputs == std::vector<std::string>{"x"});
}

TEST_CASE("import: a Reshape to a shape of another element count is a bad model", "[import]") {
  OnnxModelBuilder b(13);
  b.input("x", {2, 4, 5, 5}).output("y", 5);
  b.int64_initializer("shape", {2, 2, 4, 5, 5});
  b.node("Reshape", {"x", "shape"}, {"y"}, "regroup");
  const Error e = import_error(b.write("reshape_count"));
  CHECK(e.code() == ExitCode::BadModel);
  CHECK_THAT(e.what(), Catch::Contains("node 'regroup' (Reshape)") &&
                           Catch::Contains("Reshape to shape [2,2,4,5,5]: 200 elements into 400"));
}

TEST_CASE("import: loss ops lower to LogSoftmax and NegativeLogLikelihoodLoss; bad labels and modes refused",
          "[import]") {
  auto model = [](const std::string& op, const std::vector<int64_t>& labels, const std::vector<int64_t>& label_dims,
                  const std::string& reduction) {
    OnnxModelBuilder b(13);
    b.input("x", {2, 3, 4}).output("loss", reduction == "none" ? 2 : 0);
    b.int64_initializer("labels", labels);
    auto* initializers = b.model().mutable_graph()->mutable_initializer();
    onnx::TensorProto* t = initializers->Mutable(initializers->size() - 1);
    t->clear_dims();
    for (int64_t d : label_dims) t->add_dims(d);
    auto& n = b.node(op, {"x", "labels"}, {"loss"}, "loss_node");
    convgen::test::set_string(n, "reduction", reduction);
    convgen::test::set_int(n, "ignore_index", -1);
    return b.write("loss");
  };
  const std::vector<int64_t> labels = {0, 2, -1, 1, 1, 0, 2, -1};
  const Graph g = import_onnx(model("SoftmaxCrossEntropyLoss", labels, {2, 4}, "none"));
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op == Op::LogSoftmax);
  CHECK(g.nodes[0].attributes.axis == 1);
  const Node& nll = g.nodes[1];
  CHECK(nll.op == Op::NegativeLogLikelihoodLoss);
  CHECK(nll.attributes.indices == labels);
  CHECK(nll.attributes.loss_reduction == ops::LossReduction::None);
  CHECK(nll.attributes.has_ignore_index);
  CHECK(nll.attributes.ignore_index == -1);

  Error e = import_error(model("NegativeLogLikelihoodLoss", labels, {2, 4}, "average"));
  CHECK(e.code() == ExitCode::Unsupported);
  CHECK_THAT(e.what(), Catch::Contains("node 'loss_node' (NegativeLogLikelihoodLoss)") &&
                           Catch::Contains("attribute 'reduction' = average"));
  e = import_error(model("NegativeLogLikelihoodLoss", {0, 2, 3, 1, 1, 0, 2, 0}, {2, 4}, "mean"));
  CHECK(e.code() == ExitCode::BadModel);
  CHECK_THAT(e.what(), Catch::Contains("label 3 at position 2 outside [0, 3) and not ignore_index -1"));
  e = import_error(model("SoftmaxCrossEntropyLoss", {0, 2, 1, 1, 1, 0, 2, 0}, {4, 2}, "sum"));
  CHECK_THAT(e.what(), Catch::Contains("node 'loss_node' (SoftmaxCrossEntropyLoss)") &&
                           Catch::Contains("labels of shape [4,2] for an input of shape [2,3,4] (want [2,4])"));
}

TEST_CASE("import: Softmax keeps each opset's axis semantics", "[import]") {
  for (int64_t opset : {11, 13}) {
    OnnxModelBuilder b(opset);
    b.input("x", {2, 3, 4}).output("y", 3);
    b.node("Softmax", {"x"}, {"y"});
    const Graph g = import_onnx(b.write("softmax"));
    const Attributes& a = only_node(g, Op::Softmax).attributes;
    INFO("opset " << opset);
    CHECK(a.softmax_coerce_2d == (opset < 13));
    CHECK(a.axis == (opset < 13 ? 1 : 2));  // default 1 before 13, -1 from 13
  }
}

TEST_CASE("import: Clip bounds, Pad pads and Dropout come from constant inputs", "[import]") {
  OnnxModelBuilder b(13);
  b.input("x", {1, 2, 3, 3}).output("y", 4);
  b.float_initializer("lo", {0.0f}).float_initializer("hi", {6.0f});
  b.int64_initializer("pads", {0, 0, 1, 2, 0, 0, 3, 4});
  b.node("Clip", {"x", "lo", "hi"}, {"c"});
  b.node("Pad", {"c", "pads"}, {"p"});
  b.node("Dropout", {"p"}, {"y"});
  const Graph g = import_onnx(b.write("clip"));
  CHECK(only_node(g, Op::Clip).attributes.clip_min == 0.0f);
  CHECK(only_node(g, Op::Clip).attributes.clip_max == 6.0f);
  CHECK(only_node(g, Op::Clip).inputs.size() == 1);
  CHECK(only_node(g, Op::Pad).attributes.pad_amounts == std::vector<int64_t>{0, 0, 1, 2, 0, 0, 3, 4});
  CHECK(g.value("y").shape == std::vector<int64_t>{1, 2, 7, 9});
}

TEST_CASE("import: inputs bound at import become constants", "[import]") {
  OnnxModelBuilder b(13);
  b.input("x", {2, 3}).input("lo", {}).input("hi", {}).output("y", 2);
  b.node("Clip", {"x", "lo", "hi"}, {"y"});
  const std::string path = b.write("clip_inputs");
  const Error e = import_error(path);
  CHECK(e.code() == ExitCode::Unsupported);
  CHECK_THAT(e.what(), Catch::Contains("'Clip_0' (Clip)") && Catch::Contains("not a constant"));
  ImportOptions options;
  Value lo, hi;
  lo.is_constant = hi.is_constant = true;
  lo.data = {-1.0f};
  hi.data = {1.0f};
  options.constant_inputs = {{"lo", lo}, {"hi", hi}};
  const Graph g = import_onnx(path, options);
  CHECK(g.inputs == std::vector<std::string>{"x"});
  CHECK(only_node(g, Op::Clip).attributes.clip_max == 1.0f);
  options.constant_inputs = {{"nope", lo}};
  CHECK(import_error(path, options).code() == ExitCode::Usage);
}

TEST_CASE("import: the batch binds dimension 0 only", "[import]") {
  OnnxModelBuilder b;
  b.input("x", {-1, 3, -1, 8}).output("y", 4);
  b.node("Relu", {"x"}, {"y"});
  const Error e = import_error(b.write("dynamic"));
  CHECK(e.code() == ExitCode::Unsupported);
  CHECK_THAT(e.what(), Catch::Contains("input 'x'") && Catch::Contains("dimension 2 is dynamic ('D2')"));
  ImportOptions zero;
  zero.batch = 0;
  CHECK(import_error(b.write("dynamic"), zero).code() == ExitCode::Usage);
}

TEST_CASE("import: bad files get one-line errors with stable codes", "[import][errors]") {
  const std::string good = conv_model("", {1, 1}).bytes();
  SECTION("missing file") {
    const Error e = import_error("/nonexistent/model.onnx");
    CHECK(e.code() == ExitCode::Io);
    CHECK_THAT(e.what(), Catch::StartsWith("/nonexistent/model.onnx: cannot read"));
  }
  SECTION("empty file") {
    CHECK(import_error(convgen::test::write_temp_file("empty", "")).code() == ExitCode::BadModel);
  }
  SECTION("truncated at every tenth of its length") {
    for (int tenth = 1; tenth < 10; ++tenth) {
      const std::string path = convgen::test::write_temp_file("cut", good.substr(0, good.size() * tenth / 10));
      INFO("cut at " << tenth << "/10");
      const Error e = import_error(path);
      CHECK((e.code() == ExitCode::BadModel || e.code() == ExitCode::Unsupported));
      CHECK_THAT(e.what(), Catch::StartsWith(path));
      CHECK(std::string(e.what()).find('\n') == std::string::npos);
    }
  }
  SECTION("corrupted bytes: never a crash, always a coded one-line error or a valid model") {
    int errors = 0;
    for (size_t at = 0; at < good.size(); at += 7) {
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ 0x5a);
      const std::string path = convgen::test::write_temp_file("flip", bad);
      try {
        import_onnx(path);
      } catch (const Error& e) {
        ++errors;
        INFO(e.what());
        CHECK((e.code() == ExitCode::BadModel || e.code() == ExitCode::Unsupported));
        CHECK(std::string(e.what()).find('\n') == std::string::npos);
      }
    }
    CHECK(errors > 10);
  }
  SECTION("not a protobuf at all") {
    CHECK(import_error(convgen::test::write_temp_file("text", "hello, this is not a model\n")).code() ==
          ExitCode::BadModel);
  }
}

TEST_CASE("import: hand-edited models name the node, op and attribute at fault", "[import][errors]") {
  SECTION("opset below 6 and above 17") {
    for (int64_t opset : {5, 18}) {
      OnnxModelBuilder b(opset);
      b.input("x", {1, 2}).output("y", 2);
      b.node("Relu", {"x"}, {"y"});
      const Error e = import_error(b.write("opset"));
      CHECK(e.code() == ExitCode::Unsupported);
      CHECK_THAT(e.what(), Catch::Contains("not supported: opset " + std::to_string(opset)));
    }
  }
  SECTION("unsupported op") {
    OnnxModelBuilder b;
    b.input("x", {1, 2}).output("y", 2);
    b.node("Hardmax", {"x"}, {"y"}, "act");
    const Error e = import_error(b.write("hardmax"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'act' (Hardmax): not supported: op Hardmax"));
  }
  SECTION("unsupported attribute value") {
    const Error e = import_error(conv_model("SAME_SIDEWAYS", {1, 1}).write("autopad"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'conv1' (Conv)") && Catch::Contains("attribute 'auto_pad' = 'SAME_SIDEWAYS'"));
  }
  SECTION("inconsistent group") {
    auto b = conv_model("", {1, 1});
    convgen::test::set_int(*b.model().mutable_graph()->mutable_node(0), "group", 3);
    const Error e = import_error(b.write("group"));
    CHECK_THAT(e.what(), Catch::Contains("node 'conv1' (Conv)"));
  }
  SECTION("3-D convolution") {
    OnnxModelBuilder b;
    b.input("x", {1, 2, 4, 4, 4}).weights("w", {2, 2, 1, 1, 1}).output("y", 5);
    b.node("Conv", {"x", "w"}, {"y"}, "c3");
    const Error e = import_error(b.write("conv3d"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("3-D"));
  }
  SECTION("another dtype") {
    OnnxModelBuilder b;
    b.input("x", {1, 2}, onnx::TensorProto_DataType_INT8).output("y", 2);
    b.node("Relu", {"x"}, {"y"});
    const Error e = import_error(b.write("int8"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("dtype int8"));
  }
  SECTION("a node reading a value nobody produces fails the checker") {
    OnnxModelBuilder b;
    b.input("x", {1, 2}).output("y", 2);
    b.node("Add", {"x", "ghost"}, {"y"});
    const Error e = import_error(b.write("ghost"));
    CHECK(e.code() == ExitCode::BadModel);
    CHECK_THAT(e.what(), Catch::Contains("bad model"));
  }
  SECTION("weights data shorter than their shape") {
    auto b = conv_model("", {1, 1});
    b.model().mutable_graph()->mutable_initializer(0)->mutable_float_data()->RemoveLast();
    const Error e = import_error(b.write("short"));
    CHECK(e.code() == ExitCode::BadModel);
  }
  SECTION("MaxPool indices output") {
    OnnxModelBuilder b;
    b.input("x", {1, 1, 4, 4}).output("y", 4).output("i", 4, onnx::TensorProto_DataType_INT64);
    auto& pool = b.node("MaxPool", {"x"}, {"y", "i"}, "pool");
    convgen::test::set_ints(pool, "kernel_shape", {2, 2});
    const Error e = import_error(b.write("argmax"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("'pool' (MaxPool): not supported: optional output 1"));
  }
}

TEST_CASE("import: ONNX's PyTorch-converted models import, or are refused for an allowed reason", "[import][conformance]") {
  const std::filesystem::path root = "/usr/share/libonnx-testdata/data/pytorch-converted";
  REQUIRE(std::filesystem::is_directory(root));  // libonnx-testdata is in scripts/packages.txt
  // Refused for an op outside convgen's list, or for one of the allowed reasons.
  int imported = 0, refused = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    const std::string model = (entry.path() / "model.onnx").string();
    try {
      import_onnx(model);
      ++imported;
    } catch (const Error& e) {
      ++refused;
      const std::string what = e.what();
      bool allowed = what.find("3-D") != std::string::npos || what.find("dtype") != std::string::npos ||
                     what.find("opset") != std::string::npos || what.find("'mode' = ") != std::string::npos;
      const size_t at = what.find("not supported: op ");
      if (at != std::string::npos) {
        const std::string op = what.substr(at + 18, what.find_first_of(" \n", at + 18) - (at + 18));
        allowed = allowed || !is_lowered_op(op);
      }
      INFO(what);
      CHECK(allowed);
    }
  }
  CHECK(imported >= 46);
  CHECK(imported + refused == 82);
}

TEST_CASE("sha256: FIPS 180-4 test vectors", "[import]") {
  CHECK(convgen::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(convgen::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(convgen::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(convgen::sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("fusion: BatchNormalization folds into the Conv, Relu into its epilogue", "[import]") {
  OnnxModelBuilder b(13);
  b.input("x", {1, 2, 5, 5}).weights("w", {3, 2, 3, 3}).weights("cb", {3}).output("y", 4);
  b.float_initializer("scale", {1.5f, -2.0f, 0.5f}).float_initializer("shift", {0.1f, 0.2f, 0.3f});
  b.float_initializer("mean", {0.5f, -0.25f, 1.0f}).float_initializer("var", {4.0f, 1.0f, 0.25f});
  for (const char* n : {"scale", "shift", "mean", "var"})
    for (auto& t : *b.model().mutable_graph()->mutable_initializer())
      if (t.name() == n) t.add_dims(3);
  b.node("Conv", {"x", "w", "cb"}, {"c"}, "conv");
  auto& bn = b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"}, "bn");
  convgen::test::set_float(bn, "epsilon", 0.0f);
  b.node("Relu", {"n"}, {"y"}, "relu");
  Graph g = import_onnx(b.write("bn"));
  std::vector<std::string> why;
  fuse_for_inference(g, &why);
  REQUIRE(g.nodes.size() == 1);
  const Node& conv = g.nodes[0];
  CHECK(conv.attributes.fused_relu);
  CHECK(conv.outputs[0] == "y");
  CHECK(conv_descriptor(g, conv).relu);
  const Value& w = g.value(conv.inputs[1]);
  const Value& bias = g.value(conv.inputs[2]);
  // Output channel 1: factor -2 / sqrt(1) = -2; weights 0.01 * i for i in 18..35.
  CHECK(w.data[18] == Approx(0.18f * -2.0f));
  CHECK(bias.data[1] == Approx((0.01f - -0.25f) * -2.0f + 0.2f));
  CHECK(bias.data[2] == Approx((0.02f - 1.0f) * (0.5f / 0.5f) + 0.3f));

  // A Conv output read twice (a graph output too) is not fused.
  OnnxModelBuilder two(13);
  two.input("x", {1, 2, 5, 5}).weights("w", {3, 2, 3, 3}).output("c", 4).output("y", 4);
  two.node("Conv", {"x", "w"}, {"c"}, "conv");
  two.node("Relu", {"c"}, {"y"}, "relu");
  Graph g2 = import_onnx(two.write("two"));
  why.clear();
  fuse_for_inference(g2, &why);
  CHECK(g2.nodes.size() == 2);
  REQUIRE(!why.empty());
  CHECK_THAT(why[0], Catch::Contains("relu not fused into conv"));
}

TEST_CASE("import: training forms of BatchNormalization and Dropout (ImportOptions::training)", "[import]") {
  // PyTorch's training export at opset 13: BN with its four statistics outputs, Dropout
  // with a ratio and a bool training_mode input and a mask output.
  auto model = [](bool read_statistics) {
    test::OnnxModelBuilder b;
    b.input("x", {-1, 2, 4, 4}).output(read_statistics ? "m" : "y", read_statistics ? 1 : 4);
    b.weights("s", {2}).weights("b", {2}).weights("mean", {2}).weights("var", {2});
    b.node("BatchNormalization", {"x", "s", "b", "mean", "var"}, {"n", "m", "v", "sm", "sv"}, "bn");
    b.float_initializer("ratio", {0.25f});
    auto& t = b.node("Constant", {}, {"mode"}, "mode_constant");
    auto* value = t.add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    value->mutable_t()->set_data_type(onnx::TensorProto_DataType_BOOL);
    value->mutable_t()->add_int32_data(1);
    b.node("Dropout", {"n", "ratio", "mode"}, {"y", "mask"}, "drop");
    return b.write(read_statistics ? "bn_training_read" : "bn_training");
  };
  model::ImportOptions o;
  o.batch = 3;
  // Inference import refuses the training outputs, naming the node...
  CHECK_THROWS_AS(model::import_onnx(model(false), o), Error);
  // ... training import drops what nothing reads.
  o.training = true;
  const model::Graph g = model::import_onnx(model(false), o);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op == model::Op::BatchNormalization);
  CHECK(g.nodes[0].outputs.size() == 1);
  CHECK(g.nodes[1].op == model::Op::Dropout);
  CHECK(g.nodes[1].attributes.ratio == 0.25f);
  // A statistics output that the graph reads is refused, naming node and output.
  try {
    model::import_onnx(model(true), o);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'bn' (BatchNormalization)") && Catch::Contains("'m'"));
  }
}

TEST_CASE("import: reductions, Slice and Split lower with their attributes; bad ones are named", "[import]") {
  SECTION("ReduceMean over H and W, ReduceSum's axes as an input, Split into Slices") {
    OnnxModelBuilder b(13);
    b.input("x", {-1, 6, 4, 5}).output("m", 2).output("s", 4).output("p1", 4);
    auto& mean = b.node("ReduceMean", {"x"}, {"m"}, "mean");
    convgen::test::set_ints(mean, "axes", {-1, 2});
    convgen::test::set_int(mean, "keepdims", 0);
    b.int64_initializer("axes", {1});
    b.node("ReduceSum", {"x", "axes"}, {"s"}, "sum");
    b.int64_initializer("sizes", {2, 4});
    convgen::test::set_int(b.node("Split", {"x", "sizes"}, {"p0", "p1"}, "split"), "axis", 1);
    ImportOptions options;
    options.batch = 3;
    const Graph g = import_onnx(b.write("reduce"), options);
    const Node& m = only_node(g, Op::ReduceMean);
    CHECK(m.attributes.axes == std::vector<int64_t>{2, 3});
    CHECK(!m.attributes.keepdims);
    CHECK(g.value("m").shape == std::vector<int64_t>{3, 6});
    CHECK(only_node(g, Op::ReduceSum).attributes.axes == std::vector<int64_t>{1});
    CHECK(only_node(g, Op::ReduceSum).inputs == std::vector<std::string>{"x"});
    std::vector<const Node*> slices;
    for (const Node& n : g.nodes)
      if (n.op == Op::Slice) slices.push_back(&n);
    REQUIRE(slices.size() == 2);
    CHECK(slices[0]->name == "split:0");
    CHECK(slices[1]->attributes.slice_first == std::vector<int64_t>{0, 2, 0, 0});
    CHECK(g.value("p1").shape == std::vector<int64_t>{3, 4, 4, 5});
  }
  SECTION("Split sizes that do not cover the axis") {
    OnnxModelBuilder b(11);
    b.input("x", {1, 6, 4}).output("a", 3).output("c", 3);
    auto& split = b.node("Split", {"x"}, {"a", "c"}, "split");
    convgen::test::set_int(split, "axis", 1);
    convgen::test::set_ints(split, "split", {2, 3});
    const Error e = import_error(b.write("split"));  // ONNX's inference finds it first
    CHECK(e.code() == ExitCode::BadModel);
    CHECK_THAT(e.what(), Catch::Contains("op_type:Split, node name: split") && Catch::Contains("'split' (5)"));
  }
  SECTION("ReduceMax with a repeated axis") {
    OnnxModelBuilder b(13);
    b.input("x", {1, 6, 4}).output("y", 2);
    auto& max = b.node("ReduceMax", {"x"}, {"y"}, "max");
    convgen::test::set_ints(max, "axes", {1, -2});
    convgen::test::set_int(max, "keepdims", 0);
    const Error e = import_error(b.write("max"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'max' (ReduceMax): not supported: attribute 'axes' = [1,1]: repeated axis"));
  }
}

TEST_CASE("import: ConvTranspose and Resize lower with their attributes; bad ones are named", "[import]") {
  auto conv_transpose = [](const std::string& stem, const std::function<void(onnx::NodeProto&)>& edit) {
    OnnxModelBuilder b(13);
    b.input("x", {1, 4, 5, 5}).weights("w", {4, 3, 3, 3}).output("y", 4);
    auto& n = b.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
    convgen::test::set_ints(n, "strides", {2, 2});
    edit(n);
    return b.write(stem);
  };
  SECTION("output_shape resolves to pads; the descriptor is the convolution's") {
    const Graph g = import_onnx(conv_transpose("ct", [](onnx::NodeProto& n) {
      convgen::test::set_ints(n, "output_shape", {10, 10});
    }));
    const Node& up = only_node(g, Op::ConvTranspose);
    CHECK(up.attributes.pads_begin == std::vector<int64_t>{1, 1});
    CHECK(up.attributes.pads_end == std::vector<int64_t>{0, 0});
    CHECK(g.value("y").shape == std::vector<int64_t>{1, 3, 10, 10});
    CHECK(conv_transpose_descriptor(g, up).normalised() == "g1mb1ic3ih10iw10oc4oh5ow5kh3kw3sh2sw2pt1pb0pl1pr0dh0dw0");
  }
  SECTION("output_padding beyond the stride") {
    const Error e = import_error(conv_transpose("ct_op", [](onnx::NodeProto& n) {
      convgen::test::set_ints(n, "output_padding", {2, 0});
      convgen::test::set_ints(n, "dilations", {3, 1});
    }));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'up' (ConvTranspose): not supported: an output extent of 17 for an "
                                         "input of 5: output_padding [2,0] adds the stride 2 or more"));
  }
  SECTION("negative output_padding") {
    const Error e = import_error(conv_transpose("ct_neg", [](onnx::NodeProto& n) {
      convgen::test::set_ints(n, "output_padding", {-1, 0});
    }));
    CHECK_THAT(e.what(), Catch::Contains("node 'up' (ConvTranspose)") && Catch::Contains("'output_padding'"));
  }
  SECTION("a bad auto_pad") {
    const Error e = import_error(conv_transpose("ct_pad", [](onnx::NodeProto& n) {
      convgen::test::set_string(n, "auto_pad", "SAME_SIDEWAYS");
    }));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'up' (ConvTranspose): not supported: attribute 'auto_pad' = "
                                         "'SAME_SIDEWAYS'"));
  }
  auto resize = [](const std::string& stem, const std::vector<float>& scales,
                   const std::function<void(onnx::NodeProto&)>& edit) {
    OnnxModelBuilder b(13);
    b.input("x", {1, 2, 4, 4}).output("y", 4).float_initializer("scales", {4}, scales);
    auto& n = b.node("Resize", {"x", "", "scales"}, {"y"}, "resize");
    edit(n);
    return b.write(stem);
  };
  SECTION("PyTorch's bilinear: half_pixel, the scales per spatial axis") {
    const Graph g = import_onnx(resize("rs", {1, 1, 2, 1.5f}, [](onnx::NodeProto& n) {
      convgen::test::set_string(n, "mode", "linear");
    }));
    const Node& r = only_node(g, Op::Resize);
    CHECK(r.attributes.resize.mode == ops::ResizeMode::Linear);
    CHECK(r.attributes.resize.coordinates == ops::ResizeCoordinates::HalfPixel);
    CHECK(r.attributes.resize.scales == std::vector<float>{2.0f, 1.5f});
    CHECK(g.value("y").shape == std::vector<int64_t>{1, 2, 8, 6});
  }
  SECTION("an unknown mode") {
    const Error e = import_error(resize("rs_mode", {1, 1, 2, 2}, [](onnx::NodeProto& n) {
      convgen::test::set_string(n, "mode", "lanczos");
    }));
    CHECK_THAT(e.what(), Catch::Contains("node 'resize' (Resize): not supported: attribute 'mode' = 'lanczos'"));
  }
  SECTION("tf_crop_and_resize and resizing the channels") {
    Error e = import_error(resize("rs_crop", {1, 1, 2, 2}, [](onnx::NodeProto& n) {
      convgen::test::set_string(n, "coordinate_transformation_mode", "tf_crop_and_resize");
    }));
    CHECK_THAT(e.what(), Catch::Contains("attribute 'coordinate_transformation_mode' = 'tf_crop_and_resize'") &&
                             Catch::Contains("unclaimed attribute value"));
    e = import_error(resize("rs_channels", {1, 2, 2, 2}, [](onnx::NodeProto&) {}));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'resize' (Resize): not supported: resizing axis 1 (2 -> 4)"));
  }
  SECTION("a bad nearest_mode") {
    const Error e = import_error(resize("rs_round", {1, 1, 2, 2}, [](onnx::NodeProto& n) {
      convgen::test::set_string(n, "nearest_mode", "stochastic");
    }));
    CHECK_THAT(e.what(), Catch::Contains("attribute 'nearest_mode' = 'stochastic'"));
  }
}

TEST_CASE("import: normalisations, PRelu, DepthToSpace and Gather; bad attributes are named", "[import]") {
  SECTION("LayerNormalization's Mean and InvStdDev outputs lower to the ops that define them") {
    OnnxModelBuilder b(17);
    b.input("x", {2, 3, 4}).weights("s", {4}).output("y", 3).output("mean", 3).output("inv", 3);
    convgen::test::set_int(b.node("LayerNormalization", {"x", "s"}, {"y", "mean", "inv"}, "ln"), "axis", -1);
    const Graph g = import_onnx(b.write("ln"));
    const Node& ln = only_node(g, Op::LayerNormalization);
    CHECK(ln.attributes.axis == 2);
    CHECK(ln.outputs == std::vector<std::string>{"y"});
    CHECK(g.value("mean").shape == std::vector<int64_t>{2, 3, 1});
    CHECK(only_node(g, Op::Reciprocal).outputs == std::vector<std::string>{"inv"});
  }
  SECTION("a LayerNormalization scale of another shape") {
    OnnxModelBuilder b(17);
    b.input("x", {2, 3, 4}).weights("s", {3}).output("y", 3);
    b.node("LayerNormalization", {"x", "s"}, {"y"}, "ln");
    const Error e = import_error(b.write("ln_scale"));
    CHECK_THAT(e.what(), Catch::Contains("node 'ln' (LayerNormalization): not supported: Scale of shape [3] for "
                                         "normalised axes of 4 elements"));
  }
  SECTION("InstanceNormalization with a bias of the wrong length") {
    OnnxModelBuilder b;
    b.input("x", {1, 3, 4, 4}).weights("s", {3}).weights("b", {2}).output("y", 4);
    b.node("InstanceNormalization", {"x", "s", "b"}, {"y"}, "in");
    const Error e = import_error(b.write("in_bias"));
    CHECK(e.code() == ExitCode::BadModel);
    CHECK_THAT(e.what(), Catch::Contains("node 'in' (InstanceNormalization)") && Catch::Contains("2 values for 3 channels"));
  }
  SECTION("DepthToSpace: a bad mode, channels not a multiple of blocksize squared") {
    OnnxModelBuilder b(13);
    b.input("x", {1, 8, 2, 2}).output("y", 4);
    auto& d = b.node("DepthToSpace", {"x"}, {"y"}, "d2s");
    convgen::test::set_int(d, "blocksize", 2);
    convgen::test::set_string(d, "mode", "RCD");
    Error e = import_error(b.write("d2s_mode"));
    CHECK_THAT(e.what(), Catch::Contains("node 'd2s' (DepthToSpace): not supported: attribute 'mode' = 'RCD'"));
    OnnxModelBuilder c(13);
    c.input("x", {1, 6, 2, 2}).output("y", 4);
    convgen::test::set_int(c.node("SpaceToDepth", {"x"}, {"y"}, "s2d"), "blocksize", 0);
    e = import_error(c.write("s2d_block"));  // ONNX's inference finds it first
    CHECK(e.code() == ExitCode::BadModel);
    CHECK_THAT(e.what(), Catch::Contains("node name: s2d") && Catch::Contains("Blocksize must be positive"));
  }
  SECTION("Gather of an activation: indices normalised; out of range named") {
    OnnxModelBuilder b(13);
    b.input("x", {1, 4, 3}).int64_initializer("i", {-1, 0}).output("y", 3);
    convgen::test::set_int(b.node("Gather", {"x", "i"}, {"y"}, "pick"), "axis", 1);
    const Graph g = import_onnx(b.write("gather"));
    CHECK(only_node(g, Op::Gather).attributes.indices == std::vector<int64_t>{3, 0});
    OnnxModelBuilder c(13);
    c.input("x", {1, 4, 3}).int64_initializer("i", {4}).output("y", 3);
    convgen::test::set_int(c.node("Gather", {"x", "i"}, {"y"}, "pick"), "axis", 1);
    const Error e = import_error(c.write("gather_range"));
    CHECK_THAT(e.what(), Catch::Contains("node 'pick' (Gather)") && Catch::Contains("index 4 out of range"));
  }
  SECTION("Cast of an activation to another dtype") {
    OnnxModelBuilder b(13);
    b.input("x", {1, 4}).output("y", 2, onnx::TensorProto_DataType_INT32);
    convgen::test::set_int(b.node("Cast", {"x"}, {"y"}, "to_int"), "to", onnx::TensorProto_DataType_INT32);
    const Error e = import_error(b.write("cast"));
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("dtype"));
  }
}
