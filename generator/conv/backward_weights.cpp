// Backward-weights: dW[k][t] = sum over images and output pixels of dY[pix][k] * im2col(X)[pix][t],
// t = (c, s, r) with c innermost, per group -- a GEMM whose reduction is the pixels.
// The reduction runs in items of about kc pixels (a band of whole rows of one image, or
// several whole images), items in index order, into `partitions` partial sums added in
// index order at the end (docs/backward.md). Two forms of the pieces, BLIS-style:
//
//   direct tile loads (any strategy)
//     micro-kernel  band_sum: MR output channels (vectors) x NR taps (broadcast from the
//                   staged input rows) summed over the item's pixels, in registers
//     packing       per item: the zero-padded input rows (x_band, when padded) and dY
//                   (dy_band: masked by the ReLU, zero past the last channel tile)
//     loop nest     channel tiles outside tap tiles: an MR slice of the item's dY stays
//                   in L1 while the taps stream from L2
//   in place (pack_input=none; weights_read_in_place: depthwise, and first layers with
//     few FMAs per input float)
//     as direct tile loads, without the input's packing: the tile reads the input where
//     it lies; the padding test is a `likely` interior, so the border pixels and rows
//     are split off and the interior's loads carry no select
// Both direct forms read dY in place unless a ReLU masks it or channel tiles overhang.
//   packed panels (gemm, pack_input=panel; define_gemm_partial)
//     packing       per item: dY as MR-wide channel slices; per block of nc taps: the
//                   item's im2col as NR-wide panels -- BLIS's packed A and B
//     loop nest     tap blocks, channel tiles, tap tiles, the micro-kernel over the item
//
// Every form with several items prefetches the next item's input and dY rows while an
// item computes (next_item_prefetch, generator/conv/item_prefetch.h): the first touch
// of an item's rows no longer waits on memory (1x1 256->64 at 56x56, mb 8, Intel Xeon
// AVX-512: 67 -> 109-134 GF/s; layers whose data stay in cache unchanged).
//
// Vectors run along K/g output channels for GEMM; for depthwise-like layers (few
// channels per group) along all K channels across groups. The im2col matrix of the
// layer never exists: panels hold one item's pixels for one block of taps.
#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "generator/conv/backward.h"
#include "generator/conv/schedule_pieces.h"
#include "schedules/errors.h"
#include "schedules/kernel_plan.h"

