// build_forward: declares the kernel's buffers with every extent and stride pinned, states
// the algorithm, then applies the three schedule pieces.
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "generator/conv/algorithm.h"
#include "generator/conv/pipeline.h"
#include "generator/conv/schedule_pieces.h"

namespace convgen {

using namespace Halide;

// Skipping the kernel rows that land on top/bottom padding: a tighter bound on the
// kernel-row loop, per register tile (the predicate is on the tile's first and last
// pixels, so Halide folds it into the loop bounds; see define_forward). A per-pixel
// predicate branched per pixel inside the reduction: 5x5/3 on 37x41 0.70x oneDNN,
// per tile 1.09x. Still off for the fused kernel-row loop: per tile, LeNet conv1
// 0.93x vs 1.05-1.07x without, cifar10 conv1 level. Earlier figures (nominal GF/s): 4x4
// image 5x5 pad 2: 100 vs 70; 5x5 pad 2 on 16x16: 90 vs 68-83; 7x1 pad 3 on 17x17:
// 77-95 vs 60-84; 3x3 at 56x56: neutral. Not with the fused kernel-row loop of
// few-channel layers (5x5 RGB on 32x32: 26-65 vs 80-86), nor for depthwise, whose taps
// are unrolled (neutral to worse: 15-23 either way).
bool skips_padded_rows(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  return (d.pt > 0 || d.pb > 0) && s.strategy == Strategy::Gemm && !fuses_kernel_row_taps(d, s, t) &&
         !stages_tap_panel(s);
}

// LLVM's SLP vectoriser packs the micro-kernel's NR per-pixel tap addresses into one
// vector register and extracts them lane by lane, which costs an accumulator register
// and spills it inside the innermost loop: a 24x4 tile fell from 68-81 to 28-33 GF/s
// (5x5 stride-3 layer, Zen 3). Halide already vectorises explicitly, so SLP is turned
// off through Halide's HL_LLVM_ARGS hook, before LLVM is first initialised.
void disable_llvm_slp_vectorizer() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* existing = std::getenv("HL_LLVM_ARGS");
    std::string args = existing ? existing : "";
    if (args.find("slp-threshold") != std::string::npos) return;  // the user's choice wins
    args += std::string(args.empty() ? "" : " ") + "-slp-threshold=1000000";
    setenv("HL_LLVM_ARGS", args.c_str(), 1);
  });
}

Target halide_target(const std::string& target_string) {
  disable_llvm_slp_vectorizer();
  Target t(target_string);
  return t.with_feature(Target::NoAsserts).with_feature(Target::NoBoundsQuery);
}

std::vector<Argument> ForwardPipeline::arguments() const {
  if (residual.defined()) return {input, weights, bias, residual};
  return {input, weights, bias};
}

std::vector<std::vector<int>> forward_buffer_extents(const ConvDescriptor& d) {
  const int n = int(d.mb), g = int(d.g), cg = int(d.icg()), kg = int(d.ocg());
  return {{cg, g, int(d.iw), int(d.ih), n},
          {int(d.kw), int(d.kh), cg, kg, g},
          {int(d.oc)},
          {kg, g, int(d.oh() * d.ow()), n}};
}

