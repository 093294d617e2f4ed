#include "runtime/train/train_conv_aot.h"

#include <map>

#include <HalideBuffer.h>
#include <fmt/format.h>

#include "schedules/errors.h"

namespace convgen::model {

namespace {

using Buffer = Halide::Runtime::Buffer<float>;

// The views the kernels take (as generator/conv/jit.cpp's): NHWC x / dx as (c, g, w, h, n) or
// (c, g, pixels, n), OIHW weights as (s, r, c, k, g), NHWK y / dy as (k, g, pixels, n).
Buffer nhwk(const ConvDescriptor& d, const float* p) {
  return Buffer(const_cast<float*>(p), {int(d.ocg()), int(d.g), int(d.oh() * d.ow()), int(d.mb)});
}
Buffer oihw(const ConvDescriptor& d, const float* p) {
  return Buffer(const_cast<float*>(p), {int(d.kw), int(d.kh), int(d.icg()), int(d.ocg()), int(d.g)});
}
// The y argument of a kernel without a fused ReLU: never read.
Buffer unused_mask() {
  static float storage[1] = {0.0f};
  return Buffer(storage, {1, 1, 1, 1});
}

void check(int status, const char* pass, const ConvDescriptor& d) {
  if (status != 0)
    throw Error(ExitCode::Internal, fmt::format("{} kernel of {} failed with Halide error {}", pass, d.normalised(), status));
}

class AotConv : public TrainConv {
 public:
  AotConv(const ConvDescriptor& d, const AotConvKernels& k) : d_(d), k_(k) {}
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    if (!k_.forward) throw Error(ExitCode::Internal, fmt::format("no forward kernel for {}", d_.normalised()));
    static float no_bias[1] = {0.0f};
    Buffer in(const_cast<float*>(x), {int(d_.icg()), int(d_.g), int(d_.iw), int(d_.ih), int(d_.mb)});
    Buffer wt = oihw(d_, w);
    Buffer bs = bias ? Buffer(const_cast<float*>(bias), {int(d_.oc)}) : Buffer(no_bias, {1});
    Buffer out = nhwk(d_, y);
    check(k_.forward(in, wt, bs, out), "forward", d_);
  }
  void backward_data(const float* dy, const float* w, const float* y, float* dx) override {
    if (!k_.backward_data) throw Error(ExitCode::Internal, fmt::format("no backward-data kernel for {}", d_.normalised()));
    Buffer g = nhwk(d_, dy), wt = oihw(d_, w), mask = d_.relu ? nhwk(d_, y) : unused_mask();
    Buffer out(dx, {int(d_.icg()), int(d_.g), int(d_.ih * d_.iw), int(d_.mb)});
    check(k_.backward_data(g, wt, mask, out), "backward-data", d_);
  }
  void backward_weights(const float* x, const float* dy, const float* y, float* dw, float* db) override {
    Buffer in(const_cast<float*>(x), {int(d_.icg()), int(d_.g), int(d_.iw), int(d_.ih), int(d_.mb)});
    Buffer g = nhwk(d_, dy), mask = d_.relu ? nhwk(d_, y) : unused_mask(), dw_out = oihw(d_, dw);
    if (d_.bias) {
      Buffer db_out(db, {int(d_.oc)});
      check(k_.backward_weights_bias(in, g, mask, dw_out, db_out), "backward-weights", d_);
    } else {
      check(k_.backward_weights(in, g, mask, dw_out), "backward-weights", d_);
    }
  }
  std::string describe() const override {
    return fmt::format("ahead-of-time kernels for {} ({})", d_.normalised(),
                       k_.backward_data ? "fwd, bwd_data, bwd_weights" : "fwd, bwd_weights: the input needs no gradient");
  }

 private:
  ConvDescriptor d_;
  AotConvKernels k_;
};

}  // namespace

TrainConvFactory make_aot_conv_factory(std::vector<AotConvKernels> table, std::string regenerate) {
  auto rows = std::make_shared<std::map<std::string, AotConvKernels>>();
  for (const AotConvKernels& k : table) (*rows)[k.descriptor] = k;
  return [rows, regenerate](const TrainConvRequest& r) -> std::unique_ptr<TrainConv> {
    ConvDescriptor d = r.descriptor;
    d.name.clear();
    const std::string key = d.normalised();
    auto it = rows->find(key);
    const bool usable = it != rows->end() && (!r.needs_forward || it->second.forward) &&
                        (!r.needs_backward_data || it->second.backward_data) &&
                        (d.bias ? it->second.backward_weights_bias != nullptr : it->second.backward_weights != nullptr);
    if (!usable)
      throw Error(ExitCode::Unsupported,
                  fmt::format("this training driver has no kernels for the convolution {}: a batch or "
                              "sample count it was not compiled for; regenerate with: {}",
                              key, regenerate));
    return std::make_unique<AotConv>(d, it->second);
  };
}

}  // namespace convgen::model
