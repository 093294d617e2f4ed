// Batch-level parallel inference (generator/model/batch_split.h): a batch split into calls
// gives every sample the bits it gets run alone at the per-call batch, on every thread
// count; a model whose samples may meet is refused, naming the node or value; the
// default per-call batch follows the rule its header states.
#include <catch2/catch.hpp>

#include <random>

#include "generator/model/batch_split.h"
#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "schedules/errors.h"
#include "tests/common/onnx_test_models.h"

using namespace convgen;
using model::Graph;
using model::Node;
using model::Op;
using model::Value;

namespace {

model::ImportAt importer(const std::string& path) {
  return [path](int64_t b) {
    model::ImportOptions options;
    options.batch = b;
    return model::import_onnx(path, options);
  };
}

// The graph split_batch sees: imported at batch b, fused for inference.
Graph fused(const std::string& path, int64_t b) {
  Graph g = importer(path)(b);
  model::fuse_for_inference(g);
  return g;
}

std::map<std::string, Tensor> random_inputs(const model::ModelExecutor& exec, unsigned seed) {
  std::map<std::string, Tensor> inputs;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& name : exec.graph().inputs) {
    Tensor t(exec.batch_shape(name), false);
    for (float& v : t.data) v = normal(rng);
    inputs[name] = std::move(t);
  }
  return inputs;
}

std::vector<float> flat(const Tensor& t) { return std::vector<float>(t.data.begin(), t.data.end()); }

// x [b, 4] -> one node -> y, with `y_shape` at this batch; `extra` adds constants.
Graph tiny(int64_t b, Op op, std::vector<int64_t> y_shape, const std::function<void(Graph&, Node&)>& extra = {}) {
  Graph g;
  g.source = "tiny.onnx";
  g.batch = b;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.values["x"] = Value{"x", {b, 4}};
  g.values["y"] = Value{"y", std::move(y_shape)};
  Node n;
  n.name = "n0";
  n.op = op;
  n.inputs = {"x"};
  n.outputs = {"y"};
  if (extra) extra(g, n);
  g.nodes.push_back(n);
  return g;
}

Value constant(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
  Value v{name, std::move(shape)};
  v.is_constant = true;
  v.data = std::move(data);
  return v;
}

}  // namespace

TEST_CASE("batch split: every call gives its samples the bits they get alone, on every thread count", "[batch_split]") {
  // segmenter_tiny: ConvTranspose, Resize, channel shuffles; lenet and cifar10_full: Gemm heads.
  for (const char* name : {"lenet", "cifar10_full", "segmenter_tiny"}) {
    INFO(name);
    const std::string path = std::string(CONVGEN_MODELS_DIR) + "/" + name + ".onnx";
    const int64_t batch = 6;
    std::vector<std::string> why;
    model::SplitModel split = model::split_batch(importer(path), batch, 0, &why);
    REQUIRE(split.calls > 1);  // these models never mix samples: the default splits them
    const int64_t per_call = batch / split.calls;
    CHECK(split.graph.batch == per_call);
    const Graph per_call_graph = split.graph;

    std::vector<std::vector<float>> by_threads;
    std::map<std::string, Tensor> inputs;
    for (int threads : {1, 2, 3}) {
      model::ModelExecutor exec(Graph(per_call_graph), default_target(), "", nullptr, threads, split.calls);
      if (inputs.empty()) inputs = random_inputs(exec, 5);
      const std::vector<Tensor> y = exec.run(inputs);
      REQUIRE(y.size() == 1);
      CHECK(y[0].shape == exec.batch_shape(exec.graph().outputs[0]));
      CHECK(y[0].shape[0] == batch);
      by_threads.push_back(flat(y[0]));
    }
    CHECK(by_threads[0] == by_threads[1]);
    CHECK(by_threads[0] == by_threads[2]);

    // The definition: each call's samples run alone through the per-call model.
    model::ModelExecutor alone(Graph(per_call_graph), default_target(), "", nullptr, 1);
    std::vector<float> expected;
    for (int64_t c = 0; c < split.calls; ++c) {
      std::map<std::string, Tensor> slice;
      for (const auto& [input, t] : inputs) {
        Tensor s(alone.batch_shape(input), false);
        std::copy(t.data.begin() + c * s.elements(), t.data.begin() + (c + 1) * s.elements(), s.data.begin());
        slice[input] = std::move(s);
      }
      const std::vector<float> y = flat(alone.run(slice).at(0));
      expected.insert(expected.end(), y.begin(), y.end());
    }
    CHECK(by_threads[0] == expected);

    // And it is the model: the whole-batch plan agrees to rounding (other kernels, other order).
    model::ModelExecutor whole(model::split_batch(importer(path), batch, batch, nullptr).graph, default_target(), "",
                               nullptr, 1);
    const std::vector<float> w = flat(whole.run(inputs).at(0));
    REQUIRE(w.size() == expected.size());
    double worst = 0, scale = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      worst = std::max(worst, double(std::fabs(w[i] - expected[i])));
      scale = std::max(scale, double(std::fabs(w[i])));
    }
    CHECK(worst <= 1e-4 * std::max(1.0, scale));
  }
}

