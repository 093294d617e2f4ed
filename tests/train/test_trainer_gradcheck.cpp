// The trainer's gradients against finite differences of its own loss, through every
// operator's backward: small models built in code, up to 48 elements of every parameter
// probed with a central difference (step 1e-3 relative: at 1e-2 some probes of conv1
// cross max-pooling and LeakyReLU kinks and differ by 13 %). The test fails when a
// backward is broken (checked: LeakyReLU's negative slope x3 fails 3 probes, Concat's
// channel offset off by one fails 53).
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>

#include "generator/train/trainer_from_model.h"
#include "runtime/train/trainer.h"
#include "tests/common/onnx_test_models.h"
#include "tests/common/small_image_model.h"

using namespace convgen;

namespace {

// Weights ~ N(0, 0.3) by a fixed seed (the builder's 0.01 * i ramp is a poor start).
void randomize(test::OnnxModelBuilder& b, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (auto& t : *b.model().mutable_graph()->mutable_initializer())
    if (t.data_type() == onnx::TensorProto_DataType_FLOAT && t.float_data_size() > 1)
      for (int i = 0; i < t.float_data_size(); ++i) t.set_float_data(i, normal(rng));
}

struct Data {
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};

Data labelled_data(int64_t n, int64_t sample, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Data d;
  d.pixels.resize(static_cast<size_t>(n * sample));
  for (float& v : d.pixels) v = u(rng);
  for (int64_t i = 0; i < n; ++i) d.labels.push_back(int32_t(rng() % classes));
  return d;
}

// Trains one step with lr 0 (nothing moves) to get the gradients, then compares a few
// elements of each with (L(w + h) - L(w - h)) / 2h from evaluate().
// batched_from_weight_bytes < 0 keeps the trainer's default.
void check_gradients(const std::string& model, int64_t batch, int64_t micro, const Data& d,
                     const std::map<std::string, model::ParallelMode>& modes = {},
                     int64_t batched_from_weight_bytes = -1) {
  model::TrainerOptions o;
  o.parallel_modes = modes;
  if (batched_from_weight_bytes >= 0) o.batched_from_weight_bytes = batched_from_weight_bytes;
  o.batch = batch;
  o.micro_batch = micro;
  o.lr = 0.0f;
  o.momentum = 0.0f;
  o.threads = 2;
  auto trainer_owned = model::make_trainer(model, o, default_target());
  model::Trainer& trainer = *trainer_owned;
  trainer.train_step(d.pixels.data(), d.labels.data(), batch);
  const auto grads = trainer.last_gradients();
  auto loss = [&] { return trainer.evaluate(d.pixels.data(), d.labels.data(), batch).loss; };
  for (size_t p = 0; p < trainer.parameters().size(); ++p) {
    auto& param = trainer.parameters()[p];
    double scale = 0.0;
    for (float g : grads[p]) scale = std::max(scale, double(std::fabs(g)));
    const size_t n = param.value.size();
    const size_t probes = std::min<size_t>(n, 48);
    for (size_t k = 0; k < probes; ++k) {
      const size_t e = probes == n ? k : (k * 7919 + 13) % n;
      const float w = param.value[e];
      const float h = 1e-3f * std::max(1.0f, std::fabs(w));
      param.value[e] = w + h;
      const double up = loss();
      param.value[e] = w - h;
      const double down = loss();
      param.value[e] = w;
      const double fd = (up - down) / (double(param.value[e] + h) - double(param.value[e] - h));
      INFO(model << ": parameter " << param.name << " element " << e << ": backward " << grads[p][e]
                 << ", finite difference " << fd);
      CHECK(std::fabs(fd - grads[p][e]) <= 1e-2 * scale + 1e-4);
    }
  }
}

// x -> GlobalAveragePool -> Flatten -> Gemm(fc, fcb, transB) -> "logits" (the weights
// "fc" and "fcb" are the test's).
void logits_head(test::OnnxModelBuilder& b, const std::string& x) {
  b.node("GlobalAveragePool", {x}, {"gap"}, "gap");
  b.node("Flatten", {"gap"}, {"flat"}, "flatten");
  auto& fc = b.node("Gemm", {"flat", "fc", "fcb"}, {"logits"}, "fc");
  test::set_int(fc, "transB", 1);
}

}  // namespace

