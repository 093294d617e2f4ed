// The generated training drivers (`convgen compile --train`, compiled at build time for
// the bundled LeNet, cifar10_full, small ResNet, down_to_1x1 and unet_tiny) against the in-process trainer of
// `convgen train`: the same engine on AOT instead of JIT kernels must give the same
// bits -- every loss, weight, momentum and BatchNormalization statistic -- for every
// thread count, over two epochs whose last mini-batch ends in a partial micro-batch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <stdexcept>

#include "cifar10_full.h"
#include "schedules/errors.h"
#include "lenet.h"
#include "generator/onnx/export.h"
#include "generator/train/trainer_from_model.h"
#include "runtime/train/trainer.h"
#include "small_resnet.h"
#include "down_to_1x1.h"
#include "down_to_1x1_tuned.h"
#include "runtime/data/train_data.h"
#include "tests/common/train_compare.h"
#include "tests/common/train_epoch.h"
#include "unet_tiny.h"

using namespace convgen;

namespace {

constexpr int64_t kSamples = 100;  // the drivers were compiled with --batch 32 --samples 100
constexpr int64_t kBatch = 32;

using test::require_identical;
using test::same_bits;
using test::TrainRun;

// One shuffled epoch of synthetic data through `engine`: its losses and correct counts
// appended to `run`; `last` ends holding the epoch's last (partial) batch.
void train_epoch(model::Trainer& engine, int epoch, TrainRun* run, data::Batch* last) {
  const auto& tg = engine.graph();
  const data::SampleSpec spec = test::sample_spec(tg);
  const data::Dataset set = data::synthetic_dataset(spec, kSamples, 11, "synthetic");
  const std::vector<int64_t> order = data::epoch_order(kSamples, epoch, true, 7);
  for (int64_t first = 0; first < kSamples; first += kBatch) {
    data::decode_batch(set, order, first, std::min(kBatch, kSamples - first), data::Normalization{}, last);
    const model::StepStats s = engine.train_step(last->pixels.data(), last->labels.data(), last->count);
    run->losses.push_back(s.loss);
    run->correct.push_back(s.correct);
  }
}

// Two epochs, then an evaluation of the last (partial) batch.
TrainRun train(model::Trainer& engine) {
  TrainRun run;
  data::Batch b;
  for (int epoch = 0; epoch < 2; ++epoch) train_epoch(engine, epoch, &run, &b);
  run.evaluated = engine.evaluate(b.pixels.data(), b.labels.data(), b.count);
  run.parameters = engine.parameters();
  run.state = engine.state_tensors();
  return run;
}

model::TrainerOptions jit_options() {
  model::TrainerOptions o;
  o.batch = kBatch;
  o.lr = 0.01f, o.momentum = 0.9f, o.weight_decay = 5e-4f, o.seed = 7;
  return o;
}

template <typename Options>
Options driver_options(int threads, bool intra) {
  Options o;
  o.lr = 0.01f, o.momentum = 0.9f, o.weight_decay = 5e-4f, o.seed = 7;
  o.threads = threads;
  o.intra_kernel = intra;
  return o;
}

std::string model_file(const std::string& name) { return std::string(CONVGEN_MODELS_DIR) + "/" + name + ".onnx"; }
std::string weights_file(const std::string& name) {
  return std::string(CONVGEN_DRIVERS_DIR) + "/" + name + "/" + name + ".weights";
}

template <typename Driver, typename Options>
void check_driver(const std::string& name, const std::string& model_name = "", const std::string& records = "") {
  model::TrainerOptions jo = jit_options();
  jo.records = records;
  auto jit_owned = model::make_trainer(model_file(model_name.empty() ? name : model_name), jo, default_target());
  model::Trainer& jit = *jit_owned;
  const TrainRun reference = train(jit);
  for (auto [threads, intra] : {std::pair{1, false}, std::pair{2, false}, std::pair{3, false}, std::pair{2, true}}) {
    INFO(name << ": generated driver, " << threads << " threads" << (intra ? ", intra-kernel" : ""));
    Driver driver(weights_file(name), driver_options<Options>(threads, intra));
    CHECK(driver.engine().micro_batch() == jit.micro_batch());
    require_identical(reference, train(driver.engine()));
  }
}

}  // namespace

