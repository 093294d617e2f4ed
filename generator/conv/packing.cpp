// Packing: where the two GEMM operands are staged.
// - weights_packed is computed once per call: for GEMM a [kb][r][s][c][MR] panel per
//   block of MR output channels, so the micro-kernel reads MR contiguous floats per
//   reduction step; all blocks up front, or one MC block at a time when channel blocks
//   are the outermost loop.
// - in_padded is the fused im2col: the micro-kernel gathers its taps straight from it,
//   so no im2col matrix exists. Where it is staged decides who fills the zero padding:
//     none   not staged; every tap load carries the in-bounds select (cheap when there
//            is no padding, costly when there is)
//     image  one zero-padded NHWC slab per image, packed before its pixel blocks
//     rows   the padded row band one pixel block needs, packed per block
//     panel  (GEMM) the im2col panel of one pixel tile, (c, s, r) contiguous per pixel,
//            packed once per pixel tile and reused by every channel tile: BLIS's B
//            micro-panel with the im2col fused in; NR x C/g x R x S floats
// Row bands small enough for L1 also prefetch the next band's input while a band
// computes (next_band_prefetch, below).
#include <algorithm>

#include <fmt/format.h>

#include "generator/conv/schedule_pieces.h"

namespace convgen {

using namespace Halide;

void apply_packing(ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d, const ConvSchedule& s,
                   const TargetInfo& t, Why* why) {
  const int vl = t.vector_floats;
  const bool gemm = a.strategy == Strategy::Gemm;
  const bool grouped = a.strategy == Strategy::Grouped;

  // Weights are packed once per call either way: all at once, or one channel block at a
  // time when channel blocks are the outermost loop (BLIS packs A per MC block), which
  // bounds the packed panel to MC x C/g x R x S.
  if (a.weights_prepacked) {
    explain(why, "weights read from the panel the caller packed once (schedules/weight_panels.h): no packing per call");
  } else if (!nest.k_blocks_outermost) {
    a.weights_packed.compute_root();
    if (gemm && s.parallel != Parallel::None) a.weights_packed.parallel(a.kb);
  } else {
    a.weights_packed.compute_at(nest.k_block_level);
    explain(why, "weights packed per channel block (channel blocks outermost)");
  }
  if (a.weights_prepacked) {
    // nothing to schedule: weights_packed is inlined into the micro-kernel's loads
  } else if (gemm) {
    // The copy is a transpose: ONNX keeps a channel's taps contiguous, the panel keeps
    // MR channels contiguous. For 1x1 kernels read along input channels (contiguous) and
    // scatter; otherwise write MR channels per tap with the channel loop unrolled.
    // Measured as fixed per-call cost at minibatch 1: 1x1 2048->512 37 -> 45 GF/s, 3x3
    // 512->512 48 -> 55 GF/s against an MR-wide gather.
    // Backward-data's transposed 1x1 weights are contiguous along the panel's channels
    // already: copied a vector at a time (the zero fill past C/g is `likely`-guarded, so
    // Halide peels the last tile off and the rest copies without selects). Element by
    // element it cost a third of ResNet's res5_proj backward-data on Zen 5 AVX-512 (130
    // vs 200 GF/s, 0.57 vs 0.86x oneDNN).
    if (d.kh * d.kw == 1 && !a.weights_transposed) {
      a.weights_packed.reorder(a.c, a.kk, a.kb, a.g);
    } else if (d.kh * d.kw == 1) {
      a.weights_packed.reorder(a.kk, a.c, a.kb, a.g).vectorize(a.kk, std::min(vl, a.mr), TailStrategy::RoundUp);
    } else {
      a.weights_packed.reorder(a.kk, a.s, a.r, a.c, a.kb, a.g).unroll(a.kk);
    }
  } else if (grouped) {
    if (d.ic >= vl) a.weights_packed.vectorize(a.ci, vl, TailStrategy::ShiftInwards);
  } else if (d.oc >= vl) {
    a.weights_packed.vectorize(a.k, vl, TailStrategy::ShiftInwards);
  }

  const bool padded = d.pt || d.pb || d.pl || d.pr;
  PackInput pack = s.pack_input;
  if (pack == PackInput::Panel && !gemm) {
    pack = PackInput::Image;
    explain(why, fmt::format("panel packing refused: {} vectors run across groups, not along a pixel's taps; packing "
                             "per image",
                             to_string(a.strategy)));
  }
  if (pack == PackInput::Panel) {
    const bool whole_reduction = reduction_block(d, s) == 0;
    a.tap_panel.compute_at(whole_reduction ? nest.pix_tile_level : nest.block_level);
    if (d.icg() >= vl) a.tap_panel.vectorize(a.c, vl, TailStrategy::ShiftInwards);
    explain(why, whole_reduction ? "im2col panel packed per pixel tile (taps contiguous, zeros for padding), reused by "
                                   "every channel tile"
                                 : "im2col panel packed per cache block (kc splits the reduction)");
    return;
  }
  Func staged_input = a.stages_flat_rows ? a.in_rows : a.in_padded;  // in_padded is a view of in_rows then
  switch (pack) {
    case PackInput::None:
      explain(why, padded ? "input not packed: every tap load checks the padding (refused the packer's zero fill)"
                          : "input not packed: no padding, taps read the input directly");
      return;
    case PackInput::Image:
      staged_input.compute_at(nest.image_level);
      explain(why, "input packed per image into a zero-padded slab");
      break;
    case PackInput::Rows:
      staged_input.compute_at(nest.rows_level);
      explain(why, nest.has_pix_block ? "input packed per pixel block as a zero-padded row band"
                                      : "input packed per image (rows asked, but one pixel block covers the image)");
      break;
    case PackInput::Panel:
      break;  // handled above
  }
  // Vectorise the copy along channels when a group's fill a vector, else across groups
  // (a pixel's channels are adjacent in memory whatever the grouping); first layers'
  // flat rows along the row's floats. GEMM stages one group at a time: fused across
  // groups its vector would shift back over the groups before it, and before the input
  // itself for the first (7 floats, found with faulting pages around the sweeps' inputs),
  // so there the copy stays scalar (C/g < vector: not a schedule that wins anyway).
  if (a.stages_flat_rows) {
    a.in_rows.update().vectorize(a.rows_rd.x, vl, TailStrategy::GuardWithIf);
    // The padding columns' zeros: a few floats per row, left as Halide's plain loops.
    for (size_t u = 1; u < a.in_rows.function().updates().size(); ++u) a.in_rows.update(int(u)).unscheduled();
    explain(why, "padded rows staged (column, channel) flat: the real columns copied densely, zeros in the padding "
                 "columns");
  } else if (d.icg() >= vl) {
    a.in_padded.vectorize(a.c, vl, TailStrategy::ShiftInwards);
  } else if (d.ic >= vl && !gemm) {
    Var cgf("cgf");
    a.in_padded.fuse(a.c, a.g, cgf).vectorize(cgf, vl, TailStrategy::ShiftInwards);
  }
}

namespace {

// The loop Halide lowers for `var` of `f`'s stage `stage`: "<func>.s<stage>.<dim>", the
// dim's full name after splits and renames ("pix.opix.pix_tile.pix_block"); empty when
// the stage has no such serial or parallel loop.
std::string loop_of(const Halide::Func& f, int stage, const std::string& var) {
  const auto& def = stage == 0 ? f.function().definition() : f.function().update(stage - 1);
  for (const auto& dim : def.schedule().dims()) {
    const bool named = dim.var == var || (dim.var.size() > var.size() &&
                                          dim.var.compare(dim.var.size() - var.size() - 1, std::string::npos,
                                                          "." + var) == 0);
    using Halide::Internal::ForType;
    if (named && (dim.for_type == ForType::Serial || dim.for_type == ForType::Parallel))
      return fmt::format("{}.s{}.{}", f.name(), stage, dim.var);
  }
  return "";
}

// The outermost loop of the accumulator's reduction: one run per register tile (the
// pure loops around it have one iteration where the tile computes it).
std::string outer_reduction_loop(const Halide::Func& accum) {
  const auto& dims = accum.function().update(0).schedule().dims();
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    if (!it->is_rvar()) continue;
    if (it->for_type != Halide::Internal::ForType::Serial) return "";
    return fmt::format("{}.s1.{}", accum.name(), it->var);
  }
  return "";
}

}  // namespace