TEST_CASE("trainer gradients match finite differences: conv, pooling, element-wise, Concat, Pad", "[trainer][gradcheck]") {
  // conv(3x3, stride 2, asymmetric pads, bias) -> LeakyRelu -> Pad -> MaxPool(3, pads) ;
  // conv(1x1) -> Sigmoid ; Concat(channels) -> AveragePool(2, ceil) -> Sub(x, c) ->
  // Mul(x, x) (a value read twice) -> Div(., c2) -> Clip -> Flatten -> Gemm(transB) ->
  // Pow(., 1) [no-op power with gradient] -> logits
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 9, 9}).output("logits", 2);
  b.weights("w1", {4, 2, 3, 3}).weights("b1", {4}).weights("w2", {3, 4, 1, 1}).weights("fc", {5, 7 * 3 * 3});
  b.weights("fcb", {5});
  b.float_initializer("shift", {0.1f}).float_initializer("div", {1.5f}).float_initializer("one", {1.0f});
  randomize(b, 1);
  auto& c1 = b.node("Conv", {"x", "w1", "b1"}, {"c1"}, "conv1");
  test::set_ints(c1, "strides", {2, 2});
  test::set_ints(c1, "pads", {1, 0, 2, 1});
  auto& lr = b.node("LeakyRelu", {"c1"}, {"l1"}, "leaky");
  test::set_float(lr, "alpha", 0.2f);
  auto& pad = b.node("Pad", {"l1", "pads"}, {"p1"}, "pad");
  (void)pad;
  b.int64_initializer("pads", {0, 0, 1, 0, 0, 0, 0, 1});
  auto& mp = b.node("MaxPool", {"p1"}, {"m1"}, "maxpool");
  test::set_ints(mp, "kernel_shape", {3, 3});
  test::set_ints(mp, "pads", {1, 1, 1, 1});
  b.node("Conv", {"m1", "w2"}, {"c2"}, "conv2");
  b.node("Sigmoid", {"c2"}, {"s2"}, "sigmoid");
  auto& cat = b.node("Concat", {"m1", "s2"}, {"cat"}, "concat");
  test::set_int(cat, "axis", 1);
  auto& ap = b.node("AveragePool", {"cat"}, {"a1"}, "avgpool");
  test::set_ints(ap, "kernel_shape", {2, 2});
  test::set_ints(ap, "strides", {2, 2});
  test::set_int(ap, "ceil_mode", 1);
  b.node("Sub", {"a1", "shift"}, {"d1"}, "sub");
  b.node("Mul", {"d1", "d1"}, {"sq"}, "square");
  b.node("Div", {"sq", "div"}, {"q1"}, "div");
  auto& clip = b.node("Clip", {"q1", "lo", "hi"}, {"k1"}, "clip");
  (void)clip;
  b.float_initializer("lo", {-5.0f}).float_initializer("hi", {5.0f});
  b.node("Flatten", {"k1"}, {"flat"}, "flatten");
  auto& fc = b.node("Gemm", {"flat", "fc", "fcb"}, {"g1"}, "fc");
  test::set_int(fc, "transB", 1);
  b.node("Pow", {"g1", "one"}, {"logits"}, "pow");
  const std::string path = b.write("gradcheck_ops");
  check_gradients(path, 6, 4, labelled_data(6, 2 * 9 * 9, 5, 2));  // micro-batches 4 + 2
}