TEST_CASE("generated training driver: LeNet matches the in-process trainer bit for bit", "[train_driver]") {
  check_driver<convgen_model_lenet::Trainer, convgen_model_lenet::TrainOptions>("lenet");
}

TEST_CASE("generated training driver: cifar10_full matches the in-process trainer bit for bit", "[train_driver]") {
  check_driver<convgen_model_cifar10_full::Trainer, convgen_model_cifar10_full::TrainOptions>("cifar10_full");
}

TEST_CASE("generated training driver: small ResNet (BatchNorm, Dropout) matches bit for bit", "[train_driver]") {
  check_driver<convgen_model_small_resnet::Trainer, convgen_model_small_resnet::TrainOptions>("small_resnet");
}

TEST_CASE("generated training driver: U-Net (ConvTranspose, segmentation) matches bit for bit", "[train_driver]") {
  check_driver<convgen_model_unet_tiny::Trainer, convgen_model_unet_tiny::TrainOptions>("unet_tiny");
}

TEST_CASE("generated training driver: whole-batch gradients and cropped taps match bit for bit", "[train_driver]") {
  // down_to_1x1: its 2x2 and 1x1 layers are whole-batch, two of them cropped; the driver
  // carries their weights-only kernels over 32 and 4 samples.
  CHECK_THAT(model::make_trainer(model_file("down_to_1x1"), jit_options(), default_target())->parallel_modes(),
             Catch::Contains("/conv/Conv=whole-batch") && Catch::Contains("/down/down.6/Conv=micro-batch"));
  check_driver<convgen_model_down_to_1x1::Trainer, convgen_model_down_to_1x1::TrainOptions>("down_to_1x1");
}

TEST_CASE("generated training driver: a training record's micro-batch and modes are baked in", "[train_driver]") {
  // The record flips five of the six modes and halves the micro-batch; `convgen train
  // --schedules` and the driver compiled with it must run the same configuration.
  model::TrainerOptions o = jit_options();
  o.records = CONVGEN_TRAINING_RECORD;
  auto jit = model::make_trainer(model_file("down_to_1x1"), o, default_target());
  CHECK(jit->micro_batch() == 4);
  CHECK(jit->parallel_modes() ==
        "/down/down.0/Conv=whole-batch,/down/down.3/Conv=micro-batch,/down/down.6/Conv=whole-batch,"
        "/down/down.9/Conv=micro-batch,/down/down.12/Conv=whole-batch,/conv/Conv=micro-batch");
  CHECK(convgen_model_down_to_1x1_tuned::kMicroBatch == 4);
  check_driver<convgen_model_down_to_1x1_tuned::Trainer, convgen_model_down_to_1x1_tuned::TrainOptions>(
      "down_to_1x1_tuned", "down_to_1x1", CONVGEN_TRAINING_RECORD);
  // A --micro-batch of its own wins: the record is then not used at all.
  o.micro_batch = 8;
  std::vector<std::string> why;
  auto own = model::make_trainer(model_file("down_to_1x1"), o, default_target(), &why);
  CHECK_THAT(own->parallel_modes(), Catch::Contains("/conv/Conv=whole-batch"));
  CHECK(std::any_of(why.begin(), why.end(), [](const std::string& w) { return w.find("not used") != std::string::npos; }));
}

TEST_CASE("generated training driver: compile-time facts and clear errors", "[train_driver]") {
  STATIC_REQUIRE(convgen_model_lenet::kBatch == 32);
  STATIC_REQUIRE(convgen_model_lenet::kClasses == 10);
  convgen_model_lenet::Trainer driver(weights_file("lenet"));
  CHECK(driver.engine().micro_batch() == convgen_model_lenet::kMicroBatch);
  std::vector<float> pixels(5 * 28 * 28, 0.5f);
  std::vector<int32_t> labels(5, 3);
  // 5 samples: a partial micro-batch the driver has no kernels for (100 mod 32 = 4 has).
  try {
    driver.train_step(pixels.data(), labels.data(), 5);
    FAIL("a batch size without kernels was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("regenerate with: convgen compile lenet.onnx --train"));
  }
  // Another model's weights file: refused, naming the file.
  try {
    convgen_model_lenet::Trainer wrong(weights_file("cifar10_full"));
    FAIL("another model's weights were accepted");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("cifar10_full.weights"));
  }
  CHECK_THROWS(convgen_model_lenet::Trainer("/nonexistent/lenet.weights"));
}

