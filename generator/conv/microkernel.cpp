// The micro-kernel: an MR x NR accumulator tile held in vector registers. Per reduction
// step it loads MR/vl weight vectors from the packed panel, broadcasts NR input taps and
// issues MR/vl * NR FMAs. The reduction runs input channel innermost (contiguous in
// NHWC and in the packed weights), then kernel column, then row.
//
// Whole reduction in one go (kc = 0 or kc >= C/g): accum lives at the register tile
// and the epilogue is applied straight from registers.
// KC-blocked: accum lives at the cache block; the KC loop runs outside the tiles so a
// KC slice of the weight panel and of the input taps stays in cache across tiles.
#include <algorithm>

#include <fmt/format.h>

#include "generator/conv/schedule_pieces.h"

namespace convgen {

using namespace Halide;

namespace {

// Grouped: accum(ci, kg, pix) holds, per lane, one input channel's sum over the taps for
// each of the tile's kg_per_tile output channels. Per tap: kg_per_tile weight vectors and
// NR dense input vectors (no broadcasts), kg_per_tile x NR FMAs; the lanes of each group
// are summed once per tile by the output.
void apply_grouped_microkernel(ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d,
                               const ConvSchedule& s, const TargetInfo& t, Why* why) {
  const int vl = t.vector_floats;
  RVar rs = a.rd.x, rr = a.rd.y;
  Var vo("vo"), vi("vi");
  Func acc = a.accum;
  Stage update = acc.update();
  acc.compute_at(nest.tile_level);
  acc.split(a.ci, vo, vi, vl, TailStrategy::GuardWithIf).vectorize(vi).unroll(vo).unroll(a.kg).unroll(a.pix);
  update.split(a.ci, vo, vi, vl, TailStrategy::GuardWithIf);
  update.reorder(vi, vo, a.pix, a.kg, rs, rr).vectorize(vi).unroll(vo).unroll(a.kg).unroll(a.pix);
  // Unrolled taps let neighbouring pixels share input loads; bounded like depthwise's
  // (49 taps x 16 accumulators) to keep code size and compile time in check.
  if (d.kh * d.kw * grouped_outputs_per_tile(d, s, t) * nest.nr <= 49 * 16) {
    update.unroll(rs).unroll(rr);
    explain(why, fmt::format("all {} taps unrolled", d.kh * d.kw));
  }
  explain(why, fmt::format("micro-kernel: {} output channel(s) x {} pixels of accumulator vectors, lanes summed per "
                           "group of {} after the taps",
                           nest.mr, nest.nr, d.icg()));
}

}  // namespace

void apply_microkernel(ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d, const ConvSchedule& s,
                       const TargetInfo& t, Why* why) {
  const bool gemm = a.strategy == Strategy::Gemm;
  if (!gemm && s.kc > 0 && s.kc < d.icg()) {
    explain(why, fmt::format("kc={} refused: {} reductions are not blocked; whole reduction per tile", s.kc,
                             to_string(a.strategy)));
  }
  if (a.strategy == Strategy::Grouped) {
    apply_grouped_microkernel(a, nest, d, s, t, why);
    return;
  }
  const int vl = std::min(t.vector_floats, nest.mr);
  const int cg = static_cast<int>(d.icg());
  const int kc = reduction_block(d, s);
  RVar rc = a.rd.x, rs = a.rd.y, rr = a.rd.z;
  Var chan = gemm ? a.kk : a.k;
  Var vo("vo"), vi("vi"), po("po"), pi("pi");
  RVar rco("rco"), rci("rci");
  Func acc = a.accum;
  Stage update = acc.update();

  if (kc == 0) {
    acc.compute_at(nest.tile_level);
    acc.split(chan, vo, vi, vl, TailStrategy::GuardWithIf).vectorize(vi).unroll(vo).unroll(a.pix);
    update.split(chan, vo, vi, vl, TailStrategy::GuardWithIf);
    // FMAs grouped by weight vector when the tile has fewer pixels than vectors: one
    // weight vector and NR broadcasts live beside the accumulators instead of MR/vl
    // weight vectors and one broadcast (32x3 on 16 registers: 12 + 3 + 1, not 12 + 4 + 1,
    // which spilled: 35 vs 81-86 GF/s on Zen 3).
    const bool pixels_inner = nest.nr < (nest.mr + vl - 1) / vl;
    const Var tile_inner = pixels_inner ? a.pix : vo, tile_outer = pixels_inner ? vo : a.pix;
    update.reorder(vi, tile_inner, tile_outer, rc, rs, rr).vectorize(vi).unroll(vo).unroll(a.pix);
    if (!gemm && cg * d.kh * d.kw <= 49) {
      // Channel vectors across groups have a tiny reduction (the kernel taps): unrolled,
      // each tap's weight vector serves all NR pixels with no loop overhead.
      update.unroll(rc).unroll(rs).unroll(rr);
      explain(why, fmt::format("all {} taps unrolled", cg * d.kh * d.kw));
    } else if (gemm && a.partitions_borders) {
      // Read in place with the borders partitioned: the taps unrolled, so each padding test
      // depends on the tile loops alone; the channels stay a loop when there are many.
      update.unroll(rs).unroll(rr);
      if (cg * d.kh * d.kw <= 49) update.unroll(rc);
      explain(why, fmt::format("kernel taps unrolled ({}) for the partitioned borders", d.kh * d.kw));
    } else if (a.skips_padded_columns) {
      // Constant kernel columns (with the row's unrolled tiles) make each pixel's
      // padding test a constant: the FMAs of taps on padding disappear.
      // Tiles of at most 8 accumulators barely cover the FMA latency (4 cycles x 2
      // pipes), so a border tap that keeps only some of them busy (2 of 4 pixels on the
      // first column of a 5x5 pad 2 row) takes as long as a whole tap and nothing is
      // saved: their columns run inside the channel loop, interleaving the surviving
      // FMAs of all taps (cifar10 conv3 backward-data, 16x4: 0.85-0.90x -> 0.97-0.98x
      // oneDNN). Wider tiles keep columns outside: interleaved, 24x4 and 16x6 spilled
      // (cifar10 conv3 forward 0.96 -> 0.61x, conv2 0.97 -> 0.70x). With the pixels
      // innermost (32x3) they interleave without spilling (Zen 5 AVX2, cifar10 conv3
      // backward-data 0.96 -> 1.00x, forward 0.98 -> 1.02x).
      const int accumulators = (nest.mr + vl - 1) / vl * nest.nr;
      if (accumulators <= 8 || pixels_inner) update.reorder(vi, tile_inner, tile_outer, rs, rc, rr);
      update.unroll(rs);
      explain(why, fmt::format("kernel columns unrolled ({}): FMAs of taps on left/right padding pruned", d.kw));
    } else if (stages_tap_panel(s)) {
      // The panel holds a tile's taps contiguously: the whole reduction is one loop.
      RVar rcs("rcs"), rk("rk");
      update.fuse(rc, rs, rcs).fuse(rcs, rr, rk);
      explain(why, fmt::format("whole reduction of {} taps walked as one loop over the panel", cg * d.kh * d.kw));
    } else if (fuses_kernel_row_taps(d, s, t)) {
      // Few input channels: with dilation 1 a kernel row's taps (s, c) are one contiguous
      // run in NHWC and in the packed weights, so one loop of kw*C/g steps replaces a
      // short inner loop of C/g steps.
      RVar rcs("rcs");
      update.fuse(rc, rs, rcs);
      explain(why, fmt::format("kernel-row taps fused into one reduction loop of {} steps", cg * d.kw));
    }
    explain(why, fmt::format("micro-kernel {}x{}: whole reduction of {} taps x {} channels per tile, in registers",
                             nest.mr, nest.nr, d.kh * d.kw, cg));
    return;
  }

  acc.compute_at(nest.block_level);
  acc.split(chan, vo, vi, vl, TailStrategy::GuardWithIf).vectorize(vi).unroll(vo);
  update.split(rc, rco, rci, kc);
  update.split(a.pix, po, pi, nest.nr, TailStrategy::GuardWithIf);
  // kb is already the MR block: tiles are (pix tile, kb).
  update.split(chan, vo, vi, vl, TailStrategy::GuardWithIf);
  update.reorder(vi, vo, pi, rci, rs, rr, a.kb, po, rco);
  update.vectorize(vi).unroll(vo).unroll(pi);
  explain(why, fmt::format("micro-kernel {}x{} with the reduction blocked by kc={} of {} input channels;"
                           " accumulators kept per cache block",
                           nest.mr, nest.nr, kc, cg));
}

}  // namespace convgen