TEST_CASE("trainer gradients match finite differences: Gemm -> Reshape to 4-D -> Conv, LRN, GlobalAveragePool",
          "[trainer][gradcheck]") {
  // BatchNormalization is checked against PyTorch (train.torch_equivalence): evaluate()
  // uses its running statistics, so a finite difference of it would not be the training loss.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 3, 2, 2}).output("logits", 2);
  b.weights("g1", {48, 12}).weights("g1b", {48}).weights("w", {4, 3, 3, 3}).weights("fc_t", {4, 6});
  randomize(b, 3);
  b.node("Flatten", {"x"}, {"xf"}, "flatten_in");
  auto& g = b.node("Gemm", {"xf", "g1", "g1b"}, {"h"}, "dense");
  test::set_int(g, "transB", 1);
  b.int64_initializer("shape", {-1, 3, 4, 4});
  b.node("Reshape", {"h", "shape"}, {"r"}, "to_image");
  auto& c = b.node("Conv", {"r", "w"}, {"c"}, "conv");
  test::set_ints(c, "pads", {1, 1, 1, 1});
  auto& lrn = b.node("LRN", {"c"}, {"l"}, "lrn");
  test::set_int(lrn, "size", 3);
  test::set_float(lrn, "alpha", 0.5f);
  b.node("GlobalAveragePool", {"l"}, {"gap"}, "gap");
  b.node("Flatten", {"gap"}, {"f"}, "flatten");
  b.node("MatMul", {"f", "fc_t"}, {"logits"}, "fc");
  const std::string path = b.write("gradcheck_reshape");
  check_gradients(path, 5, 2, labelled_data(5, 12, 6, 5));  // micro-batches 2 + 2 + 1
}

TEST_CASE("trainer gradients match finite differences: squeeze-excitation broadcasts", "[trainer][gradcheck]") {
  // conv -> GlobalAveragePool -> conv(1x1) -> Sigmoid gives s[N, C, 1, 1]; Mul(c, s) broadcasts
  // it over the image (both operands' gradients: one summed over H x W), Add(., bias[C, 1, 1])
  // and Sub(bias2[1, W], .) broadcast initializers from either side and along the last axis.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 5, 5}).output("logits", 2);
  b.weights("w", {4, 2, 3, 3}).weights("wse", {4, 4, 1, 1}).weights("fc", {3, 4 * 5 * 5});
  b.weights("bias", {4, 1, 1}).weights("bias2", {1, 5});
  randomize(b, 11);
  auto& c = b.node("Conv", {"x", "w"}, {"c"}, "conv");
  test::set_ints(c, "pads", {1, 1, 1, 1});
  b.node("GlobalAveragePool", {"c"}, {"g"}, "squeeze");
  b.node("Conv", {"g", "wse"}, {"e"}, "excite");
  b.node("Sigmoid", {"e"}, {"s"}, "gate");
  b.node("Mul", {"c", "s"}, {"m"}, "scale");
  b.node("Add", {"m", "bias"}, {"a"}, "add_bias");
  b.node("Sub", {"bias2", "a"}, {"d"}, "sub_from");
  b.node("Flatten", {"d"}, {"f"}, "flatten");
  auto& fc = b.node("Gemm", {"f", "fc"}, {"logits"}, "fc");
  test::set_int(fc, "transB", 1);
  const std::string path = b.write("gradcheck_squeeze_excitation");
  check_gradients(path, 5, 2, labelled_data(5, 2 * 5 * 5, 3, 7));  // micro-batches 2 + 2 + 1
}

