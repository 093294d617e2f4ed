// The trainer's contract on the networks users bring: torchvision resnet18, densenet121
// and mobilenet_v2 (num_classes 10, 3x32x32, exported for training by
// scripts/make-training-benchmark-models into CONVGEN_TRAINING_MODELS_DIR by the
// train.export_real_models fixture). Weights, momentum, BatchNormalization statistics
// and losses bit-identical for T = 1..4 and intra-kernel, over an epoch of 10 samples
// in mini-batches of 4 (micro-batches of 2; the last mini-batch 2 samples): their
// whole-batch layers (layer3 and layer4, the dense blocks on small images, MobileNet's
// last stages) and cropped taps included. Activation gradients share memory by lifetime
// (the step's own results, bit for bit, are what the invariance and PyTorch tests check;
// here, that the sharing happens).
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "generator/train/conv_factories.h"
#include "generator/train/prepare_graph.h"
#include "generator/train/trainer_from_model.h"
#include "runtime/train/trainer.h"
#include "tests/common/train_epoch.h"

using namespace convgen;

namespace {

std::string exported(const std::string& name) {
  const std::string path = std::string(CONVGEN_TRAINING_MODELS_DIR) + "/" + name + ".onnx";
  INFO(path << " (written by the train.export_real_models fixture)");
  REQUIRE(std::filesystem::exists(path));
  return path;
}

// The modes the cost model picks here: some of each, so both paths run.
void require_both_modes(const std::string& path) {
  model::TrainerOptions o;
  o.batch = 4;
  o.micro_batch = 2;
  const std::string modes = model::make_trainer(path, o, default_target())->parallel_modes();
  CHECK_THAT(modes, Catch::Contains("=whole-batch") && Catch::Contains("=micro-batch"));
}

}  // namespace

TEST_CASE("trainer invariance: torchvision resnet18", "[trainer][real_model]") {
  const std::string path = exported("resnet18");
  require_both_modes(path);
  test::require_thread_invariance(path, 10, 4, 2);
}

TEST_CASE("trainer invariance: torchvision densenet121", "[trainer][real_model]") {
  const std::string path = exported("densenet121");
  require_both_modes(path);
  test::require_thread_invariance(path, 10, 4, 2);
}

// Measured at batch 32, micro-batch 8: 83 MiB of activation gradients, one buffer each,
// take 7.6 MiB shared; the bound leaves room for other plans, not for no sharing.
TEST_CASE("trainer: activation gradients share memory by lifetime (torchvision densenet121)",
          "[trainer][real_model]") {
  model::TrainerOptions o;
  o.batch = 32;
  o.micro_batch = 8;
  const model::TrainerMemory mem = model::make_trainer(exported("densenet121"), o, default_target())->memory();
  INFO("gradients " << mem.gradients << " floats, unshared " << mem.unshared_gradients);
  CHECK(mem.unshared_gradients > mem.activations / 2);
  CHECK(mem.gradients * 5 < mem.unshared_gradients);
}

TEST_CASE("trainer invariance: torchvision mobilenet_v2", "[trainer][real_model]") {
  const std::string path = exported("mobilenet_v2");
  require_both_modes(path);
  test::require_thread_invariance(path, 10, 4, 2);
}

// Forward and backward-data of the layers run per micro-batch on small images read
// weights the trainer packs once per mini-batch (forward panels before it, backward-data
// panels into the same memory at their layer's first backward phase): the same bits as
// kernels that pack per call.
TEST_CASE("trainer: weights packed once per mini-batch give the bits of per-call packing (torchvision resnet18)",
          "[trainer][real_model]") {
  const std::string path = exported("resnet18");
  auto trainer_with = [&](bool pack_once_allowed, std::vector<std::string>* why) {
    const model::TrainerOptions o = test::epoch_options(4, 2, false, 2);
    model::TrainConvFactory factory = [pack_once_allowed, why](const model::TrainConvRequest& r) {
      model::TrainConvRequest request = r;
      request.pack_weights_once = request.pack_weights_once && pack_once_allowed;
      return model::make_generated_conv(request, why);
    };
    return std::make_unique<model::Trainer>(model::prepare_training_graph(path, 2), o, default_target(), factory, why);
  };
  std::vector<std::string> why;
  auto packed = trainer_with(true, &why);
  packed->prepare(4);
  int packing_layers = 0;
  for (const std::string& line : why) packing_layers += line.find("weights packed once per mini-batch") != std::string::npos;
  INFO("layers that pack once: " << packing_layers);
  CHECK(packing_layers >= 4);
  auto per_call = trainer_with(false, nullptr);
  test::require_identical(test::train_epoch(*per_call, 10), test::train_epoch(*packed, 10));
}
