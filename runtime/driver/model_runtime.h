// What a generated model driver (`convgen compile`'s NAME.cpp) calls besides the
// operators of runtime/ops/ops.h: its convolution kernels through Halide buffers, and its weights
// file (runtime/ops/weights_file.h). Part of convgen::runtime.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/driver/cpu_features.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/ops/weights_file.h"

struct halide_buffer_t;

namespace convgen {

using ForwardKernelFn = int (*)(halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*);

// The layer extents a forward kernel was generated for (schedules/conv_descriptor.h's fields).
struct ConvShape {
  int64_t mb, ic, ih, iw, oc, kh, kw, oh, ow, g;
  // > 0: the kernel reads its weights packed (schedules/weight_panels.h), this many floats.
  int64_t packed_weights = 0;
  // > 0: y is a channel slice of a channels-last tensor of this many channels (the
  // kernel's +outstride), the pointer at the slice's first channel; 0: dense.
  int64_t out_stride = 0;
};

// Installs the kernels' hooks (runtime/parallel: OpenMP tasks, aligned memory) into the
// process's one Halide runtime, which this library carries. A generated driver calls it
// first: it references that runtime itself, so a static link always takes it from this
// archive, even when no kernel references it (kernels of prepacked weights allocate
// nothing) and only the hooks in convgen_parallel, linked later, call into it.
void install_model_runtime();

// Runs a generated forward kernel: x channels-last [mb][ih][iw][ic], w ONNX OIHW (or its
// panels when s.packed_weights > 0; the weights file holds them packed), bias
// [oc] or null (the kernel then does not read it), y channels-last [mb][oh][ow][oc].
// Throws std::runtime_error if the kernel reports an error.
void run_forward_kernel(ForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w, const float* bias,
                        float* y);

// A kernel of a +residual layer takes one more buffer before y: the residual, channels-last
// like y, added after the bias and before the activation.
using ResidualForwardKernelFn = int (*)(halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*,
                                        halide_buffer_t*);
void run_forward_kernel(ResidualForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w,
                        const float* bias, const float* residual, float* y);

// A ConvTranspose: runs the generated backward-data kernel of the convolution `s` (its
// dY is x, channels-last [mb][oh][ow][oc]; its dX is y, channels-last [mb][ih][iw][ic]),
// then adds bias [ic] when not null. w: ONNX layout, the ConvTranspose's own weights.
using BackwardDataKernelFn = int (*)(halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*);
void run_conv_transpose_kernel(BackwardDataKernelFn kernel, const ConvShape& s, const float* x, const float* w,
                               const float* bias, float* y);

}  // namespace convgen