TEST_CASE("trainer gradients match finite differences: small images (whole-batch gradients, cropped taps)",
          "[trainer][gradcheck]") {
  // conv3 and conv4 read their inputs through 2x2 and 1x1 of their 3x3 taps: the other
  // taps' gradients must come out exactly zero, and every layer here is whole-batch.
  test::OnnxModelBuilder b;
  test::build_small_image_model(b);
  randomize(b, 9);
  const std::string path = b.write("gradcheck_small_images");
  check_gradients(path, 7, 3, labelled_data(7, 3 * 5 * 5, 5, 6));  // micro-batches 3 + 3 + 1
  check_gradients(path, 7, 3, labelled_data(7, 3 * 5 * 5, 5, 6), {}, 0);  // conv2..conv4 batched
  std::map<std::string, model::ParallelMode> micro;
  for (const char* conv : {"conv1", "conv2", "conv3", "conv4"}) micro[conv] = model::ParallelMode::MicroBatch;
  check_gradients(path, 7, 3, labelled_data(7, 3 * 5 * 5, 5, 6), micro);
  model::TrainerOptions o;
  o.batch = 7;
  o.micro_batch = 3;
  o.lr = 0.0f;
  auto trainer = model::make_trainer(path, o, default_target());
  const Data d = labelled_data(7, 3 * 5 * 5, 5, 6);
  trainer->train_step(d.pixels.data(), d.labels.data(), 7);
  const auto grads = trainer->last_gradients();
  for (size_t p = 0; p < grads.size(); ++p) {
    const std::string& name = trainer->parameters()[p].name;
    if (name != "w3" && name != "w4") continue;
    int64_t nonzero_outside = 0, nonzero_inside = 0;
    for (size_t e = 0; e < grads[p].size(); ++e) {
      const int64_t r = int64_t(e % 9) / 3, s = int64_t(e % 9) % 3;
      const bool kept = name == "w4" ? r == 1 && s == 1 : r >= 1 && s >= 1;
      (kept ? nonzero_inside : nonzero_outside) += grads[p][e] != 0.0f;
    }
    INFO(name);
    CHECK(nonzero_outside == 0);
    CHECK(nonzero_inside > 0);
  }
}

TEST_CASE("trainer gradients match finite differences: element-wise functions", "[trainer][gradcheck]") {
  // conv -> {HardSigmoid(4c), HardSwish(4c) (4c reaches both saturations), Tanh, Elu,
  // Softplus, Erf, Abs, Neg, Sqrt(Exp), Log(Softplus)} -> Concat -> GlobalAveragePool -> Gemm
  test::OnnxModelBuilder b(14);  // HardSwish is opset 14
  b.input("x", {-1, 2, 6, 6}).output("logits", 2);
  b.weights("w", {6, 2, 3, 3}).weights("wb", {6}).weights("fc", {5, 60}).weights("fcb", {5});
  b.float_initializer("four", {4.0f});
  randomize(b, 7);
  auto& conv = b.node("Conv", {"x", "w", "wb"}, {"c"}, "conv");
  test::set_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Mul", {"c", "four"}, {"c4"}, "times_four");
  b.node("HardSigmoid", {"c4"}, {"f0"}, "hardsigmoid");
  b.node("HardSwish", {"c4"}, {"f1"}, "hardswish");
  b.node("Tanh", {"c"}, {"f2"}, "tanh");
  test::set_float(b.node("Elu", {"c"}, {"f3"}, "elu"), "alpha", 0.7f);
  b.node("Softplus", {"c"}, {"f4"}, "softplus");
  b.node("Erf", {"c"}, {"f5"}, "erf");
  b.node("Abs", {"c"}, {"f6"}, "abs");
  b.node("Neg", {"c"}, {"f7"}, "neg");
  b.node("Exp", {"c"}, {"e"}, "exp");
  b.node("Sqrt", {"e"}, {"f8"}, "sqrt");
  b.node("Log", {"f4"}, {"f9"}, "log");
  auto& cat = b.node("Concat", {"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9"}, {"cat"}, "concat");
  test::set_int(cat, "axis", 1);
  b.node("GlobalAveragePool", {"cat"}, {"gap"}, "gap");
  b.node("Flatten", {"gap"}, {"flat"}, "flatten");
  test::set_int(b.node("Gemm", {"flat", "fc", "fcb"}, {"logits"}, "fc"), "transB", 1);
  check_gradients(b.write("gradcheck_functions"), 4, 2, labelled_data(4, 2 * 6 * 6, 5, 9));
}

