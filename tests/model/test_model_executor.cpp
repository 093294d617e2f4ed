// The in-process executor gives the same bits on 1 and 2 threads (intra-kernel parallel
// convolutions, parallel element-wise ops and pooling) on the bundled models.
#include <catch2/catch.hpp>

#include <random>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"

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
  for (const char* model : {"lenet", "cifar10_full"}) {
    INFO(model);
    const std::string path = std::string(CONVGEN_MODELS_DIR) + "/" + model + ".onnx";
    for (int64_t batch : {1, 5}) {
      const auto one = run_model(path, batch, 1);
      const auto two = run_model(path, batch, 2);
      REQUIRE(one.size() == two.size());
      size_t differ = 0;
      for (size_t i = 0; i < one.size(); ++i) differ += one[i] != two[i];
      CHECK(differ == 0);
      CHECK(one.size() == static_cast<size_t>(batch * 10));
    }
  }
}
