#include "runtime/driver/model_runtime.h"

#include <stdexcept>

#include <HalideBuffer.h>

namespace convgen {

void run_forward_kernel(ForwardKernelFn kernel, const ConvShape& s, const float* x, const float* w, const float* bias,
                        float* y) {
  const int g = int(s.g), cg = int(s.ic / s.g), kg = int(s.oc / s.g);
  std::vector<float> no_bias;
  if (!bias) no_bias.assign(static_cast<size_t>(s.oc), 0.0f);
  Halide::Runtime::Buffer<float> in(const_cast<float*>(x), {cg, g, int(s.iw), int(s.ih), int(s.mb)});
  Halide::Runtime::Buffer<float> wt(const_cast<float*>(w), {int(s.kw), int(s.kh), cg, kg, g});
  Halide::Runtime::Buffer<float> bs(bias ? const_cast<float*>(bias) : no_bias.data(), {int(s.oc)});
  Halide::Runtime::Buffer<float> out(y, {kg, g, int(s.oh * s.ow), int(s.mb)});
  const int status = kernel(in, wt, bs, out);
  if (status != 0) throw std::runtime_error("convgen: a convolution kernel failed with Halide error " + std::to_string(status));
}

}  // namespace convgen
