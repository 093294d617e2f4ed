// The convolutions of the trainer (runtime/train/trainer.h), behind one interface so that the
// same driver can run convgen's generated kernels or, for an honest comparison
// (`convgen train --conv-impl im2col-blis`), explicit im2col + BLIS SGEMM.
//
// Contract of every implementation: tensors as convgen's kernels take them -- x NHWC,
// w ONNX OIHW, bias [K] (or null without one), y / dy NHWK, dx NHWC, dw OIHW, db [K]; no
// aliasing; every output element written (never accumulated). When the layer fused a
// ReLU (descriptor.relu), y is the forward output and the backward passes use dY masked
// by y > 0. A kernel that reads packed weights says so (forward_panels,
// backward_data_panels) and takes them as w instead. Each call computes in a fixed order
// that does not depend on the thread that makes it or on how many threads exist; calls
// from several threads at once are safe.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/weight_panels.h"

namespace convgen::model {

class TrainConv {
 public:
  virtual ~TrainConv() = default;
  // The panels forward / backward_data read in place of w (schedules/weight_panels.h):
  // the caller packs the weights into them with pack_weight_panels after every change of
  // the weights and passes the packed buffer as w. Empty (the default): w is the ONNX
  // OIHW weights.
  virtual const WeightPanels& forward_panels() const { return no_panels(); }
  virtual const WeightPanels& backward_data_panels() const { return no_panels(); }
  virtual void forward(const float* x, const float* w, const float* bias, float* y) = 0;
  virtual void backward_data(const float* dy, const float* w, const float* y, float* dx) = 0;
  virtual void backward_weights(const float* x, const float* dy, const float* y, float* dw, float* db) = 0;
  // One line for --verbose: what runs this layer.
  virtual std::string describe() const = 0;

 protected:
  static const WeightPanels& no_panels() {
    static const WeightPanels none;
    return none;
  }
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
  // Forward and backward-data may read weights the caller packs once per change
  // (TrainConv::forward_panels): the layer runs per micro-batch, so per-call packing
  // would repeat the same copy for every micro-batch of a step.
  bool pack_weights_once = false;
  int threads = 1;
  std::string records;         // schedule records for the generated kernels
  TargetInfo target;
};

// Builds the convolutions of one layer at one size. The trainer calls it once per
// distinct (descriptor, needs backward-data), from the thread that calls prepare /
// train_step / evaluate, never from inside its parallel region.
using TrainConvFactory = std::function<std::unique_ptr<TrainConv>(const TrainConvRequest&)>;

}  // namespace convgen::model
