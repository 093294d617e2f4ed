#include <algorithm>

#include <fmt/format.h>

#include "generator/conv/schedule_pieces.h"

namespace convgen {

using namespace Halide;

void explain(Why* why, const std::string& line) {
  if (why) why->push_back(line);
}

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Iterations a parallel loop needs for 1, 2, 4, 8 or 16 threads to share it within 1/16.
constexpr int kMinParallelBlocks = 16;

// Tail strategy for splitting a pure output loop of constant extent by `factor`.
TailStrategy output_tail(int extent, int factor, bool may_recompute) {
  if (extent % factor == 0) return TailStrategy::RoundUp;  // exact: no tail at all
  if (may_recompute && extent >= factor) return TailStrategy::ShiftInwards;
  return TailStrategy::GuardWithIf;
}

}  // namespace

LoopNest apply_loop_nest(ConvAlgorithm& a, const ConvDescriptor& d, const ConvSchedule& s,
                         const TargetInfo& t, Why* why) {
  LoopNest nest;
  Func out = a.output;
  const bool gemm = a.strategy == Strategy::Gemm;
  const bool grouped = a.strategy == Strategy::Grouped;
  const int pq = static_cast<int>(d.oh() * d.ow());
  out.rename(a.pix, nest.pix);
  nest.nr = register_tile_pixels(d, s);
  if (nest.nr != s.nr) explain(why, fmt::format("nr {} clamped to the {} output pixels", s.nr, pq));
  // A staged output (computed inside a consumer) rounds its last tiles up instead: its
  // storage grows to whole tiles, and the extra pixels read clamped, in-bounds input.
  const bool staged = !a.may_shift_pixel_tail;
  int pix_tiles = ceil_div(pq, nest.nr);
  // Tiles within a row: pix_tile is the output row, row_tile the tile in it.
  const int q = static_cast<int>(d.ow());
  auto tile_within_rows = [&](bool may_shift) {
    Var cols("ocols");
    out.split(nest.pix, nest.pix_tile, cols, q, TailStrategy::RoundUp);
    out.split(cols, nest.row_tile, nest.pix_inner, nest.nr, output_tail(q, nest.nr, may_shift));
  };
  if (a.skips_padded_columns) {
    // The row's tiles unrolled, so that each tile's columns -- and so its taps on
    // padding -- are constants the micro-kernel's FMAs are pruned by.
    tile_within_rows(false);
    out.unroll(nest.row_tile);
    explain(why, fmt::format("tiles of {} pixels within a row, the row's {} tiles unrolled: taps on left/right padding "
                             "left out per pixel",
                             nest.nr, ceil_div(q, nest.nr)));
  } else if (a.partitions_borders) {
    // The row's tiles stay a loop: Halide partitions it (and the row loop) on the
    // `likely` interior of the padding test instead.
    nest.nr = std::min(nest.nr, q);
    tile_within_rows(true);
    pix_tiles = static_cast<int>(d.oh()) * ceil_div(q, nest.nr);
    explain(why, fmt::format("tiles of {} pixels within a row; border tiles and rows split off by Halide, the interior "
                             "reads the input with no padding test",
                             nest.nr));
  } else {
    out.split(nest.pix, nest.pix_tile, nest.pix_inner, nest.nr,
              staged ? TailStrategy::RoundUp : output_tail(pq, nest.nr, true));
  }

  int k_tiles = 0;          // channel tiles per image (and group, for GEMM)
  int tile_channels = 0;    // output channels one channel tile covers
  int k_inner_lanes = 0;    // vector width of the innermost output channel loop
  if (grouped) {
    // A tile covers the groups whose input channels fill one vector and kg_per_tile
    // output channels of each: kg_per_tile x NR accumulator vectors.
    const int cg = static_cast<int>(d.icg()), kgn = static_cast<int>(d.ocg()), groups = static_cast<int>(d.g);
    const int groups_per_tile = std::min(t.vector_floats / cg, groups);
    const int kg_per_tile = grouped_outputs_per_tile(d, s, t);
    nest.mr = kg_per_tile * groups_per_tile;
    Var kg_o("kg_o"), kg_i("kg_i"), g_o("g_o"), g_i("g_i");
    out.split(a.kg, kg_o, kg_i, kg_per_tile, output_tail(kgn, kg_per_tile, true));
    out.split(a.g, g_o, g_i, groups_per_tile, output_tail(groups, groups_per_tile, true));
    out.reorder(kg_i, g_i, nest.pix_inner, kg_o, g_o, nest.pix_tile);
    out.fuse(kg_o, g_o, nest.k_tile);
    k_tiles = ceil_div(kgn, kg_per_tile) * ceil_div(groups, groups_per_tile);
    tile_channels = nest.mr;
    if (kg_per_tile == kgn) {
      // The tile's outputs are contiguous (all of each group's channels): one vector
      // run across the groups' boundaries.
      out.fuse(kg_i, g_i, nest.k_inner);
      k_inner_lanes = std::min(t.vector_floats, nest.mr);
    } else {
      out.rename(kg_i, nest.k_inner).unroll(g_i);
      k_inner_lanes = std::min(t.vector_floats, kg_per_tile);
    }
    explain(why, fmt::format("grouped tile: {} group(s) of {} input channels per vector, {} of {} output channels each",
                             groups_per_tile, cg, kg_per_tile, kgn));
  } else {
    int chan_extent;
    if (gemm) {
      out.rename(a.kg, nest.chan);
      chan_extent = static_cast<int>(d.ocg());
    } else {
      out.fuse(a.kg, a.g, nest.chan);  // chan = g*(K/g) + kg: channel vectors span groups
      chan_extent = static_cast<int>(d.oc);
    }
    // Register tile. GEMM's MR is fixed by the weight blocking (zero-filled past K/g, so a
    // partial last tile is guarded); depthwise reads weights by k, so its MR may shrink.
    nest.mr = gemm ? a.mr : std::min(s.mr, std::max(1, chan_extent));
    // A depthwise tile of all the channels that is more than one vector but not whole
    // vectors crashed under Halide 14 (15 channels, mr 16, C/g = 2; found by the backward
    // sweep): take whole vectors and let the shifted last tile cover the rest.
    if (!gemm && nest.mr == chan_extent && nest.mr > t.vector_floats && nest.mr % t.vector_floats != 0)
      nest.mr = nest.mr / t.vector_floats * t.vector_floats;
    if (!gemm && nest.mr != s.mr) explain(why, fmt::format("mr {} clamped to {} for {} channels", s.mr, nest.mr, chan_extent));
    // GEMM's weight panel is zero-filled past K/g, so a staged GEMM output may round up.
    out.split(nest.chan, nest.k_tile, nest.k_inner, nest.mr,
              staged && gemm ? TailStrategy::RoundUp : output_tail(chan_extent, nest.mr, !gemm));
    k_tiles = ceil_div(chan_extent, nest.mr);
    tile_channels = nest.mr;
    k_inner_lanes = std::min(t.vector_floats, nest.mr);
  }

  // Cache blocks, in whole tiles. Their loops only order work, so guards there are cheap.
  // Threads over channel blocks need blocks: without MC, each register tile is one.
  const bool channels_parallel = s.parallel == Parallel::Channels;
  int mc_tiles = s.mc == 0 ? k_tiles : ceil_div(s.mc, tile_channels);
  if (channels_parallel && mc_tiles >= k_tiles) mc_tiles = 1;
  // Row-tiled depthwise reads the input in place: no row band to block for.
  int nc_tiles = (s.nc == 0 || a.partitions_borders) ? pix_tiles : ceil_div(s.nc, nest.nr);
  nest.has_k_block = mc_tiles < k_tiles;
  const bool channels_outer = s.loop_order == LoopOrder::ChannelsOuter || channels_parallel;
  // Threads over pixels fork once per image. With channel blocks outside the pixel loop
  // and no pixel blocks, the pixel loop forked once per channel block: a 14x14 depthwise
  // layer of 384 channels (24 blocks) ran at 14-23 GF/s instead of 111 (Zen 5 VM, a fork
  // costs 1-4 us). Many channel blocks are split instead; few get row bands outside them.
  nest.tiles_in_rows = a.skips_padded_columns || a.partitions_borders;
  const int pix_loop_extent = nest.tiles_in_rows ? static_cast<int>(d.oh()) : pix_tiles;
  bool parallel_k_blocks = false, row_bands = false;
  if (s.parallel == Parallel::Pixels && nest.has_k_block && !channels_outer && nc_tiles >= pix_tiles) {
    const int k_blocks = ceil_div(k_tiles, mc_tiles);
    if (k_blocks >= kMinParallelBlocks || pix_loop_extent < 2) {
      parallel_k_blocks = true;
    } else {
      nc_tiles = ceil_div(pix_loop_extent, std::min(pix_loop_extent, kMinParallelBlocks));
      row_bands = true;
      explain(why, fmt::format("{} channel blocks: the pixel loop in bands of {} {} for the threads", k_blocks, nc_tiles,
                               pix_loop_extent == pix_tiles ? "tiles" : "rows"));
    }
  }
  nest.has_pix_block = row_bands || nc_tiles < pix_tiles;
  nest.pix_loop_extent = pix_loop_extent;
  nest.block_tiles = std::min(nc_tiles, pix_loop_extent);
  nest.k_tiles = k_tiles;
  if (nest.has_k_block) out.split(nest.k_tile, nest.k_block, nest.k_tile, mc_tiles, TailStrategy::GuardWithIf);
  if (nest.has_pix_block) out.split(nest.pix_tile, nest.pix_block, nest.pix_tile, nc_tiles, TailStrategy::GuardWithIf);
  explain(why, fmt::format("register tile {} channels x {} pixels; cache block {} x {} tiles ({} x {} tiles in all)",
                           nest.mr, nest.nr, std::min(mc_tiles, k_tiles), std::min(nc_tiles, pix_tiles), k_tiles, pix_tiles));

  // Loop order, innermost first. Within a block the channel tiles run inside the pixel
  // tiles (BLIS's ir inside jr): the NR input pixels stay in L1 across channel tiles.
  //   pixels_outer:   n, [g], pix_block, k_block, tiles
  //   channels_outer: [g], k_block, n, pix_block, tiles -- a channel block's weights are
  //                   packed once and reused over every image of the call.
  std::vector<VarOrRVar> order = {nest.k_inner, nest.pix_inner, nest.k_tile};
  if (a.skips_padded_columns || a.partitions_borders) order.push_back(nest.row_tile);
  order.push_back(nest.pix_tile);
  std::vector<Var> blocks;  // innermost first
  if (!channels_outer && nest.has_k_block) blocks.push_back(nest.k_block);
  if (nest.has_pix_block) blocks.push_back(nest.pix_block);
  for (const Var& v : blocks) order.push_back(v);
  if (channels_outer) {
    order.push_back(a.n);
    if (nest.has_k_block) order.push_back(nest.k_block);
    if (gemm) order.push_back(a.g);
  } else {
    if (gemm) order.push_back(a.g);
    order.push_back(a.n);
  }
  out.reorder(order);

  if (k_inner_lanes > 1) out.vectorize(nest.k_inner, k_inner_lanes, TailStrategy::GuardWithIf);
  out.unroll(nest.k_inner).unroll(nest.pix_inner);

  nest.image_level = LoopLevel(out, a.n);
  nest.tile_level = LoopLevel(out, nest.k_tile);
  nest.pix_tile_level = LoopLevel(out, nest.pix_tile);
  if (!blocks.empty()) {
    nest.block_level = LoopLevel(out, blocks.front());
  } else {
    nest.block_level = (gemm && !channels_outer) ? LoopLevel(out, a.g) : LoopLevel(out, a.n);
  }
  nest.k_blocks_outermost = nest.has_k_block && channels_outer;
  if (nest.k_blocks_outermost) nest.k_block_level = LoopLevel(out, nest.k_block);
  nest.rows_level = nest.has_pix_block ? LoopLevel(out, nest.pix_block) : nest.image_level;

  // Threads split only non-reduction loops, so the result does not depend on them.
  if (channels_parallel) {
    if (!nest.k_blocks_outermost) {
      explain(why, "parallel over channel blocks refused: one register tile of channels; serial");
    } else if (gemm && d.g > 1) {
      // Every group's blocks in one parallel loop, not a fork per group.
      Var blocks_of_groups("k_blocks_of_groups");
      out.fuse(nest.k_block, a.g, blocks_of_groups).parallel(blocks_of_groups);
      nest.k_block_level = LoopLevel(out, blocks_of_groups);
      explain(why, "parallel over the channel blocks of every group (each thread packs its blocks' weights)");
    } else {
      out.parallel(nest.k_block);
      explain(why, "parallel over the channel blocks (each thread packs its blocks' weights)");
    }
  } else if (parallel_k_blocks) {
    out.parallel(nest.k_block);
    explain(why, "parallel over the channel blocks of each image, the pixel loops inside them");
  } else if (s.parallel == Parallel::Pixels) {
    out.parallel(nest.has_pix_block ? nest.pix_block : nest.pix_tile);
    explain(why, fmt::format("parallel over {} of each image", nest.has_pix_block ? "pixel blocks" : "pixel tiles"));
  } else if (s.parallel == Parallel::Images) {
    out.parallel(a.n);
    explain(why, "parallel over the images of the minibatch (each thread packs its own input)");
  }
  return nest;
}

}  // namespace convgen
