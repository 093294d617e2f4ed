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

void run_forward_kernel(ForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w, const float* bias,
                        float* y) {
  const int g = int(s.g), cg = int(s.ic / s.g), kg = int(s.oc / s.g);
  std::vector<float> no_bias;
  if (!bias) no_bias.assign(static_cast<size_t>(s.oc), 0.0f);
  Halide::Runtime::Buffer<float> in(const_cast<float*>(x), {cg, g, int(s.iw), int(s.ih), int(s.mb)});
  Halide::Runtime::Buffer<float> wt =
      s.packed_weights > 0 ? Halide::Runtime::Buffer<float>(const_cast<float*>(w), {int(s.packed_weights)})
                           : Halide::Runtime::Buffer<float>(const_cast<float*>(w), {int(s.kw), int(s.kh), cg, kg, g});
  Halide::Runtime::Buffer<float> bs(bias ? const_cast<float*>(bias) : no_bias.data(), {int(s.oc)});
  Halide::Runtime::Buffer<float> out(y, {kg, g, int(s.oh * s.ow), int(s.mb)});
  const int status = kernel(in, wt, bs, out);
  if (status != 0) throw std::runtime_error("convgen: a convolution kernel failed with Halide error " + std::to_string(status));
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
