// The trainer's contract (docs/training.md): weights, momentum buffers and every loss
// are bit-identical for T = 1, 2, 3, 4 threads and with intra-kernel parallelism forced
// on, over an epoch whose last mini-batch is partial and ends in a partial micro-batch.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "generator/model/executor.h"
#include "generator/onnx/import.h"
#include "generator/train/trainer_from_model.h"
#include "runtime/data/train_data.h"
#include "runtime/train/train_ops.h"
#include "runtime/train/trainer.h"
#include "schedules/errors.h"
#include "tests/common/onnx_test_models.h"
#include "tests/common/small_image_model.h"
#include "tests/common/train_compare.h"
#include "tests/common/train_epoch.h"

using namespace convgen;

namespace {

std::string bundled(const std::string& name) { return std::string(CONVGEN_MODELS_DIR) + "/" + name + ".onnx"; }

using Run = test::TrainRun;
using test::require_thread_invariance;
using test::train_epoch;
using test::require_identical;
using test::same_bits;

// A small residual network without BatchNormalization: conv -> relu -> (conv -> relu ->
// conv) + skip -> relu -> dropout -> global average pool -> flatten -> gemm. Exercises
// a value read by two nodes (gradients added), Dropout masks, GlobalAveragePool, a
// strided padded conv and a Conv whose Relu is not fusable.
std::string small_residual_model() {
  test::OnnxModelBuilder b;
  b.input("x", {-1, 3, 12, 12}).output("logits", 2);
  b.weights("w1", {8, 3, 3, 3}).weights("b1", {8});
  b.weights("w2", {8, 8, 3, 3}).weights("w3", {8, 8, 3, 3}).weights("b3", {8});
  b.weights("fc_w", {5, 8}).weights("fc_b", {5});
  // Weights 0.01 * i grow large: scale them into a trainable range with small values.
  for (auto& t : *b.model().mutable_graph()->mutable_initializer())
    for (int i = 0; i < t.float_data_size(); ++i)
      t.set_float_data(i, 0.05f * std::sin(0.7f * float(i) + float(t.name().size())));
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  test::set_ints(c1, "strides", {2, 2});
  b.node("Relu", {"c1"}, {"r1"}, "relu1");
  auto& c2 = b.node("Conv", {"r1", "w2"}, {"c2"}, "conv2");
  test::set_ints(c2, "pads", {1, 0, 1, 2});
  b.node("Relu", {"c2"}, {"r2"}, "relu2");
  auto& c3 = b.node("Conv", {"r2", "w3", "b3"}, {"c3"}, "conv3");
  test::set_ints(c3, "pads", {1, 2, 1, 0});
  b.node("Add", {"c3", "r1"}, {"sum"}, "skip");
  b.node("Relu", {"sum"}, {"r3"}, "relu3");
  auto& d = b.node("Dropout", {"r3"}, {"dropped"}, "dropout");
  (void)d;
  b.node("GlobalAveragePool", {"dropped"}, {"pooled"}, "gap");
  b.node("Flatten", {"pooled"}, {"flat"}, "flatten");
  auto& fc = b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"logits"}, "fc");
  test::set_int(fc, "transB", 1);
  return b.write("small_residual");
}

}  // namespace

namespace {

}  // namespace

// 110 = 4 * 24 + 14: the epoch's last mini-batch is partial and so is its last
// micro-batch (micro-batches of 8: 8 + 6).
TEST_CASE("trainer invariance: LeNet", "[trainer]") { require_thread_invariance(bundled("lenet"), 110, 24); }
TEST_CASE("trainer invariance: cifar10_full", "[trainer]") {
  require_thread_invariance(bundled("cifar10_full"), 62, 20);  // 3 * 20 + 2
}
TEST_CASE("trainer invariance: residual model, asymmetric pads, Dropout", "[trainer]") {
  require_thread_invariance(small_residual_model(), 110, 24);
}
TEST_CASE("trainer invariance: small ResNet with BatchNormalization and Dropout", "[trainer]") {
  require_thread_invariance(bundled("small_resnet"), 110, 24);
}
TEST_CASE("trainer invariance: U-Net (ConvTranspose, Concat skips, a label per pixel)", "[trainer]") {
  require_thread_invariance(bundled("unet_tiny"), 54, 16);  // 3 * 16 + 6: micro-batches of 4, the last of 2
}