namespace convgen {

using namespace Halide;

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The GEMM form, BLIS-style. Per item (kc output pixels): dY packed once into MR-wide
// channel slices [kt][pixel][MR] (masked, zero past K/g and past the item's pixels);
// per block of nc taps, the item's im2col for those taps packed into NR-wide panels
// [tt][pixel][NR]; then channel tiles outside tap tiles, so one contiguous dY slice stays
// in L1 while the block's panels stream from L2. Returns partial(ki, kt, ti, tt, grp,
// part): output channel kt*MR + ki, tap tt*NR + ti of group grp, partition part.
// Threads split whole partitions when there are several, else the channel tiles of
// `tiles`; never the reduction inside a partition.
void parallelise(Stage& acc, const Var& part, const VarOrRVar& tiles, int partitions, const ConvSchedule& s,
                 const char* tiles_what, Why* why) {
  if (s.parallel == Parallel::None) return;
  if (partitions > 1) {
    acc.parallel(part);
    explain(why, "parallel over the reduction partitions");
  } else {
    acc.parallel(tiles);
    explain(why, std::string("parallel over the channel tiles of each ") + tiles_what);
  }
}

// The partial sums' zero fill (their pure definition), vectors along the output channels
// and threads over the tap tiles: a whole-batch dW of a few pixels is mostly that fill
// and the transpose (8 MiB for a 1x1 2048->1024).
void zero_fill(Func partial, const Var& channel, const Var& tap_tile, int lanes, const ConvSchedule& s) {
  partial.vectorize(channel, lanes);
  if (s.parallel == Parallel::None) return;
  // Tap tiles outermost: one fork per call, not one per group and partition.
  std::vector<VarOrRVar> order;
  for (const Var& v : partial.args())
    if (v.name() != tap_tile.name()) order.push_back(v);
  order.push_back(tap_tile);
  partial.reorder(order).parallel(tap_tile);
}

// dW leaves the tiles' order (output channels innermost) for ONNX's (taps innermost) in
// blocks of 8 channels x 8 taps: 8 vector loads along the channels, transposed in
// registers, 8 vector stores along the taps. Element by element, the loads strode
// through the partial sums a cache line apart and cost ~10% of a large layer (Zen 5
// AVX2, 1x1 1024->2048/2 at 7x7: 1.3 ms of 17; 0.34 ms blocked). The taps run along C/g
// for 1x1 kernels, along the kernel window (kh*kw >= 8) otherwise; windows of 2-7
// taps keep the element-wise copy.
void schedule_dw_transpose(const ConvDescriptor& d, Func dw, Func dw_block, bool parallel, Why* why) {
  constexpr int block = 8;
  const int window = int(d.kh * d.kw);
  if (d.ocg() < block || (window == 1 ? d.icg() < block : window < block)) return;
  Var sv = dw.args()[0], rv = dw.args()[1], c = dw.args()[2], kout = dw.args()[3], grp = dw.args()[4];
  Var ko("ko"), ki("ki"), co("co"), ci("ci"), srv("srv");
  dw.split(kout, ko, ki, block, TailStrategy::ShiftInwards);
  if (window == 1) {
    dw.split(c, co, ci, block, TailStrategy::ShiftInwards)
        .reorder(sv, rv, ci, ki, co, ko, grp)
        .vectorize(ci)
        .unroll(ki);
    dw_block.compute_at(dw, co).vectorize(dw_block.args()[0]).unroll(dw_block.args()[3]);
  } else {
    dw.fuse(sv, rv, srv).reorder(srv, ki, c, ko, grp).vectorize(srv, block, TailStrategy::ShiftInwards).unroll(ki);
    dw_block.compute_at(dw, c).vectorize(dw_block.args()[0]).unroll(dw_block.args()[1]).unroll(dw_block.args()[2]);
  }
  // A copy: the threads split its blocks of output channels. On one thread it was a third
  // of a whole-batch 1x1 2048->1024 over 32 pixels (8 MiB dW; Zen 5 AVX-512, 2 threads).
  if (parallel) {
    Var blocks("ko_grp");  // every group's channel blocks: one fork per call
    dw.fuse(ko, grp, blocks).parallel(blocks);
  }
  explain(why, fmt::format("dW transposed to ONNX order in blocks of {} channels x {} {}", block, block,
                           window == 1 ? "input channels" : "window taps"));
}

// The next reduction item's input rows and dY rows (and the ReLU mask's), prefetched
// while an item computes (item_prefetch.h). Items run bands inner, image blocks outer;
// the item after the last band of a block is the next block's first. Ranges have the
// length of a whole item and are clamped inside their buffers: a short last band
// prefetches some rows it does not need. `inner_loop` carries the prefetches and starts
// `inner_visits` times per item.
std::vector<ItemPrefetch> next_item_prefetch(const ConvDescriptor& d, int band_rows, int bands, int images_per_item,
                                             int partitions, int per_part, bool gemm_groups, const Func& partial,
                                             const std::string& inner_loop, int64_t inner_visits, Why* why) {
  const int P = int(d.oh()), Q = int(d.ow()), ih = int(d.ih), iw = int(d.iw), N = int(d.mb);
  const int ic = int(d.ic), oc = int(d.oc);
  // Loops of one iteration are not in the lowered kernel: their variable is 0 there.
  // Halide names a loop <func>.s<stage>.<var>, the Func's name made unique in the process.
  const std::string band_loop = partial.name() + ".s1.ri$x", block_loop = partial.name() + ".s1.ri$y",
                    part_loop = partial.name() + ".s1.part";
  auto loop_var = [](const std::string& name, int extent) { return extent > 1 ? item_loop_var(name) : Expr(0); };
  // One item per partition: the next item is another partition's, which another thread
  // may be computing. Groups run outside the items: every group would fetch all groups'
  // channels (the form with vectors across groups has no group loop).
  const std::string item_loop = bands > 1 ? band_loop : per_part > 1 ? block_loop : "";
  if (item_loop.empty() || (gemm_groups && d.g > 1)) return {};
  Expr band = loop_var(band_loop, bands);
  Expr blk = loop_var(part_loop, partitions) * per_part + loop_var(block_loop, per_part);
  Expr last_band = band == bands - 1;
  Expr next_band = select(last_band, 0, band + 1);
  Expr next_image = (blk + select(last_band, 1, 0)) * images_per_item;
  // Input rows an item of band_rows output rows reads, and the first of the next item's.
  const int span_rows = int(std::min<int64_t>(ih, d.band_input_rows(band_rows)));
  const int x_rows = bands == 1 ? ih * images_per_item : span_rows;
  Expr x_row = max(next_band * band_rows * int(d.sh) - int(d.pt), 0);
  const int dy_rows = bands == 1 ? P * images_per_item : band_rows;
  const ItemPrefetch::Range x = clamped_range("x", (next_image * ih + x_row) * (iw * ic), int64_t(x_rows) * iw * ic,
                                              int64_t(N) * ih * iw * ic);
  const ItemPrefetch::Range dy = clamped_range("dy", (next_image * P + next_band * band_rows) * (Q * oc),
                                               int64_t(dy_rows) * Q * oc, int64_t(N) * P * Q * oc);
  ItemPrefetch plan;
  plan.item_loop = item_loop;
  plan.inner_loop = inner_loop;
  plan.ranges = {x, dy};
  if (d.relu) plan.ranges.push_back({"y", dy.first, dy.elements});  // the ReLU mask: dY's shape
  spread_over_visits(plan, inner_visits);
  explain(why, fmt::format("the next item's input and dY rows prefetched, {} cache lines per tile row",
                           plan.lines_per_visit));
  return {plan};
}

struct GemmPartial {
  Func partial, band_sum;
  int mr, nr;
};

GemmPartial define_gemm_partial(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                const Func& dy_masked, const Func& x_source, Func x_band, Func x_staged, bool stage_x,
                                int mr, int nr, int band_rows, int bands, int images_per_item, int blocks,
                                int partitions, int per_part, Why* why) {
  const int vl = t.vector_floats;
  const int cg = int(d.icg()), kgn = int(d.ocg()), kw = int(d.kw), kh = int(d.kh);
  const int P = int(d.oh()), Q = int(d.ow()), N = int(d.mb);
  const int taps = cg * kw * kh;
  const int k_tiles = ceil_div(kgn, mr), t_tiles = ceil_div(taps, nr);
  const int item_pixels = band_rows * Q * images_per_item;
  const int block_tiles = std::clamp((s.nc > 0 ? s.nc : 256) / nr, 1, t_tiles);
  explain(why, fmt::format("gemm packing: dY per item as {}-channel slices of {} pixels; im2col panels of {} taps per "
                           "block of {} taps",
                           mr, item_pixels, nr, block_tiles * nr));

  Var ki("ki"), kt("kt"), ti("ti"), tt("tt"), ip("ip"), grp("grp"), band("band"), blk("blk"), part("part");
  // Item pixel ip -> (image, output row, column); pixels past the layer are zero in dY.
  Expr q = ip % Q, row = band * band_rows + (ip / Q) % band_rows, img = blk * images_per_item + ip / (Q * band_rows);
  Expr valid = row < P && img < N;
  Expr row_c = min(row, P - 1), img_c = min(img, N - 1);

  Func dy_pack("dy_pack");
  Expr k = kt * mr + ki;
  Expr dy_value = dy_masked(min(k, kgn - 1), grp, row_c * Q + q, img_c);
  Expr keep = valid;
  if (k_tiles * mr != kgn) keep = keep && k < kgn;
  dy_pack(ki, ip, kt, grp, band, blk) = select(keep, dy_value, 0.0f);

  Func x_panel("x_panel");
  // When NR divides C/g a tile's taps are NR consecutive channels of one kernel position,
  // and saying so (channel = tile base + ti) lets the packer copy them as one vector.
  const bool whole_channel_runs = cg % nr == 0;
  Expr tap = min(tt * nr + ti, taps - 1);  // padded taps compute sums that are dropped
  Expr tile_base = tt * nr;
  Expr c = whole_channel_runs ? tile_base % cg + ti : tap % cg;
  Expr sx = whole_channel_runs ? (tile_base / cg) % kw : (tap / cg) % kw;
  Expr ry = whole_channel_runs ? tile_base / (cg * kw) : tap / (cg * kw);
  Expr in_x = q * int(d.sw) + sx * int(d.dw) - int(d.pl);
  Expr in_y = row_c * int(d.sh) + ry * int(d.dh) - int(d.pt);
  x_panel(ti, ip, tt, grp, band, blk) = stage_x ? x_band(c, grp, in_x, in_y, img_c) : Func(x_source)(c, grp, in_x, in_y, img_c);

  Func band_sum("band_sum");
  RDom rp(0, item_pixels, "rp");
  band_sum(ki, kt, ti, tt, grp, band, blk) = 0.0f;
  band_sum(ki, kt, ti, tt, grp, band, blk) +=
      dy_pack(ki, rp, kt, grp, band, blk) * x_panel(ti, rp, tt, grp, band, blk);

  Func partial("partial");
  RDom ri(0, bands, 0, per_part, "ri");
  if (blocks % partitions != 0) ri.where(part * per_part + ri.y < blocks);
  partial(ki, kt, ti, tt, grp, part) = 0.0f;
  partial(ki, kt, ti, tt, grp, part) += band_sum(ki, kt, ti, tt, grp, ri.x, part * per_part + ri.y);

  // Loops, innermost first: MR x NR tile, tap tiles of a block, channel tiles, tap blocks,
  // items (bands, then image blocks), groups, partitions.
  partial.bound(ki, 0, mr).bound(kt, 0, k_tiles).bound(ti, 0, nr).bound(tt, 0, t_tiles).compute_root();
  Var tb("tb"), tti("tti"), kio("kio"), kii("kii");
  Stage acc = partial.update();
  acc.split(tt, tb, tti, block_tiles, TailStrategy::GuardWithIf);
  acc.reorder(ki, ti, tti, kt, tb, ri.x, ri.y, grp, part);
  acc.split(ki, kio, kii, std::min(vl, mr), TailStrategy::GuardWithIf).vectorize(kii).unroll(kio).unroll(ti);
  parallelise(acc, part, kt, partitions, s, "tap block", why);
  zero_fill(partial, ki, tt, std::min(vl, mr), s);
  // The register tile: accumulators stay in registers over the item's pixels.
  band_sum.compute_at(partial, tti);
  band_sum.split(ki, kio, kii, std::min(vl, mr), TailStrategy::RoundUp).vectorize(kii).unroll(kio).unroll(ti);
  band_sum.update()
      .split(ki, kio, kii, std::min(vl, mr), TailStrategy::GuardWithIf)
      .reorder(kii, kio, ti, rp)
      .vectorize(kii)
      .unroll(kio)
      .unroll(ti);
  // Packing.
  dy_pack.compute_at(partial, ri.x).vectorize(ki, std::min(vl, mr), TailStrategy::RoundUp);
  x_panel.compute_at(partial, tb);
  // Pixels outside the block's tap tiles: the copy reads X in memory order (a pixel's
  // channels, then the next pixel), where tap tiles outermost read a few floats of every
  // pixel's row per pass, an access pattern the hardware prefetcher does not follow (1x1
  // 256->64 at 56x56, Intel Xeon: 66 vs 85 GF/s without item prefetch, +5% with).
  x_panel.reorder(ti, tt, ip);
  if (whole_channel_runs && nr >= 4) {
    x_panel.vectorize(ti);
  } else {
    x_panel.unroll(ti);
  }
  if (stage_x) x_staged.compute_at(partial, ri.x);
  return {partial, band_sum, mr, nr};
}

// db: the same dY sums as dW's, per channel, images outer and pixels inner.
void define_bias_gradient(const ConvDescriptor& d, int vl, const Func& dy_masked, BackwardWeightsPipeline* p) {
  if (!d.bias) return;
  const int kgn = int(d.ocg());
  Var k("k"), grp("grp");
  Func db_sum("db_sum");
  RDom rp(0, int(d.oh() * d.ow()), 0, int(d.mb), "rp");
  db_sum(k, grp) = 0.0f;
  db_sum(k, grp) += dy_masked(k, grp, rp.x, rp.y);
  p->db = Func("db");
  p->db(k) = db_sum(k % kgn, k / kgn);
  db_sum.compute_root().update().reorder(k, rp.x, rp.y, grp);
  if (kgn >= vl) db_sum.update().vectorize(k, vl, TailStrategy::GuardWithIf);
}

// Every extent and stride a constant; y only when the kernel reads it.
void pin_buffers(const ConvDescriptor& d, BackwardWeightsPipeline& p) {
  const auto extents = forward_buffer_extents(d);
  pin_dense([&](int i) { return p.x.dim(i); }, extents[0]);
  pin_dense([&](int i) { return p.dy.dim(i); }, extents[3]);
  if (d.relu) pin_dense([&](int i) { return p.y.dim(i); }, extents[3]);
  pin_dense([&](int i) { return p.dw.output_buffer().dim(i); }, extents[1]);
  if (d.bias) pin_dense([&](int i) { return p.db.output_buffer().dim(i); }, extents[2]);
}

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
  if (!inference_only_flags(d).empty())
    throw Error(ExitCode::Usage, fmt::format("{}: the backward passes know bias and ReLU alone, not {}", d.normalised(),
                                             inference_only_flags(d)));
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
  // Vectors along the input channels: unpadded 1x1 layers only (input_lane_weights_apply);
  // elsewhere the GEMM with vectors along the output channels, oneDNN-style.
  const std::string input_lane_refusal =
      s.strategy == Strategy::GemmInputLanes ? input_lane_weights_refusal(d, t) : std::string();
  const bool input_lanes = s.strategy == Strategy::GemmInputLanes && input_lane_refusal.empty();
  if (s.strategy == Strategy::GemmInputLanes && !input_lanes)
    explain(why, fmt::format("gemm_input_lanes refused: {}; using gemm", input_lane_refusal));
  // dY with the forward's ReLU mask: one definition, inlined where each form packs dY
  // and in the db sum.
  Func dy_masked("dy_masked");
  {
    Var k("k"), grp("grp"), pix("pix"), n("n");
    Expr value = p.dy(k, grp, pix, n);
    if (d.relu) value = select(p.y(k, grp, pix, n) > 0.0f, value, 0.0f);
    dy_masked(k, grp, pix, n) = value;
  }
  if (input_lanes) {
    p.dw = define_input_lane_weights(d, s, t, p.x, dy_masked, why, &p.prefetches);
    define_bias_gradient(d, vl, dy_masked, &p);
    pin_buffers(d, p);
    return p;
  }
  const Strategy strategy = s.strategy == Strategy::GemmInputLanes ? Strategy::Gemm : s.strategy;
  // GEMM vectors along a group's output channels; otherwise along all channels (the
  // depthwise form: a tile spans groups, each lane reads its own group's input).
  const bool gemm = strategy == Strategy::Gemm && kgn >= vl;
  if (strategy == Strategy::Gemm && !gemm)
    explain(why, fmt::format("gemm refused: {} output channels per group fill no vector; vectors run across groups",
                             kgn));
  const int chan_extent = gemm ? kgn : int(d.oc);
  const int mr = std::max(1, std::min(s.mr, ceil_div(chan_extent, vl) * vl));
  const int nr = std::max(1, std::min(s.nr, taps));
  // Reduction blocking: an item is about kc output pixels -- a band of whole rows of one
  // image, or several whole images when an image has fewer than kc pixels (0: one image).
  // Bands are balanced and image blocks divide the minibatch: a ragged last item would
  // compute its missing pixels as zeros (8 images in blocks of 5 wasted 20%).
  const int wanted_rows = s.kc > 0 ? std::clamp(ceil_div(s.kc, Q), 1, P) : P;
  const int band_rows = ceil_div(P, ceil_div(P, wanted_rows));
  const int bands = ceil_div(P, band_rows);
  int images_per_item = (s.kc > 0 && bands == 1) ? std::clamp(s.kc / (P * Q), 1, N) : 1;
  while (N % images_per_item != 0) --images_per_item;
  const int blocks = ceil_div(N, images_per_item);
  // Partitions split the image blocks into contiguous ranges.
  const int partitions = std::clamp(s.partitions, 1, blocks);
  const int per_part = ceil_div(blocks, partitions);
  explain(why, fmt::format("backward-weights: {} tile {} channels x {} taps (of {}); items of {} row(s) x {} image(s), "
                           "{} x {} items in {} partition(s), combined in index order",
                           gemm ? "gemm" : "across-groups", mr, nr, taps, band_rows, images_per_item, bands, blocks,
                           partitions));

