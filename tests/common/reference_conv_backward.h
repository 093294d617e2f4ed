// Definitional backward convolutions in double: the oracles for the backward-data and
// backward-weights kernels (issue 3). Written from the definition, sharing no code with
// the generator or with reference_forward: backward-data scatters each output gradient
// back through the taps it came from; backward-weights sums over images and pixels.
// Without fused ReLU (the ReLU mask is applied by the caller to dY).
#pragma once

#include <vector>

#include "schedules/conv_descriptor.h"

namespace convgen::test {

// dy: NHWK [mb][oh][ow][oc]; w: ONNX [oc][ic/g][kh][kw]. Returns dX, NHWC [mb][ih][iw][ic].
std::vector<double> reference_backward_data(const ConvDescriptor& d, const std::vector<float>& dy,
                                            const std::vector<float>& w);

struct WeightGradients {
  std::vector<double> dw;  // ONNX [oc][ic/g][kh][kw]
  std::vector<double> db;  // [oc] = sum of dY over images and pixels
};

// x: NHWC [mb][ih][iw][ic]; dy: NHWK [mb][oh][ow][oc].
WeightGradients reference_backward_weights(const ConvDescriptor& d, const std::vector<float>& x,
                                           const std::vector<float>& dy);

}  // namespace convgen::test
