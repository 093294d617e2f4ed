// ONNX Resize (and Upsample) over the spatial axes of an (N, C, [H,] W) tensor in either
// layout: nearest, linear and cubic interpolation, each output element a fixed sum of
// at most 4 x 4 taps of the input, and the backward pass that scatters dY through the
// same taps. Coordinates follow ONNX's definitions (docs/model-import.md, "Resize").
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/ops/tensor.h"

namespace convgen::ops {

enum class ResizeMode { Nearest, Linear, Cubic };
// coordinate_transformation_mode: how an output coordinate maps to an input one.
enum class ResizeCoordinates { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn };
// nearest_mode: how a fractional input coordinate rounds.
enum class NearestRounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct ResizeSpec {
  ResizeMode mode = ResizeMode::Nearest;
  ResizeCoordinates coordinates = ResizeCoordinates::HalfPixel;
  NearestRounding nearest = NearestRounding::RoundPreferFloor;
  float cubic_a = -0.75f;
  bool exclude_outside = false;
  // Per spatial axis (rows first): the scale output / input that the coordinate
  // transformations divide by (ONNX's `scales`, or output size / input size);
  // align_corners takes input size * scale as the resized length.
  std::vector<float> scales;
};

// One spatial axis: for each output index, `taps` input indices (clamped into the input)
// and their weights.
struct AxisTaps {
  int taps = 1;
  std::vector<int64_t> index;   // [output][taps]
  std::vector<float> weight;    // [output][taps]
};
AxisTaps resize_taps(int64_t in, int64_t out, float scale, const ResizeSpec& r);

// y's shape is x's with the spatial extents resized; any layout for either.
void resize(const ConstView& x, const ResizeSpec& r, const View& y);
// dx (x's shape) = or += the taps' transpose applied to dy.
void resize_backward(const ConstView& dy, const ResizeSpec& r, const View& dx, bool accumulate);

}  // namespace convgen::ops