TEST_CASE("batch split: the default per-call batch", "[batch_split]") {
  const std::string lenet = std::string(CONVGEN_MODELS_DIR) + "/lenet.onnx";
  // lenet's smallest convolution output is 8x8 = 64 pixels: one sample a call.
  CHECK(model::default_per_call_batch(fused(lenet, 8)) == 1);
  CHECK(model::default_per_call_batch(fused(lenet, 1)) == 1);
  // 7x7 outputs need two samples a call (98 pixels); a batch of 3 has no such split of two
  // or more calls, so its largest (1) is taken; a batch of 2 splits in two.
  test::OnnxModelBuilder b(13);
  b.input("x", {-1, 3, 7, 7}).output("y", 4).weights("w", {8, 3, 3, 3});
  auto& conv = b.node("Conv", {"x", "w"}, {"y"}, "conv");
  test::set_ints(conv, "pads", {1, 1, 1, 1});
  const std::string small = b.write("seven");
  CHECK(model::default_per_call_batch(fused(small, 8)) == 2);
  CHECK(model::default_per_call_batch(fused(small, 3)) == 1);
  CHECK(model::default_per_call_batch(fused(small, 2)) == 1);
  // No spatial convolution (an MLP): whole, its matrix products stay matrix products.
  test::OnnxModelBuilder mlp(13);
  mlp.input("x", {-1, 16}).output("y", 2).weights("w", {16, 8});
  mlp.node("MatMul", {"x", "w"}, {"y"}, "fc");
  const std::string mlp_path = mlp.write("mlp");
  CHECK(model::default_per_call_batch(fused(mlp_path, 8)) == 8);
  std::vector<std::string> mlp_why;
  CHECK(model::split_batch(importer(mlp_path), 8, 0, &mlp_why).calls == 1);
  REQUIRE(!mlp_why.empty());
  CHECK_THAT(mlp_why.back(), Catch::Contains("no spatial convolution"));
  std::vector<std::string> why;
  CHECK(model::split_batch(importer(small), 8, 0, &why).calls == 4);
  REQUIRE(!why.empty());
  CHECK_THAT(why.back(), Catch::Contains("4 calls of batch 2"));
}

