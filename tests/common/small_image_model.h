// A network whose last layers see images of 2x2 and 1x1 pixels, as torchvision
// classifiers do at 32x32: the trainer's whole-batch weight gradients and cropped taps
// (docs/training.md) on a model small enough to train in a test. Input 3x5x5 ->
// conv1 3x3/2 (16, bias) 3x3 -> relu -> conv2 3x3/2 (32) 2x2 -> relu -> conv3 3x3/2
// (32, bias) 1x1, taps 1..2 only -> relu -> conv4 3x3 pad 1 at 1x1 (32), centre tap
// only -> + relu3 -> relu -> global average pool -> flatten -> Gemm (5 classes).
#pragma once

#include <string>
#include <vector>

#include "tests/common/onnx_test_models.h"

namespace convgen::test {

inline void build_small_image_model(OnnxModelBuilder& b) {
  b.input("x", {-1, 3, 5, 5}).output("logits", 2);
  b.weights("w1", {16, 3, 3, 3}).weights("b1", {16}).weights("w2", {32, 16, 3, 3});
  b.weights("w3", {32, 32, 3, 3}).weights("b3", {32}).weights("w4", {32, 32, 3, 3});
  b.weights("fc_w", {5, 32}).weights("fc_b", {5});
  struct Layer {
    const char *name, *in, *w, *bias, *out, *relu, *relu_out;
  };
  for (const Layer& l : {Layer{"conv1", "x", "w1", "b1", "c1", "relu1", "r1"}, Layer{"conv2", "r1", "w2", "", "c2", "relu2", "r2"},
                         Layer{"conv3", "r2", "w3", "b3", "c3", "relu3", "r3"}}) {
    std::vector<std::string> inputs = {l.in, l.w};
    if (*l.bias) inputs.push_back(l.bias);
    auto& c = b.node("Conv", inputs, {l.out}, l.name);
    set_ints(c, "pads", {1, 1, 1, 1});
    set_ints(c, "strides", {2, 2});
    b.node("Relu", {l.out}, {l.relu_out}, l.relu);
  }
  auto& c4 = b.node("Conv", {"r3", "w4"}, {"c4"}, "conv4");
  set_ints(c4, "pads", {1, 1, 1, 1});
  b.node("Add", {"c4", "r3"}, {"sum"}, "skip");
  b.node("Relu", {"sum"}, {"r4"}, "relu4");
  b.node("GlobalAveragePool", {"r4"}, {"pooled"}, "gap");
  b.node("Flatten", {"pooled"}, {"flat"}, "flatten");
  auto& fc = b.node("Gemm", {"flat", "fc_w", "fc_b"}, {"logits"}, "fc");
  set_int(fc, "transB", 1);
}

}  // namespace convgen::test
