// Definitional convolution in double: the oracle every generated kernel is checked
// against. Deliberately naive and sharing no code with the generator.
#pragma once

#include <vector>

#include "schedules/conv_descriptor.h"

namespace convgen::test {

struct ReferenceResult {
  std::vector<double> y;        // NHWK [mb][oh][ow][oc], after bias and the activation
  std::vector<double> abs_sum;  // per output: |b| + sum |x*w| (bounds fp32 rounding)
};

// x: NHWC [mb][ih][iw][ic]; w: ONNX [oc][ic/g][kh][kw]; b: [oc] (ignored without bias).
// The descriptor's activation (ReLU or another) of a value, in the runtime operators'
// float arithmetic: exactly their result for the exact activations, ONNX's definition
// for HardSwish and Silu.
double reference_activation(const ConvDescriptor& d, double v);

ReferenceResult reference_forward(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b);
// With +residual: r NHWK like y, added after the bias and before the activation.
ReferenceResult reference_forward(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, const std::vector<float>& r);

}  // namespace convgen::test
