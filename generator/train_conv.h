// The convolutions of the trainer (model_trainer.h), behind one interface so that the
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

#include "conv_descriptor.h"
#include "conv_schedule.h"
#include "schedule_selection.h"

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

// The schedule of a generated training kernel for `pass` (fwd, bwd_data, bwd_weights):
// records or the analytic default, always the parallel variant chosen by the layer alone
// (Images with at least 8 images, else Pixels), so the bits never depend on the thread
// count. The in-process trainer's JIT kernels and `convgen compile --train`'s
// ahead-of-time kernels both use it, so they compute the same bits.
// `source` says where the schedule came from ("analytic default", "record ...").
SelectedSchedule training_schedule(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                   const std::string& records, std::vector<std::string>* why);

// convgen's generated kernels (JIT-compiled; schedules from records or the analytic default).
std::unique_ptr<TrainConv> make_generated_conv(const TrainConvRequest& r, std::vector<std::string>* why);

// The honest baseline (`--conv-impl im2col-blis`, train_conv_im2col.cpp): explicit im2col
// + BLIS SGEMM through convgen-bench's peers (bench/im2col_blis*.h; link convgen_im2col).
// The forward pass re-packs the OIHW weights on every call (part of its cost, as in a
// framework over BLIS); with a fused ReLU the backward passes first mask dY by y > 0 into
// a temporary. BLIS is single-threaded and the im2col / col2im / bias loops run on the
// calling thread (no OpenMP region), so layers run inside the trainer's batch-parallel
// region. r.intra_kernel is ignored: every call runs on one thread (describe() says so).
// Workspace: one buffer per calling thread, shared by all layers of the process and grown
// to the largest layer's need (im2col matrix + packed weights or masked dY), so peak
// memory is about T x the largest im2col. r.records and r.target are not used; `why`
// gets nothing.
std::unique_ptr<TrainConv> make_im2col_blis_conv(const TrainConvRequest& r, std::vector<std::string>* why);

}  // namespace convgen::model