TEST_CASE("trainer: the training export keeps BatchNormalization and Dropout", "[trainer]") {
  // An eval-mode export would have folded BN into the convolutions and dropped Dropout.
  model::TrainerOptions o;
  o.batch = 8;
  auto trainer_owned = model::make_trainer(bundled("small_resnet"), o, default_target());
  model::Trainer& trainer = *trainer_owned;
  int bn = 0, bn_relu = 0, dropout = 0, relu = 0;
  for (const model::Node& n : trainer.graph().graph.nodes) {
    bn += n.op == model::Op::BatchNormalization;
    bn_relu += n.op == model::Op::BatchNormalization && n.attributes.fused_relu;
    dropout += n.op == model::Op::Dropout;
    relu += n.op == model::Op::Relu;
  }
  CHECK(bn == 4);
  // BN -> Relu runs as one node where the Relu is the BN's only reader; the Relu after
  // the residual Add stays.
  CHECK(bn_relu == 3);
  CHECK(relu == 1);
  CHECK(dropout == 1);
  CHECK(trainer.state_tensors().size() == 8);  // running mean and variance of each BN
}

TEST_CASE("trainer: the micro-batch size changes the summation tree, and only that", "[trainer]") {
  // Micro-batches of 4 instead of 8: a different, equally fixed tree -- close, not equal.
  const Run eight = train_epoch(bundled("lenet"), 48, 16, 2, false, 8);
  const Run four = train_epoch(bundled("lenet"), 48, 16, 2, false, 4);
  REQUIRE(eight.losses.size() == four.losses.size());
  CHECK(eight.losses[0] == Approx(four.losses[0]).epsilon(1e-6));
  for (size_t p = 0; p < eight.parameters.size(); ++p)
    for (size_t i = 0; i < eight.parameters[p].value.size(); i += 97)
      CHECK(eight.parameters[p].value[i] == Approx(four.parameters[p].value[i]).margin(1e-4));
}

TEST_CASE("trainer: the loss goes down on a learnable problem", "[trainer]") {
  // Repeating one mini-batch: SGD must fit it.
  model::TrainerOptions o;
  o.batch = 16;
  o.threads = 2;
  o.lr = 0.002f;
  auto trainer_owned = model::make_trainer(bundled("lenet"), o, default_target());
  model::Trainer& trainer = *trainer_owned;
  data::SampleSpec spec;
  const data::Dataset set = data::synthetic_dataset(spec, 16, 3, "synthetic");
  data::Batch b;
  data::decode_batch(set, data::epoch_order(16, 0, false, 0), 0, 16, data::Normalization{}, &b);
  const double first = trainer.train_step(b.pixels.data(), b.labels.data(), 16).loss;
  double last = first;
  for (int i = 0; i < 40; ++i) last = trainer.train_step(b.pixels.data(), b.labels.data(), 16).loss;
  CHECK(last < 0.5 * first);
  CHECK(trainer.evaluate(b.pixels.data(), b.labels.data(), 16).correct >= 12);
}

TEST_CASE("trainer: models it cannot train are refused naming the node", "[trainer]") {
  test::OnnxModelBuilder b;
  b.input("x", {-1, 1, 8, 8}).output("y", 2);
  b.weights("w", {4, 1, 3, 3});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("GlobalMaxPool", {"c"}, {"t"}, "max");  // no backward
  b.node("Flatten", {"t"}, {"y"}, "flat");
  const std::string path = b.write("global_max_model");
  try {
    model::TrainerOptions o;
    o.batch = 4;
    auto trainer_owned = model::make_trainer(path, o, default_target());
    model::Trainer& trainer = *trainer_owned;
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Unsupported);
    CHECK_THAT(e.what(), Catch::Contains("node 'max' (GlobalMaxPool)") && Catch::Contains("not supported in training"));
  }
  model::TrainerOptions o;
  o.batch = 4;
  o.micro_batch = 8;
  CHECK_THROWS_AS(model::make_trainer(bundled("lenet"), o, default_target()), Error);
}

