// Runs the generated drivers of the bundled models and driver_ops (compiled at build time by
// `convgen compile`, linked together into this one program with convgen::runtime):
//   model_driver_check input MODEL OUT.pb            writes a random input for MODEL
//   model_driver_check run MODEL WEIGHTS IN.pb OUT.pb  runs MODEL's driver
// tests/model/test_model_driver.sh compares the driver's output with `convgen run`'s.
#include <cstdio>
#include <exception>
#include <random>
#include <string>

#include "cifar10_full.h"
#include "driver_ops.h"
#include "lenet.h"
#include "segmenter_tiny.h"
#include "generator/onnx/tensor_io.h"

namespace {

template <typename Model>
int run(const std::string& weights, const std::string& in, const std::string& out, const char* output_name,
        std::vector<int64_t> out_shape) {
  Model model(weights);
  const convgen::model::Value x = convgen::model::read_tensor_file(in);
  if (static_cast<int64_t>(x.data.size()) != Model::kInputElements[0]) {
    std::fprintf(stderr, "%s: %zu values, the model takes %lld\n", in.c_str(), x.data.size(),
                 static_cast<long long>(Model::kInputElements[0]));
    return 1;
  }
  convgen::Tensor y(out_shape, false);
  const float* inputs[] = {x.data.data()};
  float* outputs[] = {y.data.data()};
  model.forward(inputs, outputs);
  convgen::model::write_tensor_file(out, output_name, y);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string mode = argc > 1 ? argv[1] : "";
    const std::string model = argc > 2 ? argv[2] : "";
    const bool lenet = model == "lenet", segmenter = model == "segmenter_tiny", ops = model == "driver_ops";
    if (mode == "input" && argc == 4) {
      const std::vector<int64_t> shape =
          lenet || segmenter || ops ? std::vector<int64_t>{2, 1, 28, 28} : std::vector<int64_t>{2, 3, 32, 32};
      convgen::Tensor x(shape, false);
      std::mt19937 rng(42);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (float& v : x.data) v = normal(rng);
      convgen::model::write_tensor_file(argv[3], "data", x);
      return 0;
    }
    if (mode == "run" && argc == 6) {
      if (lenet) return run<convgen_model_lenet::Model>(argv[3], argv[4], argv[5], "prob_out", {2, 10});
      if (ops) return run<convgen_model_driver_ops::Model>(argv[3], argv[4], argv[5], "loss", {2, 28, 28});
      if (segmenter)
        return run<convgen_model_segmenter_tiny::Model>(argv[3], argv[4], argv[5], "logits", {2, 4, 28, 28});
      return run<convgen_model_cifar10_full::Model>(argv[3], argv[4], argv[5], "prob_out", {2, 10});
    }
    std::fprintf(stderr, "usage: model_driver_check input MODEL OUT.pb | run MODEL WEIGHTS IN.pb OUT.pb\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "model_driver_check: %s\n", e.what());
    return 1;
  }
}