Func define_scheduled_forward(const ConvDescriptor& d, const ConvSchedule& schedule, const TargetInfo& t, const Func& input,
                              const Func& weights, const Func& bias, const Func& residual, Why* why,
                              const ForwardBuildOptions& options, std::vector<ItemPrefetch>* prefetches) {
  validate(d);
  if (d.residual != residual.defined())
    throw std::logic_error("define_scheduled_forward: a residual input exactly when the descriptor says +residual");
  validate(schedule, t);
  validate_forward_strategy(schedule);
  ConvSchedule s = schedule;
  if (s.strategy == Strategy::Grouped && !grouped_strategy_applies(d, t)) {
    // oneDNN-style: say why the path was refused and take the general one.
    s.strategy = Strategy::Depthwise;
    explain(why, t.vector_floats % d.icg() != 0
                     ? fmt::format("grouped strategy refused: {} input channels per group do not divide the {}-float "
                                   "vector; using depthwise",
                                   d.icg(), t.vector_floats)
                     : fmt::format("grouped strategy refused: {} input channels in all do not fill a {}-float vector; "
                                   "using depthwise",
                                   d.ic, t.vector_floats));
  }
  int mr = s.mr;
  if (s.strategy == Strategy::Gemm) {
    mr = gemm_weight_block(d, s, t);  // the packed panels' block (schedules/weight_panels.h)
    if (mr != s.mr)
      explain(why, fmt::format("mr {} clamped to {}: only {} output channels per group", s.mr, mr, d.ocg()));
  }
  const char* what = s.strategy == Strategy::Gemm        ? "implicit GEMM, vectors along output channels of a group"
                     : s.strategy == Strategy::Depthwise ? "vectors along output channels across groups"
                                                         : "vectors along the input channels of adjacent groups";
  explain(why, fmt::format("strategy {}: {}", to_string(s.strategy), what));
  const bool skip_rows = skips_padded_rows(d, s, t);
  if (skip_rows) explain(why, "kernel rows that fall on top/bottom padding left out of each tile's reduction");
  const bool skip_columns = skips_padded_columns(d, s, t) && !options.output_is_staged;
  const bool partition_borders = partitions_padding_borders(d, s, t, options.output_is_staged);
  // Tiles inside rows of their own (skip_columns, partition_borders) are split per row by
  // the loop nest.
  const int aligned_tile = (skip_columns || partition_borders) ? 0 : row_aligned_tile(d, s);
  if (aligned_tile) explain(why, fmt::format("tiles of {} pixels never straddle the {}-pixel rows: one tap base per tile",
                                             aligned_tile, d.ow()));
  ConvAlgorithm a = define_forward(d, s.strategy, mr, skip_rows ? register_tile_pixels(d, s) : 0, aligned_tile,
                                   skip_columns, partition_borders, stages_flat_input_rows(d, s, t), input, weights, bias, residual,
                                   options);
  a.may_shift_pixel_tail = !options.output_is_staged;
  a.weights_transposed = options.weights_transposed;
  LoopNest nest = apply_loop_nest(a, d, s, t, why);
  apply_packing(a, nest, d, s, t, why);
  apply_microkernel(a, nest, d, s, t, why);
  if (prefetches) *prefetches = next_band_prefetch(a, nest, d, s, t, why);
  return a.output;
}

ForwardPipeline build_forward(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t, Why* why,
                              const ForwardBuildOptions& options) {
  ForwardPipeline fp;
  const WeightPanels panels = forward_weight_panels(d, s, t);
  ForwardBuildOptions built = options;
  if (!panels.empty()) built.weight_panel = panels.panels[0];
  fp.input = ImageParam(Float(32), 5, "input");
  fp.weights = ImageParam(Float(32), panels.empty() ? 5 : 1, "weights");
  fp.bias = ImageParam(Float(32), 1, "bias");
  if (d.residual) fp.residual = ImageParam(Float(32), 4, "residual");
  fp.output = define_scheduled_forward(d, s, t, fp.input, fp.weights, fp.bias,
                                       d.residual ? Func(fp.residual) : Func(), why, built, &fp.prefetches);
  const auto extents = forward_buffer_extents(d);
  if (d.residual) pin_dense([&](int i) { return fp.residual.dim(i); }, extents[3]);
  pin_dense([&](int i) { return fp.input.dim(i); }, extents[0]);
  pin_dense([&](int i) { return fp.weights.dim(i); },
            panels.empty() ? extents[1] : std::vector<int>{static_cast<int>(panels.floats)});
  pin_dense([&](int i) { return fp.bias.dim(i); }, extents[2]);
  pin_dense([&](int i) { return fp.output.output_buffer().dim(i); }, extents[3]);
  if (d.out_pixel_stride() != d.oc) {  // a channel slice: pixels out_stride floats apart
    const int pixel_stride = static_cast<int>(d.out_pixel_stride());
    fp.output.output_buffer().dim(2).set_stride(pixel_stride);
    fp.output.output_buffer().dim(3).set_stride(pixel_stride * static_cast<int>(d.oh() * d.ow()));
  }
  return fp;
}

}  // namespace convgen