  Var k("k"), tap("tap"), grp("grp"), band("band"), blk("blk"), part("part"), n("n"), c("c"), xx("xx"), yy("yy"),
      pix("pix");
  Var sv("s"), rv("r"), kout("kout");

  // pack_input=panel: BLIS-style packed dY slices and im2col panels (define_gemm_partial);
  // otherwise the tile loads read the (staged, padded) input rows and dY band directly.
  const bool packed_panels = gemm && s.pack_input == PackInput::Panel;
  // Zero-padded input; the broken test kernel treats the row past the bottom as real.
  const bool padded = d.pt || d.pb || d.pl || d.pr || options.inject_padding_bug;
  const int last_row = options.inject_padding_bug ? ih : ih - 1;
  Func x_band("x_band");
  // With fewer input channels than lanes (first layers, C = 3) the rows are staged flat,
  // (column, channel) as one index: a dense vector copy with the zero fill at the
  // borders, where staging per pixel was a scalar select per float that cost about what
  // the tile's FMAs did (Zen 5 AVX-512, 3x3 3->32 stride 2: 0.49x oneDNN). x_band is
  // then a view of x_rows.
  const bool in_place = weights_read_in_place(s);
  const bool flat_rows = padded && gemm && d.g == 1 && cg < vl && !in_place;
  Func x_rows("x_rows");
  Var cx("cx");
  // Tap tiles round the taps up past C/g*R*S, and x_band is asked those channels (their
  // rows of dW are dropped): they read the last real channel, so the band's last vector
  // of the last pixel stays inside x (it read up to a vector past its end, found with
  // faulting pages around the sweeps' inputs).
  const Expr channel_in_x = min(c, cg - 1);
  if (flat_rows) {
    // Zeros under the whole row: tap tiles past C/g*R*S read past the padding columns.
    RDom rc = define_flat_padded_rows(x_rows, cx, yy, n, p.x, cg, iw, ih, last_row, FlatRowZeros::WholeRow);
    x_rows.vectorize(cx, vl, TailStrategy::ShiftInwards);
    x_rows.update().vectorize(rc.x, vl, TailStrategy::GuardWithIf);
    x_band(c, grp, xx, yy, n) = x_rows(c + xx * cg, yy, n);
    explain(why, "input rows staged (column, channel) flat: the real columns copied densely over zeros");
  } else if (padded) {
    // Read in place, the padding test is a `likely` interior: border pixels and rows split off.
    x_band(c, grp, xx, yy, n) = zero_padded_read(p.x, channel_in_x, grp, xx, yy, n, iw, ih, last_row, in_place);
    if (in_place) explain(why, "input read in place: border pixels and rows split off, no padded copy");
  } else {
    x_band(c, grp, xx, yy, n) = p.x(channel_in_x, grp, xx, yy, n);
  }
  // The Func that is staged per reduction item when padded: x_band, or x_rows behind it.
  Func x_staged = flat_rows ? x_rows : x_band;