TEST_CASE("trainer: reductions, Transposes and Slices across the batch are refused naming the node", "[trainer]") {
  auto refusal = [](const std::string& op, const std::function<void(onnx::NodeProto&)>& set, const std::string& why) {
    test::OnnxModelBuilder b;
    b.input("x", {-1, 2, 4, 4}).output("y", 2);
    b.weights("w", {1, 2, 1, 1});  // one channel: swapping it with the batch keeps [1, 16] logits
    b.node("Conv", {"x", "w"}, {"c"}, "conv");
    set(b.node(op, {"c"}, {"r"}, "across"));
    b.node("Flatten", {"r"}, {"y"}, "flat");
    model::TrainerOptions o;
    o.batch = 4;
    o.micro_batch = 1;  // the batch dimension has extent 1 in every micro-batch
    try {
      model::make_trainer(b.write("across_batch"), o, default_target());
      FAIL(op << ": no error");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::Unsupported);
      CHECK_THAT(e.what(), Catch::Contains("node 'across' (" + op + "): not supported in training: " + why));
    }
  };
  refusal("ReduceMean", [](onnx::NodeProto& n) { test::set_ints(n, "axes", {0, 1}); }, "a reduction over the batch");
  refusal("Transpose", [](onnx::NodeProto& n) { test::set_ints(n, "perm", {1, 0, 2, 3}); },
          "a Transpose that moves the batch");
}

namespace {

std::string small_image_model() {
  test::OnnxModelBuilder b;
  test::build_small_image_model(b);
  for (auto& t : *b.model().mutable_graph()->mutable_initializer())
    for (int i = 0; i < t.float_data_size(); ++i)
      t.set_float_data(i, 0.08f * std::sin(0.37f * float(i) + float(t.name().size())));
  return b.write("small_image");
}

std::string modes_of(const std::string& model, int64_t batch, const std::map<std::string, model::ParallelMode>& force = {}) {
  model::TrainerOptions o;
  o.batch = batch;
  o.parallel_modes = force;
  return model::make_trainer(model, o, default_target())->parallel_modes();
}

// The batched layers (whole-batch forward and backward-data), comma-joined.
std::string batched_of(const std::string& model, int64_t batch, int threads, int64_t from_weight_bytes = 0) {
  model::TrainerOptions o;
  o.batch = batch;
  o.threads = threads;
  o.batched_from_weight_bytes = from_weight_bytes;
  auto trainer = model::make_trainer(model, o, default_target());
  std::string out;
  for (const std::string& name : trainer->batched_layers()) out += (out.empty() ? "" : ",") + name;
  return out;
}

}  // namespace

TEST_CASE("trainer: whole-batch layers with too little work per weight run every pass over the mini-batch",
          "[trainer]") {
  const std::string model = small_image_model();
  // Micro-batches of 6: conv1 does 27 flop per byte of weights (whole-batch, not batched:
  // at least 16); conv2 on 2x2 outputs 12, conv3 and conv4 (1x1 outputs, 4 and 1 of 9
  // taps) less: batched. Micro-batches of 64: conv2 is micro-batch; conv3 does 14.2, conv4
  // 3.6: batched. The thread count changes nothing.
  CHECK(batched_of(model, 24, 1) == "conv2,conv3,conv4");
  CHECK(batched_of(model, 24, 3) == "conv2,conv3,conv4");
  CHECK(batched_of(model, 256, 1) == "conv3,conv4");
  CHECK(batched_of(model, 256, 2) == "conv3,conv4");
  // Only kernels with enough weights: conv2 reads 18 KiB (32 x 16 x 9 floats), conv3 16
  // KiB (its 4 taps of 32 x 32), conv4 4 KiB (its centre tap). The default floor, 1 MiB,
  // batches none of them.
  CHECK(batched_of(model, 24, 2, 16 * 1024) == "conv2,conv3");
  CHECK(batched_of(model, 24, 2, 17 * 1024) == "conv2");
  CHECK(batched_of(model, 24, 2, model::TrainerOptions{}.batched_from_weight_bytes).empty());
  // Batching is part of what a resumed run must match.
  model::TrainerOptions o;
  o.batch = 24;
  o.batched_from_weight_bytes = 0;
  const std::string batched_key = model::make_trainer(model, o, default_target())->execution_key();
  o.batched_from_weight_bytes = model::TrainerOptions{}.batched_from_weight_bytes;
  const std::string default_key = model::make_trainer(model, o, default_target())->execution_key();
  CHECK(batched_key != default_key);
  CHECK_THAT(batched_key, Catch::EndsWith("batched=conv2,conv3,conv4"));
}

