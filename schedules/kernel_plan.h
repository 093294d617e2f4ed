// What a schedule implies for the shape of the forward kernel: facts derived from the
// descriptor, the schedule and the target that the generator builds by and the analytic
// defaults choose by (so a default can ask what the kernel will do). No Halide here.
#pragma once

#include <string>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

// Output pixels per register tile: the schedule's NR, clamped to the image. The loop
// nest tiles by it and the algorithm's padded-row test groups pixels by it.
int register_tile_pixels(const ConvDescriptor& d, const ConvSchedule& s);

// GEMM register tiles start at multiples of NR (the pixel split is exact whenever NR
// divides the output width). When it does and NR > 1, a tile never straddles two rows,
// so the algorithm states its pixels' columns as the tile's first column plus the
// pixel's place in the tile: one base and constant offsets per tile, where pix % Q per
// pixel kept one address register per pixel (generator/conv/algorithm.cpp). Returns that
// NR, or 0 when tiles may straddle rows. Tiles inside rows of their own (skips padded
// columns, partitioned depthwise borders) are not this case.
int row_aligned_tile(const ConvDescriptor& d, const ConvSchedule& s);

// Input channels per reduction block actually used: 0 when the schedule's kc covers
// all of C/g (the whole reduction runs per register tile).
int reduction_block(const ConvDescriptor& d, const ConvSchedule& s);

// True when the schedule stages the per-tile im2col panel (GEMM with pack_input=panel).
bool stages_tap_panel(const ConvSchedule& s);

// True when the micro-kernel walks a kernel row's (s, c) taps as one contiguous loop:
// GEMM, whole reduction per tile, few channels per group, dilation 1 along the row.
bool fuses_kernel_row_taps(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// True when the kernel leaves out, per pixel, the kernel-column taps that fall on
// left/right padding: GEMM with the whole reduction per register tile, no fused
// kernel-row loop, row tiles that pay (row_tiles_pay, conv_schedule.h) and no pixel
// blocks. Staged outputs (strided backward-data classes) never do.
bool skips_padded_columns(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// True when the schedule stages the padded input per image or row band and a pixel has
// fewer channels than a vector in one group (first layers): the staged rows are then
// (column, channel) flat, copied densely (define_flat_padded_rows, generator/conv).
bool stages_flat_input_rows(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// Unpacked input read in place with the padding test a `likely` interior: register tiles
// lie in output rows, so the border tiles and rows are split off and the interior's loads
// carry no select (generator/conv/algorithm.cpp). Depthwise (at most 49 taps, unrolled),
// and GEMM over few channels on padded input (the kernel-row loop of
// fuses_kernel_row_taps, whose taps, at most 49, are unrolled instead). Pixel blocks (nc)
// do not apply: there is no packed band to keep in cache. A staged output (a strided
// backward-data residue class) never does: its tiles are the class's.
bool partitions_padding_borders(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                bool output_staged);

// Strided backward-data of a depthwise layer (one input and one output channel per
// group) with unpacked input computes dX pixel by pixel in place instead of per residue
// class (generator/conv/backward_data_depthwise.cpp): its rows and columns must hold
// whole periods of the strides, and the window at most 49 taps (unrolled).
bool computes_depthwise_dx_in_place(const ConvDescriptor& d, const ConvSchedule& s);
// Its register tile: NR rounded down to a multiple of sw that divides the row, and MR in
// whole vectors of at most the channels (one vector when there are fewer).
int depthwise_dx_row_tile(const ConvDescriptor& d, const ConvSchedule& s);
int depthwise_dx_channel_tile(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// Backward-weights with unpacked input (GEMM or across groups) reads the input where it
// lies; the padding test is a `likely` interior as above (generator/conv/backward_weights.cpp).
// (dY is read in place by every direct-tile form when nothing masks or fills it.)
bool weights_read_in_place(const ConvSchedule& s);

// Backward-weights with vectors along the input channels (Strategy::GemmInputLanes) runs
// on an unpadded 1x1 layer whose groups hold at least a vector of input channels: dW's
// taps are then its input channels, so the tile's vectors are rows of ONNX's dW and are
// stored where they belong, with no transpose (generator/conv/backward_weights_input_lanes.cpp).
bool input_lane_weights_apply(const ConvDescriptor& d, const TargetInfo& t);
// Why it cannot, or "" when it can; input_lane_window is the target-independent part
// (a 1x1 window with no padding).
std::string input_lane_weights_refusal(const ConvDescriptor& d, const TargetInfo& t);
bool input_lane_window(const ConvDescriptor& d);
// Its reduction items: kc output pixels counted across images (0 or >= N*P*Q: one item
// of every pixel), balanced, so the last item is short by less than the item count.
int64_t input_lane_item_pixels(const ConvDescriptor& d, const ConvSchedule& s);

// Streaming output stores (OutputStores::Streaming) are compiled into forward-type kernels
// (the forward pass, backward-data). Backward-weights, whose dW is small and summed over
// the reduction items, keeps ordinary stores whatever the field says.
bool streams_output(const std::string& pass, const ConvSchedule& s);
// Bytes a pass writes per call: Y for the forward pass, dX for backward-data, dW (and
// dB) for backward-weights.
int64_t pass_output_bytes(const ConvDescriptor& d, const std::string& pass);

}  // namespace convgen