  Func dw("dw"), dw_block("dw_block");
  Expr tap_of = c + cg * (sv + kw * rv);
  // dw in ONNX layout: the partitions of `partial_at(i)` added in index order. The sums
  // run along output channels (the tiles' vectors) and dW along taps, so dw is a
  // transpose of dw_block (schedule_dw_transpose).
  auto sum_partitions = [&](const std::function<Expr(int)>& partial_at) {
    Expr sum = partial_at(0);
    for (int i = 1; i < partitions; ++i) sum += partial_at(i);
    dw_block(kout, sv, rv, c, grp) = sum;
    dw(sv, rv, c, kout, grp) = dw_block(kout, sv, rv, c, grp);
  };
  if (packed_panels) {
    GemmPartial gp = define_gemm_partial(d, s, t, dy_masked, p.x, x_band, x_staged, padded, mr, nr, band_rows, bands,
                                         images_per_item, blocks, partitions, per_part, why);
    sum_partitions([&](int i) { return gp.partial(kout % mr, kout / mr, tap_of % nr, tap_of / nr, grp, i); });
    // The prefetches ride on the item's pixel loop, which an item of one pixel lacks.
    if (band_rows * Q * images_per_item > 1)
      p.prefetches = next_item_prefetch(d, band_rows, bands, images_per_item, partitions, per_part, true, gp.partial,
                                        gp.band_sum.name() + ".s1.rp$x",
                                        int64_t(ceil_div(kgn, mr)) * ceil_div(taps, nr), why);
  } else {
    // The micro-kernel: one item's sum for one output channel and tap.
    RDom rb(0, Q, 0, band_rows, 0, images_per_item, "rb");
    Expr img = blk * images_per_item + rb.z;
    Expr row = band * band_rows + rb.y;
    if (P % band_rows != 0) rb.where(row < P);
    if (N % images_per_item != 0) rb.where(img < N);
    // Taps in tiles of NR: tap = tt*NR + ti. When NR divides C/g a tile's taps share one
    // kernel position, so the item's pixels whose tap lands on padding can be left out
    // of the whole tile: a bound on the pixel loops, not a test per pixel (5x5 pad 2 on
    // 8x8 images: 28% of the nominal taps are padding).
    Var ti("ti"), tt("tt");
    const int t_tiles = ceil_div(taps, nr);
    const bool tile_shares_position = cg % nr == 0;
    Expr tap_c = min(tt * nr + ti, taps - 1);  // padded taps compute sums that are dropped
    Expr base = tt * nr;
    // (tt % (C/NR)) * NR, not (tt * NR) % C: the same channel, but bounds inference then
    // sees C channels, not C + NR - 1, so x_band's pixels stay C floats apart and are
    // staged with aligned vectors (5x5/3 16->24: a 23-float pixel staged by gathers).
    Expr tc = tile_shares_position ? (tt % (cg / nr)) * nr + ti : tap_c % cg;
    Expr ts = tile_shares_position ? (base / cg) % kw : (tap_c / cg) % kw;
    Expr tr = tile_shares_position ? base / (cg * kw) : tap_c / (cg * kw);
    Expr in_x = rb.x * int(d.sw) + ts * int(d.dw) - int(d.pl);
    Expr in_y = row * int(d.sh) + tr * int(d.dh) - int(d.pt);
    if (tile_shares_position && padded && !in_place) {
      rb.where(in_x >= 0 && in_x < iw && in_y >= 0 && in_y <= last_row);
      explain(why, "pixels whose tap lands on padding left out of each tap tile's reduction");
    }
    // Channel coordinates: (k, ti, tt, grp) for GEMM; (k, ti, tt) with k across groups.
    auto chan = [&](Expr kk, Expr t_in, Expr t_tile, Expr gg, std::vector<Expr> rest) {
      std::vector<Expr> a = gemm ? std::vector<Expr>{kk, t_in, t_tile, gg} : std::vector<Expr>{kk, t_in, t_tile};
      a.insert(a.end(), rest.begin(), rest.end());
      return a;
    };
    // dY of one item, packed once per item: masked by the forward's ReLU, and zero-filled
    // past the last channel so every channel tile is a whole MR (ragged vector tiles
    // inside the unrolled tile mis-compiled under Halide 14).
    const int chan_padded = ceil_div(chan_extent, mr) * mr;
    Func dy_band("dy_band");
    {
      Expr kk = gemm ? Expr(k) : k % kgn, gg = gemm ? Expr(grp) : min(k, chan_extent - 1) / kgn;
      Expr value = dy_masked(min(kk, kgn - 1), gg, pix, n);
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
    Func band_sum("band_sum"), partial("partial");
    band_sum(chan(k, ti, tt, grp, {band, blk})) = 0.0f;
    band_sum(chan(k, ti, tt, grp, {band, blk})) +=
        dy_at(k, grp, row * Q + rb.x, img) * x_band(tc, g_of, in_x, in_y, img);

    // Items in index order: image blocks of the partition outer, bands inner.
    RDom ri(0, bands, 0, per_part, "ri");
    if (blocks % partitions != 0) ri.where(part * per_part + ri.y < blocks);
    partial(chan(k, ti, tt, grp, {part})) = 0.0f;
    partial(chan(k, ti, tt, grp, {part})) += band_sum(chan(k, ti, tt, grp, {ri.x, part * per_part + ri.y}));

    Expr lane = gemm ? Expr(kout) : grp * kgn + kout;
    // The prefetches ride on the pixel-column loop, which a 1-pixel-wide output lacks.
    if (Q > 1)
      p.prefetches = next_item_prefetch(d, band_rows, bands, images_per_item, partitions, per_part, gemm, partial,
                                        band_sum.name() + ".s1.rb$x",
                                        int64_t(chan_padded / mr) * t_tiles * band_rows * images_per_item, why);
    sum_partitions([&](int i) { return partial(chan(lane, tap_of % nr, tap_of / nr, grp, {i})); });

    // ---- schedule -----------------------------------------------------------------
    Var k_tile("k_tile"), k_in("k_in"), ko("ko"), ki("ki");
    Stage acc = partial.update();
    partial.bound(k, 0, chan_padded).bound(ti, 0, nr).bound(tt, 0, t_tiles);
    // Exact: partial is bounded to whole tiles, so these guards fold away.
    acc.split(k, k_tile, k_in, mr, TailStrategy::GuardWithIf);
    if (gemm) {
      acc.reorder(k_in, ti, tt, k_tile, ri.x, ri.y, grp, part);
    } else {
      acc.reorder(k_in, ti, tt, k_tile, ri.x, ri.y, part);
    }
    acc.vectorize(k_in, std::min(vl, mr), TailStrategy::GuardWithIf).unroll(k_in).unroll(ti);
    partial.compute_root();
    parallelise(acc, part, k_tile, partitions, s, "reduction item", why);
    zero_fill(partial, k, tt, std::min(vl, mr), s);
    // Register tile: accumulators live in registers over the band's pixels.
    band_sum.compute_at(partial, tt);
    Stage bs = band_sum.update();
    band_sum.split(k, ko, ki, std::min(vl, mr), TailStrategy::RoundUp).vectorize(ki).unroll(ko).unroll(ti);
    bs.split(k, ko, ki, std::min(vl, mr), TailStrategy::GuardWithIf);
    bs.reorder(ki, ko, ti, rb.x, rb.y, rb.z).vectorize(ki).unroll(ko).unroll(ti);
    // Packing: the band's padded input rows once per item; dY masked once per item.
    LoopLevel item_level(partial, ri.x);
    if (padded && !in_place) {
      x_staged.compute_at(item_level);  // x_rows is vectorised where it is defined
      if (cg >= vl) {
        x_band.vectorize(c, vl, TailStrategy::ShiftInwards);
      } else if (!gemm && d.ic >= vl) {
        Var cgf("cgf");
        x_band.fuse(c, grp, cgf).vectorize(cgf, vl, TailStrategy::ShiftInwards);
      }
      explain(why, "input packed per reduction item into a zero-padded row band");
    }
    // dY is read where it lies when there is nothing to mask or fill: the copy would hold
    // the same layout, and LLVM turns it into a memcpy that streams the item from memory
    // before any FMA runs (Zen 5 AVX-512, 3x3/2 3->32 at 224: a third of the time).
    if (!d.relu && chan_padded == chan_extent) {
      explain(why, "dY read in place");
    } else {
      dy_band.compute_at(item_level).bound(k, 0, chan_padded).vectorize(k, std::min(vl, mr), TailStrategy::RoundUp);
      explain(why, d.relu ? "dY packed per reduction item, masked by the forward's ReLU" : "dY packed per reduction item");
    }

  }
  p.dw = dw;

  define_bias_gradient(d, vl, dy_masked, &p);
  dw.compute_root();
  if (gemm) schedule_dw_transpose(d, dw, dw_block, s.parallel != Parallel::None, why);
  pin_buffers(d, p);
  return p;
}

}  // namespace convgen
