// The forward convolution stated once, as Halide Funcs, with no scheduling.
//
// Y[k][pix] = sum_{c,s,r} W[k][c][r][s] * Xpad[c][pix -> (x,y) + tap offset]
// is an implicit GEMM: M = output channels, N = output pixels (flattened p*Q+q per
// image), K = C/g*R*S. The Funcs below are the operands and stages a schedule places:
//   in_padded       the input with zero padding (packing stages it, generator/conv/packing.cpp)
//   tap_panel       the taps of each output pixel, (c, s, r) contiguous (GEMM)
//   weights_packed  weights in the micro-kernel's order (blocked by MR for GEMM)
//   accum           the accumulator tile the micro-kernel owns (generator/conv/microkernel.cpp)
//   output          accum plus the fused epilogue (bias, ReLU) in the caller's layout,
//                   with output pixels flattened (pix = p*Q + q) so tiles never straddle rows
#pragma once

#include <Halide.h>

#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

struct ConvAlgorithm {
  Strategy strategy = Strategy::Gemm;
  int mr = 8;  // GEMM strategy: output channels per packed weight block
  bool may_shift_pixel_tail = true;  // false: ForwardBuildOptions::output_is_staged
  bool weights_transposed = false;   // ForwardBuildOptions::weights_transposed
  bool weights_prepacked = false;    // weights_packed reads the caller's panel (no packing)
  // GEMM: each register tile lies in one output row and the kernel-column taps on
  // left/right padding are left out per pixel (see define_forward). The loop nest then
  // tiles rows by NR and unrolls a row's tiles, so those taps are known per tile.
  bool skips_padded_columns = false;
  // Read in place (depthwise, few-channel GEMM): register tiles lie in output rows and the padding test
  // is marked `likely` true, so Halide partitions the row and tile loops into borders
  // and an interior whose loads carry no select (see partitions_padding_borders).
  bool partitions_borders = false;
  // First layers (C/g below a vector, one group) staged per image or row band: the
  // padded rows are in_rows, (column, channel) flat, and in_padded a view of it
  // (define_flat_padded_rows). The packer stages in_rows instead of in_padded.
  bool stages_flat_rows = false;

  // Pure variables, shared by every piece of the schedule.
  Halide::Var c{"c"}, g{"g"}, x{"x"}, y{"y"}, n{"n"};       // input / padded input
  Halide::Var s{"s"}, r{"r"};                                // kernel taps
  Halide::Var kk{"kk"}, kb{"kb"}, k{"k"}, pix{"pix"};        // accumulator
  Halide::Var kg{"kg"};                                      // output
  Halide::Var ci{"ci"};  // grouped: an input channel across groups, ci = g*(C/g) + c

  Halide::RDom rd;  // (rc, rs, rr): input channel innermost, then kernel column, row;
                    // grouped: (rs, rr) only, input channels are vector lanes
  Halide::Func in_padded{"in_padded"};
  Halide::Func in_rows{"in_rows"};  // stages_flat_rows only
  Halide::Var cx{"cx"};             // in_rows' flat (column, channel) index
  Halide::RDom rows_rd;             // in_rows' update: the real columns' floats
  // GEMM only: the im2col panel of one register tile's pixels, (c, s, r) contiguous per
  // pixel -- BLIS's packed B micro-panel with the im2col fused in. Inlined (no storage)
  // unless the schedule stages it (pack_input = panel).
  Halide::Func tap_panel{"tap_panel"};
  Halide::Func weights_packed{"weights_packed"};
  Halide::Func accum{"accum"};
  Halide::Func output{"output"};
};

// Defines every Func. For Strategy::Gemm the accumulator is accum(kk, kb, pix, n, g) with
// output channel kg = kb*mr + kk inside group g; for Strategy::Depthwise it is
// accum(k, pix, n) with k = g*K/g + kg across all groups (vectors span groups); for
// Strategy::Grouped it is accum(ci, kg, pix, n), the partial sum over the kernel taps of
// input channel ci (= g*C/g + c, vectors span the channels of adjacent groups) for
// output channel kg of ci's group, and output sums the C/g lanes of each group.
// input, weights and bias are the kernel's buffers in the views of generator/conv/pipeline.h.
// skip_padded_rows > 0 restricts the reduction to kernel rows that land inside the image
// for at least one pixel of the tile of skip_padded_rows pixels holding pix (the skipped
// taps would add exact zeros; kept taps that fall on padding for some of the tile's
// pixels read the packer's zeros). The condition is the same for every pixel of a tile,
// so Halide folds it into the bounds of the kernel-row loop instead of testing each
// pixel inside the reduction.
//
// skip_padded_columns (GEMM) adds each kernel-column tap only for the pixels whose tap
// lands inside the image: the product is selected against zero per pixel and column.
// It costs a blend unless the pixel's column and the tap are constants, which the
// schedule guarantees (row tiles unrolled, kernel columns unrolled) so that Halide drops
// the padded taps' FMAs outright -- oneDNN's left/right border code, generated.
//
// aligned_tile > 1 (row_aligned_tile, kernel_plan.h): the register tiles are that many
// pixels, start at multiples of it and never straddle rows. A pixel's row and column are
// then stated through its tile's first pixel, exact for every pix (the tile divides Q),
// so Halide folds them to one base per tile plus the pixel's constant offset.
//
// stage_flat_rows: the schedule stages the padded input and it has fewer channels than a
// vector in one group, so the staged rows are (column, channel) flat (stages_flat_rows).
ConvAlgorithm define_forward(const ConvDescriptor& d, Strategy strategy, int mr, int skip_padded_rows,
                             int aligned_tile, bool skip_padded_columns, bool partition_borders, bool stage_flat_rows,
                             const Halide::Func& input, const Halide::Func& weights, const Halide::Func& bias,
                             const Halide::Func& residual,
                             const ForwardBuildOptions& options);

// The zero-padded input at (c, g, x, y, n): a select on the in-bounds test (rows up to
// last_row: ih - 1, or ih for the deliberately broken kernel); clamping the index keeps
// the discarded load in bounds, so no boundary buffer is ever allocated. With
// likely_interior the test is marked `likely` true, so Halide's loop partitioning splits
// the border loops off and the interior's loads carry neither select nor clamp.
Halide::Expr zero_padded_read(const Halide::Func& input, const Halide::Expr& c, const Halide::Expr& g,
                              const Halide::Expr& x, const Halide::Expr& y, const Halide::Expr& n, int iw, int ih,
                              int last_row, bool likely_interior);

// Rows of a zero-padded input staged (column, channel) flat, for inputs with fewer
// channels than a vector: the real columns' iw*cg floats copied as one dense run per
// row (rd, returned: that update's domain) -- a vector copy with the zero fill at the
// borders, where staging per pixel was a select per float (or a masked gather) that
// cost about what the convolution did. Rows past last_row (ih - 1, or ih for the
// deliberately broken kernel) are zeros. The padded input is then rows(c + x*cg, y, n).
// Zeros go under the whole row (the copy over them), or only into the pad_left and
// pad_right padding columns, each float then written once: enough for a reader that
// asks for x in [-pad_left, iw + pad_right) only, as a forward tile's taps do;
// nothing else of the row is written.
enum class FlatRowZeros { WholeRow, PaddingColumns };
Halide::RDom define_flat_padded_rows(Halide::Func rows, const Halide::Var& cx, const Halide::Var& y,
                                     const Halide::Var& n, const Halide::Func& input, int cg, int iw, int ih,
                                     int last_row, FlatRowZeros zeros, int pad_left = 0, int pad_right = 0);

}  // namespace convgen
