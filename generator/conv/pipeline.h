// The forward convolution as a Halide pipeline: algorithm (generator/conv/algorithm.cpp) plus a
// schedule applied from ConvSchedule data by three separate pieces with written
// contracts -- packing (generator/conv/packing.cpp), the register micro-kernel
// (generator/conv/microkernel.cpp) and the loop nest around it (generator/conv/loop_nest.cpp).
//
// Buffer views (all dense, innermost dimension first, every extent a constant):
//   input   5-D (cg, g, x, y, n)   = NHWC activations, C split into groups
//   weights 5-D (s, r, cg, kg, g)  = ONNX OIHW weights [K][C/g][R][S], K split into groups
//   bias    1-D (k)                 (read only when the descriptor has bias)
//   residual 4-D (kg, g, pix, n)    = the output's view, added before the activation
//                                     (an argument only when the descriptor has +residual)
//   output  4-D (kg, g, pix, n)    = NHWK activations, K split into groups, pix = p*Q + q
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <Halide.h>

#include "generator/conv/item_prefetch.h"

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/kernel_plan.h"
#include "schedules/weight_panels.h"

namespace convgen {

struct ForwardBuildOptions {
  // Test-only: shift the padding by one row so the kernel is wrong. The correctness
  // sweep runs once against this and must fail.
  bool inject_padding_bug = false;
  // The output is computed inside a consumer's loop (backward-data's residue classes)
  // rather than being the pipeline's output: its last pixel tile (and GEMM channel tile)
  // is rounded up into the staging buffer. Guarded or shifted tails there went wrong
  // under Halide 14 together with a ragged channel tile (found by the backward sweep).
  bool output_is_staged = false;
  // The weights Func reads contiguous memory along output channels (backward-data's
  // channel-transposed weights), so packing walks MR output channels innermost.
  bool weights_transposed = false;
  // Set by build_forward / build_backward_data for pack_weights=prepacked GEMM kernels:
  // the panel (schedules/weight_panels.h) define_scheduled_forward's `weights`, then a
  // 1-D Func over the caller's packed buffer, holds.
  std::optional<WeightPanel> weight_panel;
};

struct ForwardPipeline {
  Halide::ImageParam input;
  Halide::ImageParam weights;
  Halide::ImageParam bias;
  Halide::ImageParam residual;  // defined only for +residual
  Halide::Func output;
  // The next row band's input prefetches (generator/conv/item_prefetch.h): the kernel's
  // pipeline must carry them (kernel_pipeline.h).
  std::vector<ItemPrefetch> prefetches;
  // Arguments in kernel-signature order: input, weights, bias, [residual]; output is the result.
  std::vector<Halide::Argument> arguments() const;
};

// Defines and schedules the forward kernel over caller-provided buffers (ImageParams or a
// Generator's Inputs) and returns the output Func. The caller pins the buffers' bounds
// with pin_dense. `residual` is defined exactly when the descriptor has +residual.
// `prefetches`, when given, receives the kernel's prefetch plans; they name the input
// buffer "input", so only a caller whose input argument has that name asks for them.
Halide::Func define_scheduled_forward(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                      const Halide::Func& input, const Halide::Func& weights,
                                      const Halide::Func& bias, const Halide::Func& residual,
                                      std::vector<std::string>* why, const ForwardBuildOptions& options,
                                      std::vector<ItemPrefetch>* prefetches = nullptr);

// Constant extents and dense strides of the four buffers, in the order input, weights,
// bias, output (a residual has the output's); each a list of extents, innermost first.
std::vector<std::vector<int>> forward_buffer_extents(const ConvDescriptor& d);

// Pins a buffer's dims to constant dense extents: `dim(i)` returns its i-th Dimension.
template <typename DimOf>
void pin_dense(DimOf dim, const std::vector<int>& extents) {
  int stride = 1;
  for (size_t i = 0; i < extents.size(); ++i) {
    dim(static_cast<int>(i)).set_bounds(0, extents[i]).set_stride(stride);
    stride *= extents[i];
  }
}

// Builds and schedules the forward kernel. `why` receives one line per schedule
// decision (what was chosen, what was refused and why) for --verbose.
ForwardPipeline build_forward(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                              std::vector<std::string>* why = nullptr,
                              const ForwardBuildOptions& options = {});

// True when the kernel leaves out the kernel rows that fall on top/bottom padding
// (exact: those taps add zeros). Exposed for tests and --verbose.
bool skips_padded_rows(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// skips_padded_columns (the kernel-column counterpart) is in kernel_plan.h.

// Halide target for a target string, with the features every convgen kernel uses
// (no_asserts and no_bounds_query: the runtime validates shapes before calling).
// Also configures LLVM for convgen kernels once per process (see generator/conv/target.cpp);
// call it before the first compilation.
Halide::Target halide_target(const std::string& target_string);

// The LLVM configuration halide_target applies; the Generator calls it directly.
void disable_llvm_slp_vectorizer();

}  // namespace convgen