TEST_CASE("batch split: refused where samples may meet, naming the node or value", "[batch_split]") {
  auto refusal = [](const Graph& whole, const Graph& per_call) { return model::batch_split_refusal(whole, per_call); };
  auto axis = [](int64_t a) { return [a](Graph&, Node& n) { n.attributes.axis = a; }; };

  // Per-sample ops pass; the batch axis in an attribute fails though shapes cannot show it.
  CHECK(refusal(tiny(8, Op::Softmax, {8, 4}, axis(1)), tiny(1, Op::Softmax, {1, 4}, axis(1))).empty());
  CHECK(refusal(tiny(8, Op::Relu, {8, 4}), tiny(2, Op::Relu, {2, 4})).empty());
  CHECK_THAT(refusal(tiny(8, Op::Softmax, {8, 4}, axis(0)), tiny(1, Op::Softmax, {1, 4}, axis(0))),
             Catch::Equals("node n0 (Softmax): its axis is the batch axis"));
  CHECK_THAT(refusal(tiny(8, Op::LayerNormalization, {8, 4}, axis(0)),
                     tiny(1, Op::LayerNormalization, {1, 4}, axis(0))),
             Catch::Contains("its axis is the batch axis"));
  auto reverse = [](Graph&, Node& n) { n.attributes.slice_first = {7, 0}, n.attributes.slice_step = {-1, 1}; };
  auto reverse1 = [](Graph&, Node& n) { n.attributes.slice_first = {0, 0}, n.attributes.slice_step = {-1, 1}; };
  CHECK_THAT(refusal(tiny(8, Op::Slice, {8, 4}, reverse), tiny(1, Op::Slice, {1, 4}, reverse1)),
             Catch::Contains("node n0 (Slice): it slices the batch axis"));
  auto over = [](std::vector<int64_t> axes) { return [axes](Graph&, Node& n) { n.attributes.axes = axes; }; };
  CHECK(refusal(tiny(8, Op::ReduceSum, {8, 1}, over({1})), tiny(1, Op::ReduceSum, {1, 1}, over({1}))).empty());
  // Reducing the batch axis shows in the shapes first.
  CHECK_THAT(refusal(tiny(8, Op::ReduceSum, {1, 4}, over({0})), tiny(1, Op::ReduceSum, {1, 4}, over({0}))),
             Catch::Contains("value 'y' is [1, 4] at batch 8 and [1, 4] at batch 1"));

  // A constant multiplying the samples from the left mixes them.
  auto left = [](int64_t b) {
    return [b](Graph& g, Node& n) {
      g.values["a"] = constant("a", {3, b}, std::vector<float>(size_t(3 * b), 1.0f));
      n.inputs = {"a", "x"};
    };
  };
  CHECK_THAT(refusal(tiny(8, Op::MatMul, {3, 4}, left(8)), tiny(1, Op::MatMul, {3, 4}, left(1))),
             Catch::Contains("constant 'a' differs"));
  auto left_same = [](Graph& g, Node& n) {
    g.values["a"] = constant("a", {4, 4}, std::vector<float>(16, 1.0f));
    n.inputs = {"a", "x"};
  };
  CHECK_THAT(refusal(tiny(4, Op::MatMul, {4, 4}, left_same), tiny(1, Op::MatMul, {1, 4}, left_same)),
             Catch::Contains("value 'y' is [4, 4] at batch 4 and [1, 4] at batch 1") ||
                 Catch::Contains("multiplying the samples from the left"));
  auto right = [](Graph& g, Node& n) {
    g.values["w"] = constant("w", {4, 4}, std::vector<float>(16, 1.0f));
    n.inputs = {"x", "w"};
  };
  CHECK(refusal(tiny(8, Op::MatMul, {8, 4}, right), tiny(1, Op::MatMul, {1, 4}, right)).empty());

  // A constant that depends on the batch (its values, not only its shape).
  auto table = [](float first) {
    return [first](Graph& g, Node& n) {
      g.values["t"] = constant("t", {1, 4}, {first, 1, 2, 3});
      n.inputs = {"x", "t"};
    };
  };
  CHECK_THAT(refusal(tiny(8, Op::Add, {8, 4}, table(0)), tiny(1, Op::Add, {1, 4}, table(7))),
             Catch::Equals("constant 't' differs between batch 8 and batch 1"));
  CHECK(refusal(tiny(8, Op::Add, {8, 4}, table(0)), tiny(1, Op::Add, {1, 4}, table(0))).empty());

  // A computed operand of lower rank broadcasts against the batch axis.
  auto lower = [](int64_t b) {
    return [b](Graph& g, Node& n) {
      g.values["v"] = Value{"v", {b}};
      g.inputs.push_back("v");
      n.inputs = {"x", "v"};
    };
  };
  CHECK_THAT(refusal(tiny(4, Op::Add, {4, 4}, lower(4)), tiny(1, Op::Add, {1, 4}, lower(1))),
             Catch::Contains("its computed operand 'v' broadcasts against the batch axis"));

  // Operands ONNX does not shape-check against the samples: a Gemm addend with rows, a
  // PRelu slope with rows along the batch axis, a computed LayerNormalization scale.
  auto gemm = [](int64_t b, std::vector<int64_t> c_shape, bool c_constant) {
    return [b, c_shape, c_constant](Graph& g, Node& n) {
      g.values["w"] = constant("w", {4, 4}, std::vector<float>(16, 1.0f));
      int64_t c_elements = 1;
      for (int64_t d : c_shape) c_elements *= d;
      if (c_constant) g.values["c"] = constant("c", c_shape, std::vector<float>(size_t(c_elements), 2.0f));
      else g.values["c"] = Value{"c", c_shape}, g.inputs.push_back("c");
      n.inputs = {"x", "w", "c"};
      (void)b;
    };
  };
  CHECK_THAT(refusal(tiny(4, Op::Gemm, {4, 4}, gemm(4, {4, 4}, true)), tiny(2, Op::Gemm, {2, 4}, gemm(2, {4, 4}, true))),
             Catch::Equals("node n0 (Gemm): its addend 'c', a constant [4, 4], has rows of its own against the samples"));
  CHECK(refusal(tiny(4, Op::Gemm, {4, 4}, gemm(4, {1, 4}, true)), tiny(2, Op::Gemm, {2, 4}, gemm(2, {1, 4}, true)))
            .empty());
  CHECK(refusal(tiny(4, Op::Gemm, {4, 4}, gemm(4, {4}, true)), tiny(2, Op::Gemm, {2, 4}, gemm(2, {4}, true))).empty());
  CHECK_THAT(refusal(tiny(4, Op::Gemm, {4, 4}, gemm(4, {4}, false)), tiny(2, Op::Gemm, {2, 4}, gemm(2, {2}, false))),
             Catch::Contains("its addend 'c' is computed with shape [4], not one row per sample"));
  CHECK(refusal(tiny(4, Op::Gemm, {4, 4}, gemm(4, {4, 4}, false)), tiny(2, Op::Gemm, {2, 4}, gemm(2, {2, 4}, false)))
            .empty());
  auto slope = [](std::vector<int64_t> shape) {
    return [shape](Graph& g, Node& n) {
      g.values["s"] = constant("s", shape, std::vector<float>(size_t(shape[0] * shape[1]), 0.25f));
      n.inputs = {"x", "s"};
    };
  };
  CHECK_THAT(refusal(tiny(4, Op::PRelu, {4, 4}, slope({4, 4})), tiny(2, Op::PRelu, {2, 4}, slope({4, 4}))),
             Catch::Contains("node n0 (PRelu): its constant operand 's' has rows along the batch axis"));
  CHECK(refusal(tiny(4, Op::PRelu, {4, 4}, slope({1, 4})), tiny(2, Op::PRelu, {2, 4}, slope({1, 4}))).empty());
  auto computed_scale = [](int64_t b) {
    return [b](Graph& g, Node& n) {
      n.attributes.axis = 1;
      g.values["scale"] = Value{"scale", {b}};
      g.inputs.push_back("scale");
      n.inputs = {"x", "scale", ""};
    };
  };
  CHECK_THAT(refusal(tiny(4, Op::LayerNormalization, {4, 4}, computed_scale(4)),
                     tiny(1, Op::LayerNormalization, {1, 4}, computed_scale(1))),
             Catch::Contains("its scale 'scale' is computed, not a constant") ||
                 Catch::Contains("value 'scale' is [4] at batch 4 and [1] at batch 1"));
  auto constant_scale = [](Graph& g, Node& n) {
    n.attributes.axis = 1;
    g.values["scale"] = constant("scale", {4}, {1, 2, 3, 4});
    n.inputs = {"x", "scale", ""};
  };
  CHECK(refusal(tiny(4, Op::LayerNormalization, {4, 4}, constant_scale),
                tiny(1, Op::LayerNormalization, {1, 4}, constant_scale))
            .empty());

  // A fixed batch: the same shapes at both imports.
  CHECK_THAT(refusal(tiny(8, Op::Relu, {8, 4}), [] {
               Graph g = tiny(8, Op::Relu, {8, 4});
               g.batch = 1;
               return g;
             }()),
             Catch::Contains("value 'x' is [8, 4] at batch 8 and [8, 4] at batch 1"));
  // Different graphs.
  CHECK_THAT(refusal(tiny(8, Op::Relu, {8, 4}), tiny(1, Op::Sigmoid, {1, 4})),
             Catch::Contains("node n0 (Relu) differs between batch 8 and batch 1"));
  // A per-call batch that does not divide.
  CHECK_THAT(refusal(tiny(8, Op::Relu, {8, 4}), tiny(3, Op::Relu, {3, 4})),
             Catch::Contains("a per-call batch of 3 does not split a batch of 8"));
}

