// Plain reference values of single output elements of a convolution pass, in double, for
// checking a kernel's output at sampled places without computing a whole reference
// tensor (a VGG layer's full reference takes tens of seconds). Layouts as the JIT
// kernels take them (generator/conv/jit.h): x NHWC, w OIHW, y / dy NHWK, dx NHWC.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/memory/aligned_buffer.h"
#include "schedules/conv_descriptor.h"

namespace convgen {

// Cache-line aligned, as the runtime and convgen-bench store tensors: the kernels load
// whole vectors along channels, and at a plain std::vector's 16-byte offset every
// AVX-512 access straddles two lines (a depthwise kernel then times ~40% slower, and a
// schedule that stages its input into an aligned workspace looks better than it is).
struct PassTensors {
  FloatBuffer x, w, bias, y, dy;  // inputs (y: the forward output whose ReLU mask backward passes apply)
  FloatBuffer residual;           // +residual layers: added before the activation, dense NHWK like y
};

// y[n][p][q][k] at the dense index (n, p, q, k) whatever the layer's +outstride, bias,
// residual and the fused activation included (HardSwish and Silu by their definition,
// which a kernel meets within rounding: activation_is_exact).
double reference_forward_at(const ConvDescriptor& d, const PassTensors& in, int64_t index);
// dx[n][h][w][c] (dY masked by y > 0 when the layer fused a ReLU).
double reference_backward_data_at(const ConvDescriptor& d, const PassTensors& in, int64_t index);
// dw[k][c][r][s] for index < w.size(), else db[index - w.size()].
double reference_backward_weights_at(const ConvDescriptor& d, const PassTensors& in, int64_t index);

}  // namespace convgen