TEST_CASE("trainer: layers on small images take whole-batch gradients, chosen without the thread count", "[trainer]") {
  const std::string model = small_image_model();
  // Micro-batches of 6 (batch 24): conv1 on 3x3 outputs does 6 * 9 * 2 / 4 = 27 flop per
  // byte of its gradient, below 64: whole-batch, as are the 2x2 and 1x1 layers.
  CHECK(modes_of(model, 24) == "conv1=whole-batch,conv2=whole-batch,conv3=whole-batch,conv4=whole-batch");
  // Micro-batches of 64 (batch 256): conv1 does 288, conv2 on 2x2 128: micro-batch.
  CHECK(modes_of(model, 256) == "conv1=micro-batch,conv2=micro-batch,conv3=whole-batch,conv4=whole-batch");
  CHECK(modes_of(model, 24, {{"conv3", model::ParallelMode::MicroBatch}}) ==
        "conv1=whole-batch,conv2=whole-batch,conv3=micro-batch,conv4=whole-batch");
  try {
    modes_of(model, 24, {{"relu1", model::ParallelMode::MicroBatch}});
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(e.what(), Catch::Contains("'relu1' is not a Conv or ConvTranspose node"));
  }
}

TEST_CASE("trainer invariance: small images (whole-batch gradients, cropped taps)", "[trainer]") {
  require_thread_invariance(small_image_model(), 110, 24);  // per micro-batch, weights packed once
  require_thread_invariance(small_image_model(), 110, 24, 0, 0);  // conv2..conv4 batched
}

TEST_CASE("trainer invariance: small images, every layer forced to micro-batch mode", "[trainer]") {
  // The cropped layers' per-micro-batch path (gradients expanded to the full kernel);
  // a different summation order than whole-batch, so close to it, not equal.
  const std::string model = small_image_model();
  std::map<std::string, model::ParallelMode> micro;
  for (const char* conv : {"conv1", "conv2", "conv3", "conv4"}) micro[conv] = model::ParallelMode::MicroBatch;
  const Run one = train_epoch(model, 50, 24, 1, false, 0, micro);
  for (int threads : {2, 3}) {
    INFO("threads " << threads);
    require_identical(one, train_epoch(model, 50, 24, threads, false, 0, micro));
  }
  const Run whole = train_epoch(model, 50, 24, 2, false);
  REQUIRE(whole.losses.size() == one.losses.size());
  bool any_different = false;
  for (size_t p = 0; p < one.parameters.size(); ++p)
    for (size_t i = 0; i < one.parameters[p].value.size(); ++i) {
      CHECK(one.parameters[p].value[i] == Approx(whole.parameters[p].value[i]).margin(1e-4));
      any_different = any_different || one.parameters[p].value[i] != whole.parameters[p].value[i];
    }
  CHECK(any_different);
}

TEST_CASE("Dropout masks: keyed by the node's output name, not its position in the graph", "[trainer]") {
  // Two 2 x 64 inputs; the mask depends on the seed, the output's name, the step and the
  // sample's index in the mini-batch only.
  std::vector<float> x(128, 1.0f), y(128), mask_a(128), mask_b(128), mask_again(128), mask_later(128);
  const int64_t shape[] = {2, 64};
  auto run = [&](const std::string& name, int64_t step, int64_t first_sample, std::vector<float>& mask) {
    ConstView in{x.data(), {shape[0], shape[1]}};
    View out{y.data(), {shape[0], shape[1]}};
    ops::dropout_forward(in, 0.5f, 7, ops::dropout_stream(name), step, first_sample, out, mask.data());
  };
  run("dropped", 3, 0, mask_a);
  run("dropped", 3, 0, mask_again);
  run("other", 3, 0, mask_b);
  run("dropped", 3, 1, mask_later);  // its sample 0 is the mini-batch's sample 1
  CHECK(std::memcmp(mask_a.data(), mask_again.data(), 128 * sizeof(float)) == 0);
  CHECK(std::memcmp(mask_a.data(), mask_b.data(), 128 * sizeof(float)) != 0);
  CHECK(std::memcmp(mask_a.data() + 64, mask_later.data(), 64 * sizeof(float)) == 0);
  int kept = 0;
  for (float m : mask_a) {
    CHECK((m == 0.0f || m == 2.0f));
    kept += m != 0.0f;
  }
  CHECK(kept > 32);
  CHECK(kept < 96);
  CHECK(ops::dropout_stream("dropped") != ops::dropout_stream("dropped_"));
}

