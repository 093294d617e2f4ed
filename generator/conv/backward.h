// The backward convolutions as Halide pipelines (docs/backward.md).
//
// Buffer views (dense, innermost dimension first, every extent a constant):
//   x        5-D (cg, g, x, y, n)    NHWC input, as the forward's input
//   dy, y    4-D (kg, g, pix, n)     NHWK output gradient / forward output (ReLU mask)
//   weights  5-D (s, r, cg, kg, g)   ONNX OIHW weights, as the forward's
//   dx       4-D (cg, g, pix, n)     NHWC input gradient, pix = y*W + x
//   dw       5-D (s, r, cg, kg, g)   ONNX OIHW weight gradient
//   db       1-D (k)                 bias gradient (only when the layer has a bias)
// When the forward fused a ReLU, dy is masked by y > 0 where the kernels pack dy; y is
// not read otherwise.
#pragma once

#include <string>
#include <vector>

#include <Halide.h>

#include "generator/conv/item_prefetch.h"
#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

// Backward-data: one forward convolution per residue class of the strides
// (schedules/backward_data_classes.h), each over dY with the weights channel-transposed per group
// and flipped, that transposition fused into the forward's weight packing. Stride 1 is
// one class written straight into dX; otherwise every class is computed per image and
// stored into its pixels of dX. No atomics, no col2im buffer.
struct BackwardDataPipeline {
  Halide::ImageParam dy, weights, y;
  Halide::Func dx;
  std::vector<Halide::Argument> arguments() const { return {dy, weights, y}; }
};
BackwardDataPipeline build_backward_data(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                         std::vector<std::string>* why = nullptr,
                                         const ForwardBuildOptions& options = {});

// Strided depthwise backward-data computed pixel by pixel where dX lies, each pixel's
// residue taps read from dY in place (computes_depthwise_dx_in_place, kernel_plan.h;
// generator/conv/backward_data_depthwise.cpp). dy_masked is dY (ReLU-masked) in the
// forward input's 5-D view; the result is dX in its 4-D view.
Halide::Func define_depthwise_backward_data_in_place(const ConvDescriptor& d, const ConvSchedule& s,
                                                     const TargetInfo& t, const Halide::Func& dy_masked,
                                                     const Halide::ImageParam& weights, std::vector<std::string>* why);

// Backward-weights: dW = dY^T * im2col(X) per group as a GEMM whose reduction runs over
// images x output pixels in row bands, with the im2col gather fused into the tile loads
// of a zero-padded input slab; db = sum of dY in the same pipeline. The reduction order
// is fixed by the schedule (row bands, then images, then `partitions` partial sums added
// in index order), never by the thread count.
struct BackwardWeightsPipeline {
  Halide::ImageParam x, dy, y;
  Halide::Func dw;
  Halide::Func db;  // defined only when the layer has a bias
  // The next reduction item's input, prefetched while an item computes (kernel_pipeline
  // takes them).
  std::vector<ItemPrefetch> prefetches;
  std::vector<Halide::Argument> arguments() const { return {x, dy, y}; }
  std::vector<Halide::Func> outputs() const;
};
// Backward-weights of an unpadded 1x1 layer with vectors along the input channels
// (Strategy::GemmInputLanes; input_lane_weights_apply, kernel_plan.h): dW in the 5-D
// view above, computed straight in ONNX order from x and dy_masked (dY, ReLU-masked, in
// its 4-D view). Adds its next-item prefetch, if any, to `prefetches`.
// generator/conv/backward_weights_input_lanes.cpp.
Halide::Func define_input_lane_weights(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                       const Halide::ImageParam& x, const Halide::Func& dy_masked,
                                       std::vector<std::string>* why,
                                       std::vector<ItemPrefetch>* prefetches);

BackwardWeightsPipeline build_backward_weights(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                               std::vector<std::string>* why = nullptr,
                                               const ForwardBuildOptions& options = {});

}  // namespace convgen
