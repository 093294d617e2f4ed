// Writes driver_ops.onnx, a test model for the generated inference driver's operators
// that the bundled models do not reach (tests/model/test_model_driver.sh):
//   data [2, 1, 28, 28] -> Conv 8 3x3 -> channel Gather (a pass: Max reads it) ->
//   Max with the Conv's output -> Min with a per-channel bound -> Mean with the Conv's
//   output -> four Convs whose epilogues fuse an activation (1x1 + Clip(0, 6), 3x3 +
//   x * Sigmoid(x), 1x1 + HardSwish, 1x1 + LeakyRelu) -> two residual blocks whose Add
//   fuses into a Conv (Relu(skip + Conv 3x3), then Conv 1x1 + skip) -> a channel Concat
//   its two Convs write in place (1x1 + Relu, 3x3) -> Conv 4 1x1 ->
//   SoftmaxCrossEntropyLoss (constant labels, some ignored, class weights, no reduction)
//   -> loss [2, 28, 28].
//   usage: write_driver_ops_model OUT.onnx
#include <cstdio>
#include <fstream>

#include "tests/common/onnx_test_models.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_driver_ops_model OUT.onnx\n");
    return 2;
  }
  using convgen::test::OnnxModelBuilder;
  OnnxModelBuilder b(14);  // HardSwish
  b.input("data", {2, 1, 28, 28}).output("loss", 3);
  b.weights("w1", {8, 1, 3, 3}).weights("w2", {4, 8, 1, 1});
  b.weights("w_clip", {8, 8, 1, 1}).weights("w_silu", {8, 8, 3, 3}).weights("w_hardswish", {8, 8, 1, 1});
  b.weights("w_leaky", {8, 8, 1, 1}).weights("w_res", {8, 8, 3, 3}).weights("w_res2", {8, 8, 1, 1});
  b.weights("w_e1", {3, 8, 1, 1}).weights("w_e3", {5, 8, 3, 3});
  b.float_initializer("zero", {}, {0.0f}).float_initializer("six", {}, {6.0f});
  b.float_initializer("bound", {8, 1, 1}, {0.5f, 0.25f, 1.0f, -0.25f, 0.75f, 0.1f, 2.0f, 0.0f});
  b.float_initializer("class_weights", {4}, {1.0f, 0.5f, 2.0f, 0.25f});
  b.int64_initializer("order", {3, 1, 7, 0, 2, 6, 4, 5});
  std::vector<int64_t> labels(2 * 28 * 28);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + i / 28) % 5);  // 4: ignored
  b.int64_initializer("labels", labels);
  auto* initializers = b.model().mutable_graph()->mutable_initializer();
  onnx::TensorProto* l = initializers->Mutable(initializers->size() - 1);
  l->clear_dims();
  for (int64_t d : {2, 28, 28}) l->add_dims(d);
  convgen::test::set_ints(b.node("Conv", {"data", "w1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  convgen::test::set_int(b.node("Gather", {"c1", "order"}, {"permuted"}, "permute"), "axis", 1);
  b.node("Max", {"permuted", "c1"}, {"larger"}, "max");
  b.node("Min", {"larger", "bound"}, {"bounded"}, "min");
  b.node("Mean", {"bounded", "c1"}, {"mean"}, "mean");
  b.node("Conv", {"mean", "w_clip"}, {"c_clip"}, "conv_clip");
  b.node("Clip", {"c_clip", "zero", "six"}, {"clipped"}, "clip");
  convgen::test::set_ints(b.node("Conv", {"clipped", "w_silu"}, {"c_silu"}, "conv_silu"), "pads", {1, 1, 1, 1});
  b.node("Sigmoid", {"c_silu"}, {"gate"}, "sigmoid");
  b.node("Mul", {"c_silu", "gate"}, {"silu"}, "silu");
  b.node("Conv", {"silu", "w_hardswish"}, {"c_hardswish"}, "conv_hardswish");
  b.node("HardSwish", {"c_hardswish"}, {"hardswish"}, "hardswish");
  b.node("Conv", {"hardswish", "w_leaky"}, {"c_leaky"}, "conv_leaky");
  convgen::test::set_float(b.node("LeakyRelu", {"c_leaky"}, {"leaky"}, "leaky_relu"), "alpha", 0.1f);
  convgen::test::set_ints(b.node("Conv", {"leaky", "w_res"}, {"c_res"}, "conv_res"), "pads", {1, 1, 1, 1});
  b.node("Add", {"leaky", "c_res"}, {"sum"}, "add");
  b.node("Relu", {"sum"}, {"block"}, "relu");
  b.node("Conv", {"block", "w_res2"}, {"c_res2"}, "conv_res2");
  b.node("Add", {"c_res2", "block"}, {"block2"}, "add2");
  b.node("Conv", {"block2", "w_e1"}, {"c_e1"}, "conv_e1");
  b.node("Relu", {"c_e1"}, {"e1"}, "relu_e1");
  convgen::test::set_ints(b.node("Conv", {"block2", "w_e3"}, {"e3"}, "conv_e3"), "pads", {1, 1, 1, 1});
  convgen::test::set_int(b.node("Concat", {"e1", "e3"}, {"expanded"}, "concat"), "axis", 1);
  b.node("Conv", {"expanded", "w2"}, {"scores"}, "conv2");
  auto& sce = b.node("SoftmaxCrossEntropyLoss", {"scores", "labels", "class_weights"}, {"loss"}, "loss");
  convgen::test::set_string(sce, "reduction", "none");
  convgen::test::set_int(sce, "ignore_index", 4);
  std::ofstream out(argv[1], std::ios::binary);
  out << b.bytes();
  return out.good() ? 0 : 1;
}
