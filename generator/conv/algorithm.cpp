#include "generator/conv/algorithm.h"

#include <stdexcept>

#include "generator/conv/epilogue.h"

namespace convgen {

using namespace Halide;

namespace {

// The padded input: a view of the input, flat staged rows, or zero_padded_read.
void define_in_padded(ConvAlgorithm& a, const ConvDescriptor& d, const Func& input,
                      const ForwardBuildOptions& options, bool partition_borders, bool stage_flat_rows) {
  const int ih = static_cast<int>(d.ih), iw = static_cast<int>(d.iw);
  // The deliberately broken kernel treats the row just past the bottom edge as real.
  const int last_row_allowed = options.inject_padding_bug ? ih : ih - 1;
  if (d.pt == 0 && d.pb == 0 && d.pl == 0 && d.pr == 0 && !options.inject_padding_bug) {
    // A staged output rounds its last pixel tile up, and the extra pixels' taps fall past
    // the last row: clamped, they stay inside the buffer (their results are dropped).
    // Unclamped, a strided backward-data class read past the end of dY (AddressSanitizer,
    // 3x3/2 with 8 -> 16 channels in 8 groups).
    if (options.output_is_staged) {
      a.in_padded(a.c, a.g, a.x, a.y, a.n) = input(a.c, a.g, clamp(a.x, 0, iw - 1), clamp(a.y, 0, ih - 1), a.n);
    } else {
      a.in_padded(a.c, a.g, a.x, a.y, a.n) = input(a.c, a.g, a.x, a.y, a.n);
    }
    return;
  }
  if (stage_flat_rows) {
    const int cg = static_cast<int>(d.icg());
    a.rows_rd = define_flat_padded_rows(a.in_rows, a.cx, a.y, a.n, input, cg, iw, ih, last_row_allowed,
                                        FlatRowZeros::PaddingColumns, int(d.pl), int(d.pr));
    a.in_padded(a.c, a.g, a.x, a.y, a.n) = a.in_rows(a.c + a.x * cg, a.y, a.n);
    a.stages_flat_rows = true;
    return;
  }
  a.in_padded(a.c, a.g, a.x, a.y, a.n) =
      zero_padded_read(input, a.c, a.g, a.x, a.y, a.n, iw, ih, last_row_allowed, partition_borders);
}

}  // namespace

Expr zero_padded_read(const Func& input, const Expr& c, const Expr& g, const Expr& x, const Expr& y, const Expr& n,
                      int iw, int ih, int last_row, bool likely_interior) {
  Expr inside = x >= 0 && x < iw && y >= 0 && y <= last_row;
  if (!likely_interior) return select(inside, input(c, g, clamp(x, 0, iw - 1), clamp(y, 0, ih - 1), n), 0.0f);
  Expr value = input(c, g, clamp(likely(x), 0, iw - 1), clamp(likely(y), 0, ih - 1), n);
  return select(inside, likely(value), 0.0f);
}

RDom define_flat_padded_rows(Func rows, const Var& cx, const Var& y, const Var& n, const Func& input, int cg, int iw,
                             int ih, int last_row, FlatRowZeros zeros, int pad_left, int pad_right) {
  // The input's columns as one unclamped run of floats, so the copy's loads are dense (a
  // clamped index made them gathers). Zeros under the whole row wrote every float
  // twice: on the RGB stem (3x3/2 at 224x224, 2-row bands) the fill was a third of the
  // staging time. (One definition with a `likely` interior copied the same run
  // unaligned and measured 12% slower on the RGB stem than zeros-then-copy.)
  RDom rc(0, iw * cg, "rc");
  if (zeros == FlatRowZeros::WholeRow) {
    rows(cx, y, n) = 0.0f;
  } else {
    rows(cx, y, n) = undef<float>();
  }
  rows(rc, y, n) = select(y >= 0 && y <= last_row, input(rc % cg, 0, rc / cg, clamp(y, 0, ih - 1), n), 0.0f);
  if (zeros == FlatRowZeros::PaddingColumns && pad_left > 0) {
    RDom left(-pad_left * cg, pad_left * cg, "pad_left");
    rows(left, y, n) = 0.0f;
  }
  if (zeros == FlatRowZeros::PaddingColumns && pad_right > 0) {
    RDom right(iw * cg, pad_right * cg, "pad_right");
    rows(right, y, n) = 0.0f;
  }
  return rc;
}

ConvAlgorithm define_forward(const ConvDescriptor& d, Strategy strategy, int mr, int skip_padded_rows,
                             int aligned_tile, bool skip_padded_columns, bool partition_borders, bool stage_flat_rows,
                             const Func& input, const Func& weights, const Func& bias, const Func& residual,
                             const ForwardBuildOptions& options) {
  ConvAlgorithm a;
  a.strategy = strategy;
  a.mr = mr;
  a.partitions_borders = partition_borders;
  const int cg = static_cast<int>(d.icg()), kgn = static_cast<int>(d.ocg());
  const int q_extent = static_cast<int>(d.ow());
  define_in_padded(a, d, input, options, partition_borders, stage_flat_rows);

  // A pixel's output column and row. Through its row-aligned tile's first pixel when
  // there is one: (pix % Q) per pixel kept an address register per pixel of the tile
  // (RGB stem, 32x6: 6 pointers and 9 increments per 12 FMAs).
  if (aligned_tile > 1 && q_extent % aligned_tile != 0)
    throw std::logic_error("define_forward: a row-aligned tile must divide the output width");
  auto column = [&](Expr pix) -> Expr {
    if (aligned_tile <= 1) return pix % q_extent;
    // In [0, Q) for every pix, which bounds inference cannot see: unpromised it takes
    // columns up to Q + NR - 2, and a kernel staging the input copied (read) that many
    // columns past the image (AddressSanitizer, the small-images trainer tests).
    return unsafe_promise_clamped(((pix / aligned_tile) * aligned_tile) % q_extent + pix % aligned_tile, 0,
                                  q_extent - 1);
  };
  auto row = [&](Expr pix) -> Expr {
    if (aligned_tile <= 1) return pix / q_extent;
    return ((pix / aligned_tile) * aligned_tile) / q_extent;
  };
  auto tap_x = [&](Expr pix, Expr s) {
    return column(pix) * static_cast<int>(d.sw) + s * static_cast<int>(d.dw) - static_cast<int>(d.pl);
  };
  auto tap_y = [&](Expr pix, Expr r) {
    return row(pix) * static_cast<int>(d.sh) + r * static_cast<int>(d.dh) - static_cast<int>(d.pt);
  };

  if (strategy == Strategy::Grouped) {
    // The reduction runs over the taps only; the input channels are vector lanes, and
    // each output sums its group's C/g lanes once, after all taps.
    a.rd = RDom(0, static_cast<int>(d.kw), 0, static_cast<int>(d.kh), "rd");
    RVar rs = a.rd.x, rr = a.rd.y;
    Expr c = a.ci % cg, g = a.ci / cg;
    a.weights_packed(a.ci, a.kg, a.s, a.r) = weights(a.s, a.r, c, a.kg, g);
    a.accum(a.ci, a.kg, a.pix, a.n) = 0.0f;
    a.accum(a.ci, a.kg, a.pix, a.n) +=
        a.weights_packed(a.ci, a.kg, rs, rr) *
        a.in_padded(c, g, tap_x(a.pix, rs), tap_y(a.pix, rr), a.n);
    Expr value = a.accum(a.g * cg, a.kg, a.pix, a.n);
    for (int j = 1; j < cg; ++j) value += a.accum(a.g * cg + j, a.kg, a.pix, a.n);
    if (d.bias) value += bias(a.g * kgn + a.kg);
    if (d.residual) value += residual(a.kg, a.g, a.pix, a.n);
    value = apply_activation(d, value);
    a.output(a.kg, a.g, a.pix, a.n) = value;
    return a;
  }

  a.rd = RDom(0, cg, 0, static_cast<int>(d.kw), 0, static_cast<int>(d.kh), "rd");
  RVar rc = a.rd.x, rs = a.rd.y, rr = a.rd.z;
  if (skip_padded_rows > 0) {
    // Kernel rows on padding for every pixel of the tile add exact zeros: leave them out.
    // Rows grow with pix, so the tile's first and last pixels bound the rows it reads.
    // With tiles inside rows (skip_padded_columns) the tile's row is the pixel's own.
    const int tile = skip_padded_rows, pq = static_cast<int>(d.oh() * d.ow());
    const int last_row = options.inject_padding_bug ? int(d.ih) : int(d.ih) - 1;
    Expr first = skip_padded_columns ? a.pix : (a.pix / tile) * tile;
    Expr last = skip_padded_columns ? a.pix : min(first + (tile - 1), pq - 1);
    a.rd.where(tap_y(last, rr) >= 0 && tap_y(first, rr) <= last_row);
  }
  if (strategy == Strategy::Gemm) {
    // Weights blocked by mr output channels, zero-filled past K/g so every block is full
    // (`likely`: Halide peels the ragged last block off the packing loops).
    if (options.weight_panel) {
      // Packed by the caller (schedules/weight_panels.h): the same panel, read in place.
      const WeightPanel& w = *options.weight_panel;
      if (w.mr != mr || w.channels != cg || w.outputs != kgn || w.taps_w != int(d.kw) || w.taps_h != int(d.kh))
        throw std::logic_error("define_forward: the weight panel does not match the kernel's GEMM blocking");
      Expr block = a.kb + w.blocks * a.g;
      Expr at = static_cast<int>(w.offset) + a.kk + mr * (a.c + w.channels * (a.s + w.taps_w * (a.r + w.taps_h * block)));
      a.weights_packed(a.kk, a.c, a.s, a.r, a.kb, a.g) = weights(at);
      a.weights_prepacked = true;
    } else {
      Expr kg_full = a.kb * mr + a.kk;
      a.weights_packed(a.kk, a.c, a.s, a.r, a.kb, a.g) =
          select(likely(kg_full < kgn), weights(a.s, a.r, a.c, min(kg_full, kgn - 1), a.g), 0.0f);
    }
    a.tap_panel(a.c, a.s, a.r, a.pix, a.n, a.g) =
        a.in_padded(a.c, a.g, tap_x(a.pix, a.s), tap_y(a.pix, a.r), a.n);
    a.accum(a.kk, a.kb, a.pix, a.n, a.g) = 0.0f;
    Expr product = a.weights_packed(a.kk, rc, rs, rr, a.kb, a.g) * a.tap_panel(rc, rs, rr, a.pix, a.n, a.g);
    if (skip_padded_columns) {
      a.skips_padded_columns = true;
      Expr x = tap_x(a.pix, rs);
      product = select(x >= 0 && x < static_cast<int>(d.iw), product, 0.0f);
    }
    a.accum(a.kk, a.kb, a.pix, a.n, a.g) += product;
    Expr value = a.accum(a.kg % mr, a.kg / mr, a.pix, a.n, a.g);
    if (d.bias) value += bias(a.g * kgn + a.kg);
    if (d.residual) value += residual(a.kg, a.g, a.pix, a.n);
    value = apply_activation(d, value);
    a.output(a.kg, a.g, a.pix, a.n) = value;
  } else {
    // Channel vectors across groups: output channel k reads input group k / (K/g).
    a.weights_packed(a.k, a.c, a.s, a.r) = weights(a.s, a.r, a.c, a.k % kgn, a.k / kgn);
    a.accum(a.k, a.pix, a.n) = 0.0f;
    a.accum(a.k, a.pix, a.n) += a.weights_packed(a.k, rc, rs, rr) *
                                a.in_padded(rc, a.k / kgn, tap_x(a.pix, rs), tap_y(a.pix, rr), a.n);
    Expr k = a.g * kgn + a.kg;
    Expr value = a.accum(k, a.pix, a.n);
    if (d.bias) value += bias(k);
    if (d.residual) value += residual(a.kg, a.g, a.pix, a.n);
    value = apply_activation(d, value);
    a.output(a.kg, a.g, a.pix, a.n) = value;
  }
  return a;
}

}  // namespace convgen