TEST_CASE("trainer: its forward equals the executor's where row ops meet convolutions' layouts", "[trainer]") {
  // Conv -> InstanceNormalization -> Relu -> Conv -> LayerNormalization (axis 1) ->
  // Gather (channels) -> Conv -> GlobalAveragePool -> Flatten -> Gemm: the row ops read
  // and write values the convolutions hold channels-last. The trainer's forward (no
  // BatchNorm, no Dropout: nothing differs from inference) must match the executor's,
  // which plans layout conversions explicitly.
  test::OnnxModelBuilder b(17);
  b.input("x", {-1, 2, 6, 5}).output("logits", 2);
  b.weights("w1", {4, 2, 3, 3}).weights("s1", {4}).weights("b1", {4}).weights("w2", {4, 4, 1, 1});
  b.weights("s2", {4, 6, 5}).weights("w3", {3, 3, 3, 3}).weights("fc", {5, 3}).weights("fcb", {5});
  for (auto& t : *b.model().mutable_graph()->mutable_initializer())
    for (int i = 0; i < t.float_data_size(); ++i)
      t.set_float_data(i, 0.3f * std::sin(1.3f * float(i) + float(t.name().size())));
  b.int64_initializer("pick", {3, 0, 2});
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  b.node("InstanceNormalization", {"c1", "s1", "b1"}, {"n1"}, "instance_norm");
  b.node("Relu", {"n1"}, {"r1"}, "relu");
  b.node("Conv", {"r1", "w2"}, {"c2"}, "conv2");
  test::set_int(b.node("LayerNormalization", {"c2", "s2"}, {"n2"}, "layer_norm"), "axis", 1);
  test::set_int(b.node("Gather", {"n2", "pick"}, {"g2"}, "pick_channels"), "axis", 1);
  auto& c3 = b.node("Conv", {"g2", "w3"}, {"c3"}, "conv3");
  test::set_ints(c3, "pads", {1, 1, 1, 1});
  b.node("GlobalAveragePool", {"c3"}, {"gap"}, "gap");
  b.node("Flatten", {"gap"}, {"flat"}, "flatten");
  auto& fc = b.node("Gemm", {"flat", "fc", "fcb"}, {"logits"}, "fc");
  test::set_int(fc, "transB", 1);
  const std::string path = b.write("row_ops_layouts");

  const int64_t batch = 4;
  Tensor x({batch, 2, 6, 5}, false);
  for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = std::cos(0.37f * float(i));
  model::ImportOptions options;
  options.batch = batch;
  model::ModelExecutor exec(model::import_onnx(path, options), default_target(), "", nullptr, 1);
  const std::vector<Tensor> want = exec.run({{"x", x}});
  model::TrainerOptions o;
  o.batch = batch;
  o.micro_batch = 2;
  o.threads = 2;
  auto trainer = model::make_trainer(path, o, default_target());
  std::vector<float> got(static_cast<size_t>(batch * 5));
  trainer->forward(x.data.data(), batch, got.data());
  REQUIRE(want.at(0).data.size() == got.size());
  double scale = 0.0, worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    scale = std::max(scale, double(std::fabs(want[0].data[i])));
    worst = std::max(worst, double(std::fabs(got[i] - want[0].data[i])));
  }
  INFO("largest difference " << worst << " of max |logit| " << scale);
  CHECK(worst <= 1e-5 * scale);
}