TEST_CASE("batch split: what split_batch does with a per-call batch asked for or refused", "[batch_split]") {
  // A convolution (so the default splits), then a softmax over the batch.
  test::OnnxModelBuilder b(13);
  b.input("x", {-1, 1, 8, 8}).output("y", 2).weights("w", {2, 1, 3, 3});
  auto& conv = b.node("Conv", {"x", "w"}, {"c"}, "conv");
  test::set_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Flatten", {"c"}, {"f"}, "flat");
  auto& sm = b.node("Softmax", {"f"}, {"y"}, "over_batch");
  test::set_int(sm, "axis", 0);
  const std::string mixing = b.write("softmax_over_batch");
  // The default falls back to one call and says why.
  std::vector<std::string> why;
  const model::SplitModel whole = model::split_batch(importer(mixing), 4, 0, &why);
  CHECK(whole.calls == 1);
  CHECK(whole.graph.batch == 4);
  REQUIRE(!why.empty());
  CHECK_THAT(why.back(), Catch::Contains("run whole") && Catch::Contains("node over_batch (Softmax)"));
  // Asked for, it is an error naming the model and the reason.
  try {
    model::split_batch(importer(mixing), 4, 1, nullptr);
    FAIL("a split of a mixing model was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("softmax_over_batch") && Catch::Contains("--per-call-batch 1") &&
                             Catch::Contains("its axis is the batch axis"));
  }
  // Not a divisor: a usage error.
  try {
    model::split_batch(importer(mixing), 4, 3, nullptr);
    FAIL("--per-call-batch 3 of 4 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(e.what(), Catch::Contains("--per-call-batch 3: not a divisor of the batch 4"));
  }
  // The whole batch asked for: one call, no second import.
  CHECK(model::split_batch(importer(mixing), 4, 4, nullptr).calls == 1);
}