TEST_CASE("trainer gradients match finite differences: reductions, Split, Slice, Transpose", "[trainer][gradcheck]") {
  // conv c -> Split(3, 5) -> {ReduceMean over H, W; ReduceMax over W, kept};
  // Transpose(c) to NHWC -> ReduceL2 over C; Slice(c) rows backwards by 2, columns by 2
  // -> ReduceSum over C (axes as an input) -> Flatten each -> Concat -> Gemm
  test::OnnxModelBuilder b(13);
  b.input("x", {-1, 3, 6, 6}).output("logits", 2);
  b.weights("w", {8, 3, 3, 3}).weights("fc", {5, 78});
  randomize(b, 11);
  test::set_ints(b.node("Conv", {"x", "w"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  b.int64_initializer("split", {3, 5});
  test::set_int(b.node("Split", {"c", "split"}, {"s0", "s1"}, "split"), "axis", 1);
  auto& mean = b.node("ReduceMean", {"s0"}, {"r0"}, "mean");
  test::set_ints(mean, "axes", {2, -1});
  test::set_int(mean, "keepdims", 0);
  test::set_ints(b.node("ReduceMax", {"s1"}, {"r1"}, "max"), "axes", {3});
  test::set_ints(b.node("Transpose", {"c"}, {"t"}, "to_nhwc"), "perm", {0, 2, 3, 1});
  auto& l2 = b.node("ReduceL2", {"t"}, {"r2"}, "l2");
  test::set_ints(l2, "axes", {3});
  test::set_int(l2, "keepdims", 0);
  b.int64_initializer("starts", {5, 1}).int64_initializer("ends", {-100, 6});
  b.int64_initializer("axes", {2, 3}).int64_initializer("steps", {-2, 2});
  b.node("Slice", {"c", "starts", "ends", "axes", "steps"}, {"sl"}, "slice");
  b.int64_initializer("channel_axis", {1});
  test::set_int(b.node("ReduceSum", {"sl", "channel_axis"}, {"r3"}, "sum"), "keepdims", 0);
  b.node("Flatten", {"r1"}, {"f1"}, "flatten1");
  b.node("Flatten", {"r2"}, {"f2"}, "flatten2");
  b.node("Flatten", {"r3"}, {"f3"}, "flatten3");
  test::set_int(b.node("Concat", {"r0", "f1", "f2", "f3"}, {"cat"}, "concat"), "axis", 1);
  test::set_int(b.node("Gemm", {"cat", "fc"}, {"logits"}, "fc"), "transB", 1);
  check_gradients(b.write("gradcheck_reductions"), 4, 2, labelled_data(4, 3 * 6 * 6, 5, 12));
}

TEST_CASE("trainer gradients match finite differences: ConvTranspose", "[trainer][gradcheck]") {
  // ConvT0 (2 -> 4, k2 s2, the first layer: no dX) -> Conv (k3 s2 p1) -> LeakyRelu ->
  // ConvT1 (4 -> 6, k3 s2 p1, output_padding 1, bias) -> Sigmoid -> ConvT2 (6 -> 4, k2,
  // 2 groups) -> GlobalAveragePool -> Flatten -> Gemm -> logits; in micro-batch mode,
  // whole-batch, and whole-batch at barriers.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 4, 4}).output("logits", 2);
  b.weights("wt0", {2, 4, 2, 2}).weights("w1", {4, 4, 3, 3}).weights("wt1", {4, 6, 3, 3}).weights("bt1", {6});
  b.weights("wt2", {6, 2, 2, 2}).weights("fc", {3, 4}).weights("fcb", {3});
  randomize(b, 12);
  auto& t0 = b.node("ConvTranspose", {"x", "wt0"}, {"u0"}, "up0");
  test::set_ints(t0, "strides", {2, 2});
  auto& c1 = b.node("Conv", {"u0", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "strides", {2, 2});
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  auto& lr = b.node("LeakyRelu", {"c1"}, {"l1"}, "leaky");
  test::set_float(lr, "alpha", 0.2f);
  auto& t1 = b.node("ConvTranspose", {"l1", "wt1", "bt1"}, {"u1"}, "up1");
  test::set_ints(t1, "strides", {2, 2});
  test::set_ints(t1, "pads", {1, 1, 1, 1});
  test::set_ints(t1, "output_padding", {1, 1});
  b.node("Sigmoid", {"u1"}, {"s1"}, "sigmoid");
  auto& t2 = b.node("ConvTranspose", {"s1", "wt2"}, {"u2"}, "up2");
  test::set_int(t2, "group", 2);
  logits_head(b, "u2");
  const std::string path = b.write("gradcheck_conv_transpose");
  const Data d = labelled_data(5, 2 * 4 * 4, 3, 13);
  check_gradients(path, 5, 2, d);  // micro-batches 2 + 2 + 1
  std::map<std::string, model::ParallelMode> whole;
  for (const char* layer : {"up0", "conv1", "up1", "up2"}) whole[layer] = model::ParallelMode::WholeBatch;
  check_gradients(path, 5, 2, d, whole);
  check_gradients(path, 5, 2, d, whole, 0);
}

TEST_CASE("trainer gradients match finite differences: Resize", "[trainer][gradcheck]") {
  // Conv -> Resize(linear, pytorch_half_pixel, x2) -> Sigmoid -> Resize(nearest,
  // asymmetric, floor, x1.5: PyTorch's nearest) -> Resize(cubic, align_corners, x0.8 and
  // x0.85) -> Conv -> GlobalAveragePool -> Flatten -> Gemm -> logits
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("w2", {4, 3, 3, 3}).weights("fc", {3, 4}).weights("fcb", {3});
  randomize(b, 21);
  b.float_initializer("x2", {4}, {1.0f, 1.0f, 2.0f, 2.0f});
  b.float_initializer("x1_5", {4}, {1.0f, 1.0f, 1.5f, 1.5f});
  b.float_initializer("shrink", {4}, {1.0f, 1.0f, 0.8f, 0.85f});
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  auto& r1 = b.node("Resize", {"c1", "", "x2"}, {"r1"}, "bilinear");
  test::set_string(r1, "mode", "linear");
  test::set_string(r1, "coordinate_transformation_mode", "pytorch_half_pixel");
  b.node("Sigmoid", {"r1"}, {"s1"}, "sigmoid");
  auto& r2 = b.node("Resize", {"s1", "", "x1_5"}, {"r2"}, "nearest");
  test::set_string(r2, "mode", "nearest");
  test::set_string(r2, "coordinate_transformation_mode", "asymmetric");
  test::set_string(r2, "nearest_mode", "floor");
  auto& r3 = b.node("Resize", {"r2", "", "shrink"}, {"r3"}, "bicubic");
  test::set_string(r3, "mode", "cubic");
  test::set_string(r3, "coordinate_transformation_mode", "align_corners");
  auto& c2 = b.node("Conv", {"r3", "w2"}, {"c2"}, "conv2");
  test::set_ints(c2, "pads", {1, 1, 1, 1});
  logits_head(b, "c2");
  const std::string path = b.write("gradcheck_resize");
  check_gradients(path, 5, 2, labelled_data(5, 2 * 5 * 4, 3, 22));
}

TEST_CASE("trainer gradients match finite differences: LayerNormalization", "[trainer][gradcheck]") {
  // Conv -> LayerNormalization over C, H, W (scale and bias per element) -> Relu ->
  // LayerNormalization over W (scale per element, no bias) -> GlobalAveragePool ->
  // Flatten -> Gemm -> logits
  test::OnnxModelBuilder b(17);
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("s1", {3, 5, 4}).weights("b1", {3, 5, 4}).weights("s2", {4});
  b.weights("fc", {3, 3}).weights("fcb", {3});
  randomize(b, 31);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  test::set_int(b.node("LayerNormalization", {"c1", "s1", "b1"}, {"n1"}, "norm1"), "axis", 1);
  b.node("Relu", {"n1"}, {"r1"}, "relu");
  auto& n2 = b.node("LayerNormalization", {"r1", "s2"}, {"n2"}, "norm2");
  test::set_float(n2, "epsilon", 1e-3f);
  logits_head(b, "n2");
  check_gradients(b.write("gradcheck_layer_norm"), 5, 2, labelled_data(5, 2 * 5 * 4, 3, 32));
}

TEST_CASE("trainer gradients match finite differences: PRelu", "[trainer][gradcheck]") {
  // Conv -> PRelu (a slope per channel, [C, 1, 1]) -> Conv -> PRelu (one slope) ->
  // GlobalAveragePool -> Flatten -> Gemm -> logits; the slopes train.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("w2", {3, 3, 1, 1}).weights("fc", {3, 3}).weights("fcb", {3});
  b.float_initializer("slopes", {3, 1, 1}, {0.25f, -0.5f, 0.1f}).float_initializer("slope", {1}, {0.2f});
  randomize(b, 41);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  b.node("PRelu", {"c1", "slopes"}, {"p1"}, "prelu1");
  b.node("Conv", {"p1", "w2"}, {"c2"}, "conv2");
  b.node("PRelu", {"c2", "slope"}, {"p2"}, "prelu2");
  logits_head(b, "p2");
  check_gradients(b.write("gradcheck_prelu"), 5, 2, labelled_data(5, 2 * 5 * 4, 3, 42));
}

TEST_CASE("trainer gradients match finite differences: Max, Min and Mean", "[trainer][gradcheck]") {
  // Two Convs -> Max of both -> Min with a broadcast per-channel bound -> Mean of three
  // (a chain of Adds and a division) -> GlobalAveragePool -> Flatten -> Gemm -> logits.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("w2", {3, 2, 1, 1}).weights("fc", {3, 3}).weights("fcb", {3});
  randomize(b, 45);
  b.float_initializer("bound", {3, 1, 1}, {0.3f, -0.2f, 0.05f});
  test::set_ints(b.node("Conv", {"x", "w1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "w2"}, {"c2"}, "conv2");
  b.node("Max", {"c1", "c2"}, {"larger"}, "max");
  b.node("Min", {"larger", "bound"}, {"bounded"}, "min");
  b.node("Mean", {"bounded", "c1", "c2"}, {"mean"}, "mean");
  logits_head(b, "mean");
  check_gradients(b.write("gradcheck_max_min_mean"), 5, 2, labelled_data(5, 2 * 5 * 4, 3, 46));
}

TEST_CASE("trainer gradients match finite differences: DepthToSpace and SpaceToDepth", "[trainer][gradcheck]") {
  // Conv (2 -> 8) -> DepthToSpace (2, CRD: PixelShuffle) -> Sigmoid -> SpaceToDepth (2)
  // -> Conv (8 -> 4, 1x1) -> DepthToSpace (2, DCR) -> GlobalAveragePool -> Flatten -> Gemm
  test::OnnxModelBuilder b(13);
  b.input("x", {-1, 2, 3, 4}).output("logits", 2);
  b.weights("w1", {8, 2, 3, 3}).weights("w2", {4, 8, 1, 1}).weights("fc", {3, 1}).weights("fcb", {3});
  randomize(b, 51);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  auto& d1 = b.node("DepthToSpace", {"c1"}, {"d1"}, "shuffle");
  test::set_int(d1, "blocksize", 2);
  test::set_string(d1, "mode", "CRD");
  b.node("Sigmoid", {"d1"}, {"s1"}, "sigmoid");
  test::set_int(b.node("SpaceToDepth", {"s1"}, {"u1"}, "unshuffle"), "blocksize", 2);
  b.node("Conv", {"u1", "w2"}, {"c2"}, "conv2");
  test::set_int(b.node("DepthToSpace", {"c2"}, {"d2"}, "depth_to_space"), "blocksize", 2);
  logits_head(b, "d2");
  check_gradients(b.write("gradcheck_depth_space"), 5, 2, labelled_data(5, 2 * 3 * 4, 3, 52));
}

TEST_CASE("trainer gradients match finite differences: InstanceNormalization", "[trainer][gradcheck]") {
  // Conv -> InstanceNormalization (a LayerNormalization over H, W without scale, then the
  // per-channel scale and bias as Mul and Add) -> Sigmoid -> GlobalAveragePool -> Gemm.
  // Not Relu: normalised values crowd its kink, where finite differences mislead.
  test::OnnxModelBuilder b;
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("scale", {3}).weights("bias", {3}).weights("fc", {3, 3}).weights("fcb", {3});
  randomize(b, 61);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  b.node("InstanceNormalization", {"c1", "scale", "bias"}, {"n1"}, "instance_norm");
  b.node("Sigmoid", {"n1"}, {"r1"}, "sigmoid");
  logits_head(b, "r1");
  const std::string path = b.write("gradcheck_instance_norm");
  check_gradients(path, 5, 2, labelled_data(5, 2 * 5 * 4, 3, 62));
  model::TrainerOptions o;
  o.batch = 5;
  auto trainer = model::make_trainer(path, o, default_target());
  std::set<std::string> names;
  for (const auto& p : trainer->parameters()) names.insert(p.name);
  CHECK(names == std::set<std::string>{"w1", "scale", "bias", "fc", "fcb"});  // under the model's own names

  // One channel: its scale and bias are one value each, and still train.
  test::OnnxModelBuilder one;
  one.input("x", {-1, 2, 5, 4}).output("logits", 2);
  one.weights("w1", {1, 2, 3, 3}).weights("scale", {1}).weights("bias", {1}).weights("fc", {3, 1}).weights("fcb", {3});
  randomize(one, 63);
  test::set_ints(one.node("Conv", {"x", "w1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  one.node("InstanceNormalization", {"c1", "scale", "bias"}, {"n1"}, "instance_norm");
  one.node("Sigmoid", {"n1"}, {"r1"}, "sigmoid");
  logits_head(one, "r1");
  const std::string one_path = one.write("gradcheck_instance_norm_one_channel");
  check_gradients(one_path, 5, 2, labelled_data(5, 2 * 5 * 4, 3, 64));
  names.clear();
  auto one_trainer = model::make_trainer(one_path, o, default_target());
  for (const auto& p : one_trainer->parameters()) names.insert(p.name);
  CHECK(names == std::set<std::string>{"w1", "scale", "bias", "fc", "fcb"});
}

TEST_CASE("trainer gradients match finite differences: Gather of an activation", "[trainer][gradcheck]") {
  // Conv -> Gather (channels 2, 0, 2: one picked twice, one never) -> Sigmoid -> Gather
  // (rows [[3, 1], [0, 3]], 2-D indices) -> GlobalAveragePool -> Flatten -> Gemm
  test::OnnxModelBuilder b(13);
  b.input("x", {-1, 2, 5, 4}).output("logits", 2);
  b.weights("w1", {3, 2, 3, 3}).weights("fc", {3, 3}).weights("fcb", {3});
  randomize(b, 71);
  b.int64_initializer("channels", {2, 0, 2}).int64_initializer("rows", {3, 1, 0, 3});
  b.model().mutable_graph()->mutable_initializer()->rbegin()->clear_dims();
  b.model().mutable_graph()->mutable_initializer()->rbegin()->add_dims(2);
  b.model().mutable_graph()->mutable_initializer()->rbegin()->add_dims(2);
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"}, "conv1");
  test::set_ints(c1, "pads", {1, 1, 1, 1});
  test::set_int(b.node("Gather", {"c1", "channels"}, {"g1"}, "pick_channels"), "axis", 1);
  b.node("Sigmoid", {"g1"}, {"s1"}, "sigmoid");
  test::set_int(b.node("Gather", {"s1", "rows"}, {"g2"}, "pick_rows"), "axis", 2);
  b.node("Reshape", {"g2", "shape"}, {"r2"}, "to_4d");
  b.int64_initializer("shape", {0, 3, 4, 4});
  logits_head(b, "r2");
  check_gradients(b.write("gradcheck_gather"), 5, 2, labelled_data(5, 2 * 5 * 4, 3, 72));
}
