// The three pieces that turn a ConvSchedule into a Halide schedule, BLIS-style. Each
// has one job and a contract; build_forward (generator/conv/target.cpp) calls them in order.
//
// 1. apply_loop_nest   shapes output's loops, outer to inner:
//        n, [g], cache blocks (pix_block/k_block in loop_order), pix_tile, k_tile,
//        then the tile body pix_inner (NR, unrolled) x k_inner (MR, vectorised).
//    Pixels are flattened p*Q+q per image, so a tile never wastes work on row ends.
//    It decides every tail strategy from the constant extents and clamps MR/NR to them.
// 2. apply_packing     places in_padded (zero padding filled by the packer) and
//        weights_packed at the levels LoopNest names; never a buffer scaling with R*S.
// 3. apply_microkernel places accum: at the register tile when the whole reduction
//        runs in one go, or at the cache block with the KC reduction loop outside
//        the tiles when kc splits the input channels.
#pragma once

#include <string>
#include <vector>

#include <Halide.h>

#include "generator/conv/algorithm.h"
#include "generator/conv/item_prefetch.h"
#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/kernel_plan.h"

namespace convgen {

struct LoopNest {
  Halide::Var chan{"chan"};          // the output-channel loop (kg for GEMM, fused k for depthwise)
  Halide::Var pix{"opix"};           // flattened output pixel
  Halide::Var k_block{"k_block"}, pix_block{"pix_block"};
  Halide::Var k_tile{"k_tile"}, pix_tile{"pix_tile"};
  Halide::Var k_inner{"k_inner"}, pix_inner{"pix_inner"};
  Halide::Var row_tile{"row_tile"};  // tile within an output row (skips_padded_columns)
  int mr = 8, nr = 1;                // effective register tile
  int kc = 0;                        // effective reduction block (0 = none)
  bool has_k_block = false, has_pix_block = false;
  // The pixel-tile loop: `pix_loop_extent` iterations per image, each one register tile
  // of pixels, or one output row of tiles when `tiles_in_rows`; a pixel block (when
  // has_pix_block) takes `block_tiles` of them.
  int pix_loop_extent = 0, block_tiles = 0;
  bool tiles_in_rows = false;
  int k_tiles = 0;  // channel tiles per image (and group)
  Halide::LoopLevel image_level;     // once per image (and group for depthwise: all groups)
  Halide::LoopLevel block_level;     // innermost cache-block loop (or the image when unblocked)
  Halide::LoopLevel rows_level;      // where a row band of the input is packed
  Halide::LoopLevel tile_level;      // innermost register-tile loop
  Halide::LoopLevel pix_tile_level;  // the pixel-tile loop (outside the channel tiles)
  bool k_blocks_outermost = false;   // channel blocks outside the images (channels_outer)
  Halide::LoopLevel k_block_level;   // that channel-block loop, when k_blocks_outermost
};

using Why = std::vector<std::string>;

LoopNest apply_loop_nest(ConvAlgorithm& a, const ConvDescriptor& d, const ConvSchedule& s,
                         const TargetInfo& t, Why* why);
void apply_packing(ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d,
                   const ConvSchedule& s, const TargetInfo& t, Why* why);
void apply_microkernel(ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d,
                       const ConvSchedule& s, const TargetInfo& t, Why* why);
// After the three: the next row band's input lines prefetched while a band computes
// (item_prefetch.h), where input rows are staged per pixel block in bands L1 holds;
// else empty.
std::vector<ItemPrefetch> next_band_prefetch(const ConvAlgorithm& a, const LoopNest& nest, const ConvDescriptor& d,
                                             const ConvSchedule& s, const TargetInfo& t, Why* why);

// Appends a line to `why` when it is non-null.
void explain(Why* why, const std::string& line);

}  // namespace convgen
