// Backward-data as forward convolutions: the residue decomposition (docs/backward.md).
//
// dX[i] = sum over taps k with i + pad - k*dil = o*stride, 0 <= o < out, of dY[o] * W[k].
// Input rows i of one residue a = i mod stride receive exactly the taps k with
// k*dil = a + pad (mod stride); those taps form an arithmetic progression (step
// stride/gcd(stride, dil)), and row a + stride*u reads dY row u + (a + pad - k*dil)/stride.
// So each residue class is a stride-1 correlation over dY with its own taps, dilation
// dil/gcd(stride, dil), flipped tap order and derived padding: a forward convolution the
// forward generator already knows how to make fast. Classes with no taps (possible when
// gcd(stride, dil) > 1) and class rows no output reaches are exact zeros.
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/conv_descriptor.h"

namespace convgen {

// One axis (rows or columns) of one residue class.
struct ResidueAxis {
  int64_t residue = 0;    // input indices residue, residue + stride, ...
  int64_t count = 0;      // how many (>= 1 for every class listed)
  int64_t taps = 0;       // kernel taps of the class (0: the class is all zeros)
  int64_t first_tap = 0;  // kernel index of the derived tap 0 (the largest of the class)
  int64_t tap_step = 1;   // kernel index decreases by this per derived tap
  int64_t dilation = 1;   // derived dilation: dil / gcd(stride, dil)
  int64_t shift = 0;      // derived input index 0 is dY index `shift`
  int64_t extent = 0;     // derived input extent (dY indices read); <= 0: all zeros
  int64_t pad_before = 0, pad_after = 0;

  bool zero() const { return taps == 0 || extent <= 0; }
};

// The classes of one axis, in residue order; residues with no input index are left out.
std::vector<ResidueAxis> residue_axes(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t dilation,
                                      int64_t pad_before);

struct ResidueClass {
  ResidueAxis rows, cols;
  // The forward convolution computing this class from dY: input channels = the layer's
  // output channels, output channels = its input channels, same groups, stride 1.
  // Meaningful only when !zero().
  ConvDescriptor derived;
  bool zero() const { return rows.zero() || cols.zero(); }
};

// Every (row, column) residue class of the layer, rows outer.
std::vector<ResidueClass> backward_data_classes(const ConvDescriptor& d);

// True when one class covers every input pixel (stride 1): its forward kernel writes dX
// directly; otherwise each class's output is staged and interleaved into dX.
bool single_class(const std::vector<ResidueClass>& classes, const ConvDescriptor& d);

}  // namespace convgen
