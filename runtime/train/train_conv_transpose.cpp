#include "runtime/train/train_conv_transpose.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "runtime/ops/ops.h"

namespace convgen::model {

namespace {

class TransposedConv : public TrainConv {
 public:
  TransposedConv(std::unique_ptr<TrainConv> conv, const ConvDescriptor& d) : conv_(std::move(conv)), d_(d) {}

  const WeightPanels& forward_panels() const override { return conv_->backward_data_panels(); }
  const WeightPanels& backward_data_panels() const override { return conv_->forward_panels(); }

  // x: the convolution's dY [mb][oh][ow][oc]; y: its dX [mb][ih][iw][ic].
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    conv_->backward_data(x, w, nullptr, y);
    if (bias) ops::add_channel_bias(y, rows(), d_.ic, bias);
  }
  void backward_data(const float* dy, const float* w, const float*, float* dx) override {
    conv_->forward(dy, w, nullptr, dx);
  }
  void backward_weights(const float* x, const float* dy, const float*, float* dw, float* db) override {
    conv_->backward_weights(dy, x, nullptr, dw, nullptr);
    if (!db) return;
    // Row by row, each channel's sum in image and pixel order: the same bits whichever
    // thread calls.
    std::fill(db, db + d_.ic, 0.0f);
    const int64_t n = rows();
    for (int64_t r = 0; r < n; ++r) {
      const float* row = dy + r * d_.ic;
      for (int64_t c = 0; c < d_.ic; ++c) db[c] += row[c];
    }
  }
  std::string describe() const override { return "transposed convolution: " + conv_->describe(); }

 private:
  int64_t rows() const { return d_.mb * d_.ih * d_.iw; }
  std::unique_ptr<TrainConv> conv_;
  ConvDescriptor d_;
};

}  // namespace

TrainConvRequest convolution_request_of_transposed(const TrainConvRequest& transposed) {
  TrainConvRequest r = transposed;
  r.needs_forward = transposed.needs_backward_data;
  r.needs_backward_data = transposed.needs_forward;
  return r;
}

std::unique_ptr<TrainConv> transposed_conv(std::unique_ptr<TrainConv> conv, const ConvDescriptor& d) {
  return std::make_unique<TransposedConv>(std::move(conv), d);
}

}  // namespace convgen::model
