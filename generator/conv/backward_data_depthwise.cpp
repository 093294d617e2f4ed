// Strided depthwise backward-data computed pixel by pixel where dX lies
// (computes_depthwise_dx_in_place, schedules/kernel_plan.h).
//
// Every dX pixel (x, y) belongs to one residue class (x mod sw, y mod sh), and the class
// decides which few taps reach it and from which dY pixels, at constant offsets: tap
// (r, s) reaches x when (x + pl - s*dw) is a multiple of sw, from dY column
// (x + pl - s*dw) / sw. So dX is one pure function of (channel, residue, quotient),
// chosen per residue by a select that folds away once the residue loops are unrolled:
// the register tile is NR consecutive pixels of a row (NR a multiple of sw) and the
// rows are unrolled by sh. No class is staged and no dY is packed: the per-class form
// wrote each class into a buffer, copied it into dX and packed a padded dY per class,
// about three passes over memory for a layer that does 2-4 FMAs per pixel.
#include <algorithm>

#include <fmt/format.h>

#include "generator/conv/backward.h"
#include "generator/conv/schedule_pieces.h"
#include "schedules/kernel_plan.h"

namespace convgen {

using namespace Halide;

namespace {

// Floor division of integers of any sign (dY offsets left of the pixel are negative).
int floor_div(int a, int b) { return (a >= 0 ? a : a - b + 1) / b; }

}  // namespace

Func define_depthwise_backward_data_in_place(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                             const Func& dy_masked, const ImageParam& weights, Why* why) {
  const int sw = int(d.sw), sh = int(d.sh), iw = int(d.iw);
  const int P = int(d.oh()), Q = int(d.ow()), vl = t.vector_floats;
  Var c("c"), g("g"), pix("pix"), n("n"), xr("xr"), xo("xo"), yr("yr"), yo("yo"), tap("tap");

  // The weights with channels innermost, copied once per call: read in place, each
  // tap's vector of channels was a gather (stride kh*kw) in every tile.
  Func taps("weights_by_tap");
  taps(g, tap) = weights(tap % int(d.kw), tap / int(d.kw), 0, 0, g);

  // The sum for one residue class: its taps at constant dY offsets from (xo, yo). dY
  // reads are clamped with `likely` interiors, so the border tiles and rows are split
  // off and the interior carries no select.
  auto class_sum = [&](int rx, int ry) {
    Expr sum = 0.0f;
    for (int r = 0; r < int(d.kh); ++r) {
      const int oy = ry + int(d.pt) - r * int(d.dh);
      if (((oy % sh) + sh) % sh != 0) continue;
      for (int si = 0; si < int(d.kw); ++si) {
        const int ox = rx + int(d.pl) - si * int(d.dw);
        if (((ox % sw) + sw) % sw != 0) continue;
        Expr q = xo + floor_div(ox, sw), p = yo + floor_div(oy, sh);
        Expr inside = q >= 0 && q < Q && p >= 0 && p < P;
        Expr v = dy_masked(0, g, clamp(likely(q), 0, Q - 1), clamp(likely(p), 0, P - 1), n) * taps(g, r * int(d.kw) + si);
        sum = sum + select(inside, likely(v), 0.0f);
      }
    }
    return sum;
  };
  Func by_class("dx_by_class");
  Expr value = 0.0f;
  for (int ry = sh - 1; ry >= 0; --ry)
    for (int rx = sw - 1; rx >= 0; --rx) value = select(xr == rx && yr == ry, class_sum(rx, ry), value);
  by_class(g, xr, xo, yr, yo, n) = value;

  Func dx("dx");
  Expr x = pix % iw, y = pix / iw;
  dx(c, g, pix, n) = by_class(g, x % sw, x / sw, y % sh, y / sh, n);

  // Loops, innermost first: channels (vectors, MR/vl unrolled), the NR pixels of the
  // row tile (unrolled: each folds to its residue's taps), channel tiles, row tiles,
  // the sh rows of a residue period (unrolled), periods of rows, images.
  const int nr = depthwise_dx_row_tile(d, s);
  // Channel tiles of whole vectors, the last shifted inwards to overlap the one before
  // (its channels recomputed, identically); fewer channels than a vector, one guarded
  // vector. (A guarded tile of several vectors does not compile under Halide 14.)
  const int groups = int(d.g), mr = depthwise_dx_channel_tile(d, s, t);
  Var row("row"), col("col"), rt("rt"), ri("ri"), ct("ct"), ci("ci"), ro("ro"), rr("rr"), cv("cv"), co("co");
  dx.split(pix, row, col, iw, TailStrategy::GuardWithIf)
      .split(col, ct, ci, nr, TailStrategy::GuardWithIf)
      .split(row, ro, rr, sh, TailStrategy::GuardWithIf);
  dx.split(g, rt, ri, mr, groups >= vl ? TailStrategy::ShiftInwards : TailStrategy::GuardWithIf)
      .split(ri, co, cv, vl, TailStrategy::GuardWithIf)
      .reorder(c, cv, co, ci, rt, ct, rr, ro, n).vectorize(cv).unroll(co).unroll(ci).unroll(rr);
  taps.compute_root().vectorize(g, vl, TailStrategy::GuardWithIf);
  if (s.parallel != Parallel::None) {
    dx.parallel(ro);
    explain(why, "parallel over periods of rows");
  }
  explain(why, fmt::format("strided depthwise backward-data in place: dX pixel by pixel, tile {} channels x {} pixels "
                           "of a row, each pixel's residue taps read from dY where it lies; no class staged",
                           mr, nr));
  return dx;
}

}  // namespace convgen
