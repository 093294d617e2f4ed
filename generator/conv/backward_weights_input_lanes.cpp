// Backward-weights of an unpadded 1x1 layer with vectors along the input channels
// (Strategy::GemmInputLanes): dW[k][c] = sum over pixels of dY[pix][k] * X[pix][c], per
// group. dW's taps are its input channels, so a register tile of MR input channels
// (vectors of X) x NR output channels (dY broadcast) holds NR rows of ONNX's dW and is
// stored where it belongs: no transpose, and with one reduction item no partial sums or
// zero fill either (several items gather in a dW-sized sum copied to dW). The GEMM form
// with vectors along the output channels moves its sums through a partial buffer and a
// blocked transpose, which on few-pixel layers is a large share of the call
// (docs/backward.md). The pieces, BLIS-style:
//
//   micro-kernel  input_lane_tile: MR x NR accumulators summed over one item's pixels
//   packing       per item and channel tile: X as an [pixel][MR] panel (contiguous, so
//                 strided or page-aliased input rows never compete for L1 sets), or read
//                 in place where that panel would be a plain copy; dY as [k tile][pixel]
//                 [NR] panels, masked by the forward's ReLU and zero past the last pixel
//                 and channel -- per item with items outermost, else once for every
//                 item of the group
//   loop nest     pixels_outer: items, channel tiles, output-channel tiles -- dW (small,
//                 many pixels) stays in cache while each item's panels are reused;
//                 channels_outer: channel tiles, items, output-channel tiles -- the
//                 X panel of a channel tile over every item stays in L2 while dW is
//                 written once per tile row (large dW, few pixels). With one item both
//                 are the same loop nest and the tile is written once.
//
// The items are kc pixels counted across images (input_lane_item_pixels), summed in
// index order into dW; the bits depend on the schedule alone, never on the threads.
#include <algorithm>

#include <fmt/format.h>

#include "generator/conv/backward.h"
#include "generator/conv/schedule_pieces.h"
#include "schedules/kernel_plan.h"

