// Backward-weights: dW[k][t] = sum over images and output pixels of dY[pix][k] * im2col(X)[pix][t],
// t = (c, s, r) with c innermost, per group -- a GEMM whose reduction is the pixels.
//
// Pieces, BLIS-style (docs/backward.md):
//   micro-kernel  band_sum: an MR x NR tile (MR output channels as vectors, NR taps
//                 broadcast) summed over one row band of one image, in registers
//   packing       the band's zero-padded input rows (x_band) and, with a fused ReLU,
//                 the band's masked dY (dy_band); im2col never exists
//   loop nest     partial[part] += band_sum over the partition's (image, band) items in
//                 index order; inside an item, channel tiles outside tap tiles so an
//                 MR slice of the dY band stays in L1 while the taps stream from L2;
//                 dw = the partitions added in index order, written in ONNX layout
// Vectors run along K/g output channels for GEMM; for depthwise-like layers (few
// channels per group) along all K channels across groups.
#include <algorithm>

#include <fmt/format.h>

#include "conv_backward.h"
#include "conv_schedule_pieces.h"

namespace convgen {

using namespace Halide;

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

std::vector<Func> BackwardWeightsPipeline::outputs() const {
  std::vector<Func> out = {dw};
  if (db.defined()) out.push_back(db);
  return out;
}

BackwardWeightsPipeline build_backward_weights(const ConvDescriptor& d, const ConvSchedule& schedule,
                                               const TargetInfo& t, std::vector<std::string>* why,
                                               const ForwardBuildOptions& options) {
  validate(d);
  validate(schedule, t);
  const ConvSchedule& s = schedule;
  BackwardWeightsPipeline p;
  p.x = ImageParam(Float(32), 5, "x");
  p.dy = ImageParam(Float(32), 4, "dy");
  p.y = ImageParam(Float(32), 4, "y");

  const int vl = t.vector_floats;
  const int cg = int(d.icg()), kgn = int(d.ocg()), kw = int(d.kw), kh = int(d.kh);
  const int P = int(d.oh()), Q = int(d.ow()), N = int(d.mb), ih = int(d.ih), iw = int(d.iw);
  const int taps = cg * kw * kh;
  // GEMM vectors along a group's output channels; otherwise along all channels (the
  // depthwise form: a tile spans groups, each lane reads its own group's input).
  const bool gemm = s.strategy == Strategy::Gemm && kgn >= vl;
  if (s.strategy == Strategy::Gemm && !gemm)
    explain(why, fmt::format("gemm refused: {} output channels per group fill no vector; vectors run across groups",
                             kgn));
  const int chan_extent = gemm ? kgn : int(d.oc);
  const int mr = std::max(1, std::min(s.mr, ceil_div(chan_extent, vl) * vl));
  const int nr = std::max(1, std::min(s.nr, taps));
  // Reduction blocking: kc output pixels per item, in whole rows.
  const int band_rows = s.kc > 0 ? std::clamp(ceil_div(s.kc, Q), 1, P) : P;
  const int bands = ceil_div(P, band_rows);
  const int items = N * bands;
  const int partitions = std::clamp(s.partitions, 1, items);
  const int per_part = ceil_div(items, partitions);
  explain(why, fmt::format("backward-weights: {} tile {} channels x {} taps (of {}); reduction over {} image(s) x {} "
                           "band(s) of {} rows in {} partition(s), combined in index order",
                           gemm ? "gemm" : "across-groups", mr, nr, taps, N, bands, band_rows, partitions));

  Var k("k"), tap("tap"), grp("grp"), j("j"), part("part"), n("n"), c("c"), xx("xx"), yy("yy"), pix("pix");
  Var sv("s"), rv("r"), kout("kout");

  // Zero-padded input; the broken test kernel treats the row past the bottom as real.
  const bool padded = d.pt || d.pb || d.pl || d.pr || options.inject_padding_bug;
  const int last_row = options.inject_padding_bug ? ih : ih - 1;
  Func x_band("x_band");
  if (padded) {
    Expr inside = xx >= 0 && xx < iw && yy >= 0 && yy <= last_row;
    x_band(c, grp, xx, yy, n) =
        select(inside, p.x(c, grp, clamp(xx, 0, iw - 1), clamp(yy, 0, ih - 1), n), 0.0f);
  } else {
    x_band(c, grp, xx, yy, n) = p.x(c, grp, xx, yy, n);
  }

  // The micro-kernel: one (image, band) item's sum for one output channel and tap.
  RDom rb(0, Q, 0, band_rows, "rb");
  Expr img = j / bands, band = j % bands;
  Expr row = band * band_rows + rb.y;
  rb.where(row < P);
  Expr tc = tap % cg, ts = (tap / cg) % kw, tr = tap / (cg * kw);
  Expr in_x = rb.x * int(d.sw) + ts * int(d.dw) - int(d.pl);
  Expr in_y = row * int(d.sh) + tr * int(d.dh) - int(d.pt);
  // Channel coordinates: (k, tap, grp) for GEMM; (k, tap) with k across groups otherwise.
  auto chan = [&](Expr kk, Expr tt, Expr gg, Expr last) {
    return gemm ? std::vector<Expr>{kk, tt, gg, last} : std::vector<Expr>{kk, tt, last};
  };
  // dY of one item, packed once per item: masked by the forward's ReLU, and zero-filled
  // past the last channel so every channel tile is a whole MR (ragged vector tiles
  // inside the unrolled tile mis-compiled under Halide 14).
  const int chan_padded = ceil_div(chan_extent, mr) * mr;
  Func dy_band("dy_band");
  {
    Expr kk = gemm ? Expr(k) : k % kgn, gg = gemm ? Expr(grp) : min(k, chan_extent - 1) / kgn;
    Expr kc = min(kk, kgn - 1);
    Expr value = p.dy(kc, gg, pix, n);
    if (d.relu) value = select(p.y(kc, gg, pix, n) > 0.0f, value, 0.0f);
    if (chan_padded != chan_extent) value = select(k < chan_extent, value, 0.0f);
    if (gemm) {
      dy_band(k, grp, pix, n) = value;
    } else {
      dy_band(k, pix, n) = value;
    }
  }
  auto dy_at = [&](Expr kk, Expr gg, Expr px, Expr nn) { return gemm ? dy_band(kk, gg, px, nn) : dy_band(kk, px, nn); };
  // Lanes past the last channel read a real group's input (their sums are dropped).
  Expr g_of = gemm ? Expr(grp) : min(k, chan_extent - 1) / kgn;
  Func band_sum("band_sum"), partial("partial"), dw("dw");
  band_sum(chan(k, tap, grp, j)) = 0.0f;
  band_sum(chan(k, tap, grp, j)) += dy_at(k, grp, row * Q + rb.x, img) * x_band(tc, g_of, in_x, in_y, img);

  RDom ri(0, per_part, "ri");
  ri.where(part * per_part + ri < items);
  partial(chan(k, tap, grp, part)) = 0.0f;
  partial(chan(k, tap, grp, part)) += band_sum(chan(k, tap, grp, part * per_part + ri));

  // dw in ONNX layout: the partitions added in index order.
  Expr tap_of = c + cg * (sv + kw * rv);
  Expr lane = gemm ? Expr(kout) : grp * kgn + kout;
  Expr sum = partial(chan(lane, tap_of, grp, 0));
  for (int i = 1; i < partitions; ++i) sum += partial(chan(lane, tap_of, grp, i));
  dw(sv, rv, c, kout, grp) = sum;
  p.dw = dw;

  if (d.bias) {
    // db: the same dY sums, per channel, images outer and pixels inner.
    Func db_sum("db_sum");
    RDom rp(0, P * Q, 0, N, "rp");
    db_sum(k, grp) = 0.0f;
    Expr value = p.dy(k, grp, rp.x, rp.y);
    if (d.relu) value = select(p.y(k, grp, rp.x, rp.y) > 0.0f, value, 0.0f);
    db_sum(k, grp) += value;
    p.db = Func("db");
    p.db(k) = db_sum(k % kgn, k / kgn);
    db_sum.compute_root().update().reorder(k, rp.x, rp.y, grp);
    if (kgn >= vl) db_sum.update().vectorize(k, vl, TailStrategy::GuardWithIf);
  }

  // ---- schedule -----------------------------------------------------------------
  Var k_tile("k_tile"), k_in("k_in"), t_tile("t_tile"), t_in("t_in"), ko("ko"), ki("ki");
  Stage acc = partial.update();
  partial.bound(k, 0, chan_padded);
  // Exact: partial is bounded to whole tiles, so these guards fold away.
  acc.split(k, k_tile, k_in, mr, TailStrategy::GuardWithIf).split(tap, t_tile, t_in, nr, TailStrategy::GuardWithIf);
  if (gemm) {
    acc.reorder(k_in, t_in, t_tile, k_tile, ri, grp, part);
  } else {
    acc.reorder(k_in, t_in, t_tile, k_tile, ri, part);
  }
  acc.vectorize(k_in, std::min(vl, mr), TailStrategy::GuardWithIf).unroll(k_in).unroll(t_in);
  partial.compute_root();
  if (s.parallel != Parallel::None) {
    if (partitions > 1) {
      acc.parallel(part);
      explain(why, "parallel over the reduction partitions");
    } else {
      acc.parallel(k_tile);
      explain(why, "parallel over the channel tiles of each reduction item");
    }
  }
  // Register tile: accumulators live in registers over the band's pixels.
  band_sum.compute_at(partial, t_tile);
  Stage bs = band_sum.update();
  band_sum.split(k, ko, ki, std::min(vl, mr), TailStrategy::RoundUp).vectorize(ki).unroll(ko).unroll(tap);
  bs.split(k, ko, ki, std::min(vl, mr), TailStrategy::GuardWithIf);
  bs.reorder(ki, ko, tap, rb.x, rb.y).vectorize(ki).unroll(ko).unroll(tap);
  // Packing: the band's padded input rows once per item; dY masked once per item.
  LoopLevel item_level(partial, ri.x);
  if (padded) {
    x_band.compute_at(item_level);
    if (cg >= vl) {
      x_band.vectorize(c, vl, TailStrategy::ShiftInwards);
    } else if (!gemm && d.ic >= vl) {
      Var cgf("cgf");
      x_band.fuse(c, grp, cgf).vectorize(cgf, vl, TailStrategy::ShiftInwards);
    }
    explain(why, "input packed per reduction item into a zero-padded row band");
  }
  dy_band.compute_at(item_level).bound(k, 0, chan_padded).vectorize(k, std::min(vl, mr), TailStrategy::RoundUp);
  explain(why, d.relu ? "dY packed per reduction item, masked by the forward's ReLU" : "dY packed per reduction item");
  dw.compute_root();

  // Every extent and stride a constant; y only when the kernel reads it.
  const auto extents = forward_buffer_extents(d);
  pin_dense([&](int i) { return p.x.dim(i); }, extents[0]);
  pin_dense([&](int i) { return p.dy.dim(i); }, extents[3]);
  if (d.relu) pin_dense([&](int i) { return p.y.dim(i); }, extents[3]);
  pin_dense([&](int i) { return p.dw.output_buffer().dim(i); }, extents[1]);
  if (d.bias) pin_dense([&](int i) { return p.db.output_buffer().dim(i); }, extents[2]);
  return p;
}

}  // namespace convgen
