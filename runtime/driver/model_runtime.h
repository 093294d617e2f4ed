// What a generated model driver (`convgen compile`'s NAME.cpp) calls besides the
// operators of runtime/ops/ops.h: its convolution kernels through Halide buffers, and its weights
// file (runtime/ops/weights_file.h). Part of convgen::runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/ops/weights_file.h"

struct halide_buffer_t;

namespace convgen {

using ForwardKernelFn = int (*)(halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*);

// The layer extents a forward kernel was generated for (schedules/conv_descriptor.h's fields).
struct ConvShape {
  int64_t mb, ic, ih, iw, oc, kh, kw, oh, ow, g;
};

// Runs a generated forward kernel: x channels-last [mb][ih][iw][ic], w ONNX OIHW, bias
// [oc] or null (the kernel then does not read it), y channels-last [mb][oh][ow][oc].
// Throws std::runtime_error if the kernel reports an error.
void run_forward_kernel(ForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w, const float* bias,
                        float* y);

}  // namespace convgen