namespace {

std::string scratch_dir(const std::string& name) {
  const std::string dir = std::string(CONVGEN_DRIVERS_DIR) + "/scratch-" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("generated training driver: checkpoints resume bit-identically, weights save and load", "[train_driver]") {
  using Driver = convgen_model_small_resnet::Trainer;
  auto options = driver_options<convgen_model_small_resnet::TrainOptions>(2, false);
  const std::string dir = scratch_dir("checkpoint");
  // Uninterrupted: two epochs, a checkpoint between them.
  Driver straight(weights_file("small_resnet"), options);
  TrainRun straight_run, resumed_run;
  data::Batch b;
  train_epoch(straight.engine(), 0, &straight_run, &b);
  straight.engine().set_learning_rate(0.005f);  // the learning rate is state, restored
  straight.save_checkpoint(dir, 1, 0);
  train_epoch(straight.engine(), 1, &straight_run, &b);
  // Resumed in a fresh driver from the checkpoint.
  Driver resumed(weights_file("small_resnet"), options);
  const auto [epoch, position] = resumed.load_checkpoint(dir);
  CHECK(epoch == 1);
  CHECK(position == 0);
  CHECK(resumed.engine().steps_taken() == 4);
  CHECK(resumed.engine().options().lr == 0.005f);
  train_epoch(resumed.engine(), 1, &resumed_run, &b);
  const auto& losses = straight_run.losses;
  const auto& resumed_losses = resumed_run.losses;
  REQUIRE(resumed_losses.size() == 4);
  for (size_t i = 0; i < 4; ++i) CHECK(std::memcmp(&resumed_losses[i], &losses[4 + i], sizeof(double)) == 0);
  for (size_t p = 0; p < straight.engine().parameters().size(); ++p) {
    INFO("parameter " << straight.engine().parameters()[p].name);
    CHECK(same_bits(straight.engine().parameters()[p].value, resumed.engine().parameters()[p].value));
    CHECK(same_bits(straight.engine().parameters()[p].momentum, resumed.engine().parameters()[p].momentum));
  }
  const auto state = straight.engine().state_tensors();
  REQUIRE(!state.empty());
  for (size_t i = 0; i < state.size(); ++i) CHECK(same_bits(state[i].second, resumed.engine().state_tensors()[i].second));

  // Other options: refused, naming the file.
  auto other = options;
  other.momentum = 0.5f;
  Driver mismatched(weights_file("small_resnet"), other);
  try {
    mismatched.load_checkpoint(dir);
    FAIL("a checkpoint written with other options was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::BadData);
    CHECK_THAT(e.what(), Catch::Contains("checkpoint.cgck") && Catch::Contains("other options"));
  }

  // Trained weights (parameters and BatchNorm statistics) saved, then loaded as a start.
  const std::string saved = dir + "/trained.weights";
  straight.save_weights(saved);
  Driver reloaded(saved, options);
  for (size_t p = 0; p < straight.engine().parameters().size(); ++p)
    CHECK(same_bits(straight.engine().parameters()[p].value, reloaded.engine().parameters()[p].value));
  for (size_t i = 0; i < state.size(); ++i) CHECK(same_bits(state[i].second, reloaded.engine().state_tensors()[i].second));
  CHECK(std::filesystem::remove_all(dir) > 0);
}

TEST_CASE("generated training driver: weights from an ONNX file trained elsewhere", "[train_driver]") {
  using Driver = convgen_model_small_resnet::Trainer;
  const auto options = driver_options<convgen_model_small_resnet::TrainOptions>(1, false);
  // Trained by the in-process trainer and exported as convgen train --save does.
  auto jit_owned = model::make_trainer(model_file("small_resnet"), jit_options(), default_target());
  model::Trainer& jit = *jit_owned;
  TrainRun run;
  data::Batch last;
  train_epoch(jit, 0, &run, &last);
  std::map<std::string, std::vector<float>> tensors;
  for (const model::Parameter& p : jit.parameters()) tensors[p.name] = p.value;
  for (const auto& [name, data] : jit.state_tensors()) tensors[name] = data;
  const std::string dir = scratch_dir("onnx");
  const std::string trained = dir + "/trained.onnx";
  model::save_onnx_with_initializers(model_file("small_resnet"), tensors, trained);

  Driver driver(weights_file("small_resnet"), options);
  driver.load_onnx_weights(trained);
  for (size_t p = 0; p < jit.parameters().size(); ++p) {
    INFO("parameter " << jit.parameters()[p].name);
    CHECK(same_bits(jit.parameters()[p].value, driver.engine().parameters()[p].value));
  }
  const auto state = jit.state_tensors();
  REQUIRE(!state.empty());
  for (size_t i = 0; i < state.size(); ++i) CHECK(same_bits(state[i].second, driver.engine().state_tensors()[i].second));

  // The bundled file gives back the driver's own initial weights.
  Driver fresh(weights_file("small_resnet"), options);
  Driver from_onnx(weights_file("small_resnet"), options);
  from_onnx.load_onnx_weights(model_file("small_resnet"));
  for (size_t p = 0; p < fresh.engine().parameters().size(); ++p)
    CHECK(same_bits(fresh.engine().parameters()[p].value, from_onnx.engine().parameters()[p].value));

  // Another architecture, a truncated file: errors naming the file, nothing changed.
  try {
    from_onnx.load_onnx_weights(model_file("lenet"));
    FAIL("another model's initializers were accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::BadData);
    CHECK_THAT(e.what(), Catch::Contains("lenet.onnx") && Catch::Contains("no float initializer"));
  }
  {
    std::ifstream in(trained, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/cut.onnx", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  CHECK_THROWS_AS(from_onnx.load_onnx_weights(dir + "/cut.onnx"), Error);
  auto fails_with = [&](const std::string& path, ExitCode code, const std::string& text) {
    try {
      from_onnx.load_onnx_weights(path);
      FAIL("accepted " << path);
    } catch (const Error& e) {
      CHECK(e.code() == code);
      CHECK_THAT(e.what(), Catch::Contains(path) && Catch::Contains(text));
    }
  };
  fails_with(dir + "/missing.onnx", ExitCode::Io, "cannot read");
  std::ofstream(dir + "/text.onnx") << "not a model at all\n";
  fails_with(dir + "/text.onnx", ExitCode::BadData, "not a valid ONNX model");
  for (size_t p = 0; p < fresh.engine().parameters().size(); ++p)
    CHECK(same_bits(fresh.engine().parameters()[p].value, from_onnx.engine().parameters()[p].value));
  std::filesystem::remove_all(dir);
}

TEST_CASE("generated training driver: forward gives the logits evaluate scores", "[train_driver]") {
  convgen_model_cifar10_full::Trainer driver(weights_file("cifar10_full"),
                                             driver_options<convgen_model_cifar10_full::TrainOptions>(2, false));
  TrainRun run;
  data::Batch last;
  train_epoch(driver.engine(), 0, &run, &last);
  const auto& tg = driver.engine().graph();
  data::SampleSpec spec;
  spec.channels = tg.sample_shape[0], spec.height = tg.sample_shape[1], spec.width = tg.sample_shape[2];
  spec.classes = tg.classes;
  const data::Dataset set = data::synthetic_dataset(spec, kSamples, 3, "synthetic");
  data::Batch b;
  data::decode_batch(set, data::epoch_order(kSamples, 0, false, 0), 0, kBatch, data::Normalization{}, &b);
  std::vector<float> logits(size_t(kBatch * tg.classes), -1.0f);
  driver.forward(b.pixels.data(), kBatch, logits.data());
  // The arg-max of each row is the prediction evaluate counts; a reference loss from
  // the logits matches evaluate's to rounding.
  int64_t correct = 0;
  double loss = 0.0;
  for (int64_t i = 0; i < kBatch; ++i) {
    const float* row = logits.data() + i * tg.classes;
    const int64_t best = std::max_element(row, row + tg.classes) - row;
    correct += best == b.labels[i];
    double sum = 0.0;
    for (int64_t c = 0; c < tg.classes; ++c) sum += std::exp(double(row[c]) - double(row[best]));
    loss += std::log(sum) - (double(row[b.labels[i]]) - double(row[best]));
  }
  const model::StepStats s = driver.evaluate(b.pixels.data(), b.labels.data(), kBatch);
  CHECK(s.correct == correct);
  CHECK(std::abs(s.loss - loss / kBatch) < 1e-5 * std::max(1.0, s.loss));
  // forward twice: the same bits.
  std::vector<float> again(logits.size());
  driver.forward(b.pixels.data(), kBatch, again.data());
  CHECK(same_bits(logits, again));
}
