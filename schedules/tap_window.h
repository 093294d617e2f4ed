// Taps that only ever see padding. On small images a kernel tap can fall on zero padding
// for every output pixel: a 3x3 pad-1 convolution of a 1x1 image reads real input only
// through its centre tap. Those taps add exact zeros in forward and backward-data, and
// their weight gradient is zero. Cropping them leaves a smaller convolution with the
// same output: fewer flops in every pass, and a weight tensor (and gradient) a fraction
// of the size. The trainer runs cropped layers on a cropped copy of their weights
// (runtime/train, docs/training.md "Small images").
#pragma once

#include <cstdint>
#include <vector>

#include "schedules/conv_descriptor.h"

namespace convgen {

// The taps [r0, r0 + kh) x [s0, s0 + kw) of a kh x kw kernel that read real input for at
// least one output pixel (the hull: a tap between two useful ones is kept).
struct TapWindow {
  int64_t r0 = 0, kh = 1, s0 = 0, kw = 1;
  bool whole(const ConvDescriptor& d) const { return r0 == 0 && s0 == 0 && kh == d.kh && kw == d.kw; }
};

// The useful taps of d. Whole when every tap reads real input somewhere, or when the
// cropped layer could not keep d's output size with non-negative padding.
TapWindow useful_taps(const ConvDescriptor& d);

// d with only the taps of w: kh, kw and the padding changed so that output size and
// every output pixel's sum are d's, less the terms that read padding. d itself when w
// is whole.
ConvDescriptor cropped(const ConvDescriptor& d, const TapWindow& w);

// OIHW weights of d to the dense OIHW weights of the cropped layer: [oc][icg][w.kh][w.kw].
void crop_weights(const ConvDescriptor& d, const TapWindow& w, const float* full, float* out, int64_t oc_begin,
                  int64_t oc_end);

// The cropped layer's weight gradient back to d's OIHW shape, zero on the cropped taps.
void expand_weight_gradient(const ConvDescriptor& d, const TapWindow& w, const float* cropped_dw, float* full,
                            int64_t oc_begin, int64_t oc_end);

// Elements [begin, end) of that expanded gradient (flat OIHW indices) into out[0, end - begin).
void expand_weight_gradient_elements(const ConvDescriptor& d, const TapWindow& w, const float* cropped_dw,
                                     int64_t begin, int64_t end, float* out);

}  // namespace convgen
