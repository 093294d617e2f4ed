// The in-process executor gives the same bits on 1 and 2 threads (intra-kernel parallel
// convolutions, parallel element-wise ops and pooling) on the bundled models.
#include <catch2/catch.hpp>

#include <random>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "tests/common/onnx_test_models.h"

using namespace convgen;

namespace {

std::vector<float> run_model(const std::string& path, int64_t batch, int threads) {
  model::ImportOptions options;
  options.batch = batch;
  model::Graph g = model::import_onnx(path, options);
  model::fuse_for_inference(g);
  model::ModelExecutor exec(std::move(g), default_target(), "", nullptr, threads);
  std::map<std::string, Tensor> inputs;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& name : exec.graph().inputs) {
    Tensor t(exec.graph().value(name).shape, false);
    for (float& v : t.data) v = normal(rng);
    inputs[name] = std::move(t);
  }
  const std::vector<Tensor> outputs = exec.run(inputs);
  return std::vector<float>(outputs.at(0).data.begin(), outputs.at(0).data.end());
}

}  // namespace

TEST_CASE("executor: bundled models give the same bits on 1 and 2 threads", "[executor]") {
  // segmenter_tiny: ConvTranspose, Resize and folded channel shuffles; its layers differ in
  // the last bits between parallel variants, so a variant that followed T would show here.
  for (const char* model : {"lenet", "cifar10_full", "segmenter_tiny"}) {
    INFO(model);
    const std::string path = std::string(CONVGEN_MODELS_DIR) + "/" + model + ".onnx";
    for (int64_t batch : {1, 5}) {
      const auto one = run_model(path, batch, 1);
      const auto two = run_model(path, batch, 2);
      REQUIRE(one.size() == two.size());
      size_t differ = 0;
      for (size_t i = 0; i < one.size(); ++i) differ += one[i] != two[i];
      CHECK(differ == 0);
      if (std::string(model) == "lenet" || std::string(model) == "cifar10_full")
        CHECK(one.size() == static_cast<size_t>(batch * 10));
    }
  }
}

TEST_CASE("executor: Max, Min and Mean of scalars and broadcast tensors", "[executor]") {
  // 0-D inputs give a 0-D output (Mean's count is 0-D too); a [2, 3] and a [3] broadcast.
  test::OnnxModelBuilder b(13);
  b.input("a", {}).input("b", {}).input("c", {2, 3}).input("d", {3});
  b.output("mean", 0).output("max", 2).output("min", 2);
  b.node("Mean", {"a", "b", "a"}, {"mean"}, "mean");
  b.node("Max", {"c", "d"}, {"max"}, "max");
  b.node("Min", {"c", "d", "c"}, {"min"}, "min");
  model::Graph g = model::import_onnx(b.write("variadic"));
  model::ModelExecutor exec(std::move(g), default_target(), "", nullptr, 1);
  auto tensor = [](std::vector<int64_t> shape, std::vector<float> v) {
    Tensor t(shape, false);
    std::copy(v.begin(), v.end(), t.data.begin());
    return t;
  };
  const std::vector<Tensor> y = exec.run({{"a", tensor({}, {1.0f})}, {"b", tensor({}, {4.0f})},
                                          {"c", tensor({2, 3}, {1, 5, -2, 0, 7, 3})}, {"d", tensor({3}, {2, 2, 2})}});
  REQUIRE(y.size() == 3);
  CHECK(y[0].shape.empty());
  CHECK(y[0].data[0] == 2.0f);
  CHECK(std::vector<float>(y[1].data.begin(), y[1].data.end()) == std::vector<float>{2, 5, 2, 2, 7, 3});
  CHECK(std::vector<float>(y[2].data.begin(), y[2].data.end()) == std::vector<float>{1, 2, -2, 0, 2, 2});
}
