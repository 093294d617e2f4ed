// Weights packed once, outside the kernel: the GEMM micro-kernel's weight panels as data.
//
// A GEMM kernel reads its weights as panels (generator/conv/packing.cpp): per group and
// block of MR output channels, [r][s][c][kk] with MR channels contiguous per reduction
// step, zero past the layer's channels. Packed inside every call, that copy costs as
// much as the multiply on small images (a 3x3 256-channel layer on 2x2 images re-packs
// 2.4 MB for 4 output pixels per sample). A GEMM kernel scheduled with
// pack_weights=prepacked reads the panels below from a buffer the caller filled with
// pack_weight_panels once per change of the weights.
//
// Contract: the layout is a function of (descriptor, schedule, target) only, and the
// generator builds its prepacked kernels from these same panels, so a packed buffer and
// the kernel agree by construction. Packing copies floats: the kernel computes the same
// bits from it as from the ONNX weights it would pack itself.
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

// One panel: packed[offset + kk + mr*(c + channels*(s + taps_w*(r + taps_h*(kb + blocks*g))))]
// = W[base + g*g_stride + o*o_stride + c*c_stride + s*s_stride + r*r_stride] with
// o = kb*mr + kk when o < outputs, else 0. W is the layer's ONNX OIHW weights.
struct WeightPanel {
  int64_t offset = 0;
  int mr = 0;            // output channels per block, contiguous
  int channels = 0;      // reduction channels per group
  int taps_w = 0, taps_h = 0;
  int blocks = 0;        // ceil(outputs / mr)
  int groups = 0;
  int outputs = 0;       // output channels per group
  int64_t base = 0, g_stride = 0, o_stride = 0, c_stride = 0, s_stride = 0, r_stride = 0;

  int64_t floats() const { return int64_t(mr) * channels * taps_w * taps_h * blocks * groups; }
};

// The panels of one kernel, back to back. Empty: the kernel takes ONNX OIHW weights
// (pack_weights=per_call, or not GEMM: depthwise and grouped kernels read their small
// weights in place).
struct WeightPanels {
  std::vector<WeightPanel> panels;
  int64_t floats = 0;
  bool empty() const { return panels.empty(); }
};

// Output channels per packed block of a GEMM forward kernel: the schedule's MR, clamped
// to the group's channels rounded up to whole vectors.
int gemm_weight_block(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// The forward kernel's panels: one for a prepacked GEMM schedule, else none.
WeightPanels forward_weight_panels(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// The backward-data kernel's panels: one per residue class with taps
// (schedules/backward_data_classes.h), each its derived forward convolution's, the
// weights channel-transposed and flipped; none unless the schedule is prepacked GEMM.
WeightPanels backward_data_weight_panels(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// Fills packed[0, panels.floats) from the ONNX weights. Blocks [block_begin, block_end)
// of the flat (panel, group, block) sequence only, so callers can split the work;
// packed_blocks(panels) is its length.
int64_t packed_blocks(const WeightPanels& panels);
void pack_weight_panels(const WeightPanels& panels, const float* oihw, float* packed, int64_t block_begin,
                        int64_t block_end);
inline void pack_weight_panels(const WeightPanels& panels, const float* oihw, float* packed) {
  pack_weight_panels(panels, oihw, packed, 0, packed_blocks(panels));
}

}  // namespace convgen