// A row band is staged by one copy before the band's first FMA. Rows that come from
// memory make that copy wait on it with the FMA units idle; the hardware prefetcher
// follows the copy's stream, not the next band's, since the copies are bursts a band's
// compute apart (RGB stem 3x3/2 at 224x224, mb 8, Intel Xeon model 207: the copy was
// 16% of the kernel's time). So the next band's rows are asked for during this one, a
// few lines per register tile: 3->32 0.83 -> 0.88-0.89x oneDNN, 3->64 0.90 -> 0.92x
// (each against oneDNN in the same run, two runs).
// Only for bands of an image's rows that fit in L1, as the staging is meant to: a
// block of a whole image prefetched the next image (13 MB for VGG conv1_2) into L2
// over the rows it was reading (conv2_2: 0.93-0.98 -> 0.90-0.92x oneDNN). GEMM only,
// whole reduction per tile, pixel blocks outermost of one group.
std::vector<ItemPrefetch> next_band_prefetch(const ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d,
                                             const ConvSchedule& s, const TargetInfo& t, Why* why) {
  if (a.strategy != Strategy::Gemm || s.pack_input != PackInput::Rows || !nest.has_pix_block || d.g != 1 ||
      nest.k_blocks_outermost || reduction_block(d, s) != 0 || nest.block_tiles >= nest.pix_loop_extent)
    return {};
  const int Q = int(d.ow()), ih = int(d.ih), iw = int(d.iw), ic = int(d.ic);
  // Output rows a block covers: whole rows when the tiles are rows, else the rows its
  // pixels touch (one more where a block starts inside a row).
  const int block_pixels = nest.block_tiles * nest.nr;
  const int block_rows = nest.tiles_in_rows ? nest.block_tiles
                                           : (block_pixels + Q - 1) / Q + (block_pixels % Q != 0 ? 1 : 0);
  const int rows = int(std::min<int64_t>(ih, d.band_input_rows(block_rows)));
  if (int64_t(rows) * iw * ic * 4 > t.l1_bytes) return {};
  const std::string block_loop = loop_of(a.output, 0, nest.pix_block.name());
  const std::string inner_loop = outer_reduction_loop(a.accum);
  if (block_loop.empty() || inner_loop.empty()) return {};
  Expr next = item_loop_var(block_loop) + 1;
  Expr first_row = nest.tiles_in_rows ? next * nest.block_tiles : next * block_pixels / Q;
  const std::string image_loop = loop_of(a.output, 0, a.n.name());
  Expr image = d.mb > 1 && !image_loop.empty() ? item_loop_var(image_loop) : Expr(0);
  // Past the last block the rows run on into the next image's first ones.
  Expr in_row = max(first_row * int(d.sh) - int(d.pt), 0);
  ItemPrefetch plan;
  plan.item_loop = block_loop;
  plan.inner_loop = inner_loop;
  plan.ranges = {clamped_range("input", (image * ih + in_row) * (iw * ic), int64_t(rows) * iw * ic,
                               int64_t(d.mb) * ih * iw * ic)};
  const int tiles_per_block = nest.tiles_in_rows ? nest.block_tiles * ((Q + nest.nr - 1) / nest.nr) : nest.block_tiles;
  spread_over_visits(plan, int64_t(tiles_per_block) * nest.k_tiles);
  explain(why, fmt::format("the next row band's input prefetched while a band computes, {} cache lines per tile",
                           plan.lines_per_visit));
  return {plan};
}

}  // namespace convgen
