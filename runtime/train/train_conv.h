// The convolutions of the trainer (runtime/train/trainer.h), behind one interface so that the
// same driver can run convgen's generated kernels or, for an honest comparison
// (`convgen train --conv-impl im2col-blis`), explicit im2col + BLIS SGEMM.
//
// Contract of every implementation: tensors as convgen's kernels take them -- x NHWC,
// w ONNX OIHW, bias [K] (or null without one), y / dy NHWK, dx NHWC, dw OIHW, db [K]; no
// aliasing; every output element written (never accumulated). When the layer fused a
// ReLU (descriptor.relu), y is the forward output and the backward passes use dY masked
// by y > 0. Each call computes in a fixed order that does not depend on the thread that
// makes it or on how many threads exist; calls from several threads at once are safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen::model {

class TrainConv {
 public:
  virtual ~TrainConv() = default;
  virtual void forward(const float* x, const float* w, const float* bias, float* y) = 0;
  virtual void backward_data(const float* dy, const float* w, const float* y, float* dx) = 0;
  virtual void backward_weights(const float* x, const float* dy, const float* y, float* dw, float* db) = 0;
  // One line for --verbose: what runs this layer.
  virtual std::string describe() const = 0;
};

struct TrainConvRequest {
  ConvDescriptor descriptor;   // the layer at one micro-batch size
  bool needs_backward_data = true;
  // False when only backward_weights will be called (a whole-batch layer's kernel over
  // the mini-batch): no forward kernel is built.
  bool needs_forward = true;
  // The caller runs the kernels on all threads (intra-kernel parallelism) rather than one
  // per micro-batch. The generated kernels are the same either way (their parallel
  // variant, whose loop runs on the calling thread inside a parallel region).
  bool intra_kernel = false;
  int threads = 1;
  std::string records;         // schedule records for the generated kernels
  TargetInfo target;
};

// Builds the convolutions of one layer at one size. The trainer calls it once per
// distinct (descriptor, needs backward-data), from the thread that calls prepare /
// train_step / evaluate, never from inside its parallel region.
using TrainConvFactory = std::function<std::unique_ptr<TrainConv>(const TrainConvRequest&)>;

}  // namespace convgen::model
