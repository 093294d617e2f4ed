#include "runtime/driver/model_runtime.h"

#include <stdexcept>

#include <HalideBuffer.h>

#include "runtime/parallel/parallel_runtime.h"

namespace convgen {

void install_model_runtime() {
  volatile auto runtime_reference = &halide_set_custom_malloc;  // keeps the reference
  (void)runtime_reference;
  install_kernel_runtime();
}

namespace {

// y as the kernel's (kg, g, pix, n) output: dense, or pixels s.out_stride floats apart.
Halide::Runtime::Buffer<float> output_buffer(const ConvShape& s, float* y) {
  const int pq = int(s.oh * s.ow), stride = int(s.out_stride > 0 ? s.out_stride : s.oc);
  halide_dimension_t dims[4] = {{0, int(s.oc / s.g), 1, 0},
                                {0, int(s.g), int(s.oc / s.g), 0},
                                {0, pq, stride, 0},
                                {0, int(s.mb), stride * pq, 0}};
  return Halide::Runtime::Buffer<float>(y, 4, dims);
}

// The forward kernel's buffers over the caller's arrays (channels-last activations).
struct ForwardBuffers {
  ForwardBuffers(const ConvShape& s, const float* x, const float* w, const float* bias, float* y)
      : in(const_cast<float*>(x), {int(s.ic / s.g), int(s.g), int(s.iw), int(s.ih), int(s.mb)}),
        out(output_buffer(s, y)) {
    const int cg = int(s.ic / s.g), kg = int(s.oc / s.g);
    wt = s.packed_weights > 0 ? Halide::Runtime::Buffer<float>(const_cast<float*>(w), {int(s.packed_weights)})
                              : Halide::Runtime::Buffer<float>(const_cast<float*>(w), {int(s.kw), int(s.kh), cg, kg, int(s.g)});
    // A kernel without +bias never reads its bias argument (the JIT passes the same one
    // float); one with +bias given it would fail its bounds check, never read past it.
    static float no_bias[1] = {0.0f};
    bs = bias ? Halide::Runtime::Buffer<float>(const_cast<float*>(bias), {int(s.oc)})
              : Halide::Runtime::Buffer<float>(no_bias, {1});
  }
  Halide::Runtime::Buffer<float> in, wt, bs, out;
};

void check_kernel_status(int status) {
  if (status != 0) throw std::runtime_error("convgen: a convolution kernel failed with Halide error " + std::to_string(status));
}

}  // namespace

void run_forward_kernel(ForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w, const float* bias,
                        float* y) {
  ForwardBuffers b(s, x, w, bias, y);
  check_kernel_status(kernel(b.in, b.wt, b.bs, b.out));
}

void run_forward_kernel(ResidualForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w,
                        const float* bias, const float* residual, float* y) {
  ForwardBuffers b(s, x, w, bias, y);
  Halide::Runtime::Buffer<float> res(const_cast<float*>(residual), {int(s.oc / s.g), int(s.g), int(s.oh * s.ow), int(s.mb)});
  check_kernel_status(kernel(b.in, b.wt, b.bs, res, b.out));
}

void run_conv_transpose_kernel(BackwardDataKernelFn kernel, const ConvShape& s, const float* x, const float* w,
                               const float* bias, float* y) {
  const int g = int(s.g), cg = int(s.ic / s.g), kg = int(s.oc / s.g);
  static float unused_mask[1] = {0.0f};  // the y argument: read only by kernels with a fused ReLU
  Halide::Runtime::Buffer<float> dy(const_cast<float*>(x), {kg, g, int(s.oh * s.ow), int(s.mb)});
  Halide::Runtime::Buffer<float> wt(const_cast<float*>(w), {int(s.kw), int(s.kh), cg, kg, g});
  Halide::Runtime::Buffer<float> mask(unused_mask, {1, 1, 1, 1});
  Halide::Runtime::Buffer<float> dx(y, {cg, g, int(s.ih * s.iw), int(s.mb)});
  const int status = kernel(dy, wt, mask, dx);
  if (status != 0)
    throw std::runtime_error("convgen: a transposed-convolution kernel failed with Halide error " + std::to_string(status));
  if (bias) ops::add_channel_bias(y, s.mb * s.ih * s.iw, s.ic, bias);
}

}  // namespace convgen