namespace convgen {

using namespace Halide;

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

Func define_input_lane_weights(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                               const ImageParam& x, const Func& dy_masked, std::vector<std::string>* why,
                               std::vector<ItemPrefetch>* prefetches) {
  const int vl = t.vector_floats;
  const int cg = int(d.icg()), kgn = int(d.ocg());
  const int Q = int(d.ow()), PQ = int(d.oh() * d.ow());
  const int pixels = int(d.mb) * PQ;
  const int mr = std::min(s.mr, ceil_div(cg, vl) * vl);
  const int nr = std::clamp(s.nr, 1, kgn);
  const int k_tiles = ceil_div(kgn, nr);
  const int item = int(input_lane_item_pixels(d, s));
  const int items = ceil_div(pixels, item);
  const bool channels_outer = items > 1 && s.loop_order == LoopOrder::ChannelsOuter;
  explain(why, fmt::format("backward-weights: input-lane tile {} input channels x {} output channels; {} item(s) of "
                           "{} pixels{}; dW in ONNX order, no transpose",
                           mr, nr, items, item,
                           items == 1         ? ", written straight into dW"
                           : channels_outer ? ", channel tiles outside the items, summed in index order"
                                            : ", items outermost, summed in index order"));

  Var ci("ci"), ct("ct"), ki("ki"), kt("kt"), ip("ip"), it("it"), grp("grp");
  // Item pixel -> (image, pixel of the image); pixels past the last are zero in dY.
  Expr gp = it * item + ip;
  Expr gpc = min(gp, pixels - 1);
  Expr n = gpc / PQ, pq = gpc % PQ;
  Expr in_x = (pq % Q) * int(d.sw), in_y = (pq / Q) * int(d.sh);

  Func x_lanes("x_lanes");
  x_lanes(ci, ip, ct, it, grp) = x(min(ct * mr + ci, cg - 1), grp, in_x, in_y, n);

  Func dy_lanes("dy_lanes");
  Expr k = kt * nr + ki;
  Expr keep = gp < pixels;
  if (k_tiles * nr != kgn) keep = keep && k < kgn;
  dy_lanes(ki, ip, kt, it, grp) = select(keep, dy_masked(min(k, kgn - 1), grp, pq, n), 0.0f);

  Func tile("input_lane_tile");
  RDom rp(0, item, "rp");
  tile(ci, ki, ct, kt, it, grp) = 0.0f;
  tile(ci, ki, ct, kt, it, grp) += x_lanes(ci, rp, ct, it, grp) * dy_lanes(ki, rp, kt, it, grp);

  Func dw("dw");
  Var sv("s"), rv("r"), c("c"), kout("kout");
  RDom ri(0, items, "ri");
  // With several items the sums gather in dw_sum, Halide's own buffer, and dw is a copy:
  // Halide 14 takes a load of an output buffer at a constant, vector-aligned index as
  // aligned, and a read-modify-write of dw there faulted on a 16-byte-aligned dw.
  Func sum = items == 1 ? dw : Func("dw_sum");
  auto tile_of = [&](Expr item_index) { return tile(c % mr, kout % nr, c / mr, kout / nr, item_index, grp); };
  if (items == 1) {
    dw(sv, rv, c, kout, grp) = tile_of(0);
  } else {
    sum(c, kout, grp) = 0.0f;
    sum(c, kout, grp) += tile_of(ri);
    dw(sv, rv, c, kout, grp) = sum(c, kout, grp);
  }

  // ---- schedule -----------------------------------------------------------------
  Var c_tile("c_tile"), c_in("c_in"), cio("cio"), cii("cii"), k_tile("k_tile"), k_in("k_in");
  Stage st = items == 1 ? Stage(dw) : sum.update();
  st.split(c, c_tile, c_in, mr, TailStrategy::GuardWithIf).split(kout, k_tile, k_in, nr, TailStrategy::GuardWithIf);
  if (items == 1) {
    st.reorder(c_in, k_in, sv, rv, k_tile, c_tile, grp);
  } else if (channels_outer) {
    st.reorder(c_in, k_in, k_tile, ri, c_tile, grp);
  } else {
    st.reorder(c_in, k_in, k_tile, c_tile, ri, grp);
  }
  st.split(c_in, cio, cii, vl, TailStrategy::GuardWithIf).vectorize(cii).unroll(cio).unroll(k_in);
  Var d_tile("d_tile"), d_in("d_in");
  if (items > 1) {
    sum.vectorize(c, vl, TailStrategy::GuardWithIf);
    if (channels_outer) {
      // One channel tile's sums (MR x K/g) at a time, copied out while in cache.
      dw.split(c, d_tile, d_in, mr, TailStrategy::GuardWithIf).reorder(d_in, kout, sv, rv, d_tile, grp);
      dw.vectorize(d_in, vl, TailStrategy::GuardWithIf);
      sum.compute_at(dw, d_tile);
    } else {
      dw.vectorize(c, vl, TailStrategy::GuardWithIf);
      sum.compute_root();
    }
  }
  if (s.parallel != Parallel::None) {
    if (channels_outer) {
      dw.parallel(d_tile);
    } else {
      st.parallel(c_tile);
    }
    explain(why, items > 1 && !channels_outer ? "parallel over the channel tiles of each item"
                                              : "parallel over the channel tiles");
  }
  // The register tile: accumulators stay in registers over the item's pixels.
  tile.compute_at(sum, k_tile);
  tile.split(ci, cio, cii, vl, TailStrategy::RoundUp).vectorize(cii).unroll(cio).unroll(ki);
  tile.update()
      .split(ci, cio, cii, vl, TailStrategy::GuardWithIf)
      .reorder(cii, cio, ki, rp)
      .vectorize(cii)
      .unroll(cio)
      .unroll(ki);
  // Packing: X per item and channel tile; dY per item (pixels_outer) or for every item
  // of the group at once (channel tiles outside the items, or one item).
  // X is read in place when its packed panel would be a plain copy: one channel tile of
  // all C (MR = C), stride 1, one group -- the item's pixels are then contiguous rows.
  // The copy would come before any FMA of the item; read in place, the stream overlaps
  // the tile's work (1x1 64->64 at 56x56, Intel Xeon AVX-512: 120 vs 100 GF/s).
  const bool x_in_place = d.g == 1 && d.sh == 1 && d.sw == 1 && mr == cg;
  if (x_in_place) {
    explain(why, "X read in place: the item's rows are already the [pixel][MR] panel");
  } else if (channels_outer) {
    x_lanes.compute_at(sum, ri.x);
  } else {
    x_lanes.compute_at(sum, c_tile);
  }
  if (!x_in_place) x_lanes.vectorize(ci, vl, TailStrategy::RoundUp);
  if (items > 1 && !channels_outer) {
    dy_lanes.compute_at(sum, ri.x);
  } else {
    dy_lanes.compute_at(dw, grp);
  }
  // Items outermost: the next item's rows of X and dY are prefetched while this one
  // computes (item_prefetch.h). Not with channel tiles outermost (X is read once per
  // channel tile: whole rows would be fetched C/MR times), nor with several groups
  // (groups run outside the items: every group would fetch all groups' channels), nor
  // for items of one pixel (the prefetches ride on the item's pixel loop).
  if (items > 1 && !channels_outer && d.g == 1 && item > 1) {
    const int ih = int(d.ih), iw = int(d.iw), ic = int(d.ic), oc = int(d.oc);
    Expr next = (item_loop_var(sum.name() + ".s1.ri$x") + 1) * item;  // its first pixel
    Expr img = next / PQ, row = (next % PQ) / Q;
    const int rows = ceil_div(item, Q) + 1;  // output rows an item can touch
    const ItemPrefetch::Range x = clamped_range("x", (img * ih + row * int(d.sh)) * (iw * ic),
                                                int64_t(rows) * int(d.sh) * iw * ic, int64_t(d.mb) * ih * iw * ic);
    const ItemPrefetch::Range dy = clamped_range("dy", next * oc, int64_t(item) * oc, int64_t(pixels) * oc);
    ItemPrefetch plan;
    plan.item_loop = sum.name() + ".s1.ri$x";
    plan.inner_loop = tile.name() + ".s1.rp$x";
    plan.ranges = {x, dy};
    if (d.relu) plan.ranges.push_back({"y", dy.first, dy.elements});  // the ReLU mask: dY's shape
    spread_over_visits(plan, int64_t(ceil_div(cg, mr)) * k_tiles);
    prefetches->push_back(plan);
    explain(why, fmt::format("the next item's X and dY rows prefetched, {} cache lines per tile", plan.lines_per_visit));
  }
  // Read dY along its channels (one pixel's row), write each k tile's panel.
  dy_lanes.reorder(ki, kt, ip, it).vectorize(ki);
  explain(why, fmt::format("{}dY as [k tile][pixel][NR] panels", x_in_place ? "" : "X packed as [pixel][MR] panels; "));
  return dw;
}

}  // namespace convgen
