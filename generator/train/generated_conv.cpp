#include <fmt/format.h>

#include "generator/conv/jit.h"
#include "generator/train/conv_factories.h"
#include "runtime/train/train_conv.h"
#include "schedules/errors.h"
#include "schedules/schedule_selection.h"

namespace convgen::model {

namespace {

class GeneratedConv : public TrainConv {
 public:
  GeneratedConv(const TrainConvRequest& r, std::vector<std::string>* why) : d_(r.descriptor) {
    // Forward and backward-data read weights the trainer packs once per mini-batch when
    // it asks (schedules/weight_panels.h): the same bits as packing per call, without
    // repeating the copy for every micro-batch.
    auto schedule = [&](const std::string& pass) {
      ConvSchedule s = training_schedule(d_, pass, r.target, r.records, why).schedule;
      s.pack_weights = pass != "bwd_weights" && r.pack_weights_once ? PackWeights::Prepacked : PackWeights::PerCall;
      return s;
    };
    if (r.needs_forward) fwd_ = std::make_unique<JitForwardKernel>(d_, schedule("fwd"), r.target);
    if (r.needs_backward_data) bwd_data_ = std::make_unique<JitBackwardDataKernel>(d_, schedule("bwd_data"), r.target);
    bwd_weights_ = std::make_unique<JitBackwardWeightsKernel>(d_, schedule("bwd_weights"), r.target);
    intra_ = r.intra_kernel;
  }
  void forward(const float* x, const float* w, const float* bias, float* y) override {
    if (!fwd_) throw Error(ExitCode::Internal, fmt::format("no forward kernel was built for {}", d_.normalised()));
    fwd_->run(x, w, bias, y);
  }
  void backward_data(const float* dy, const float* w, const float* y, float* dx) override {
    bwd_data_->run(dy, w, y, dx);
  }
  void backward_weights(const float* x, const float* dy, const float* y, float* dw, float* db) override {
    bwd_weights_->run(x, dy, y, dw, db);
  }
  const WeightPanels& forward_panels() const override { return fwd_ ? fwd_->weight_panels() : no_panels(); }
  const WeightPanels& backward_data_panels() const override {
    return bwd_data_ ? bwd_data_->weight_panels() : no_panels();
  }
  std::string describe() const override {
    const std::string passes = !fwd_ ? "bwd_weights"
                               : bwd_data_ ? "fwd, bwd_data, bwd_weights"
                                           : "fwd, bwd_weights: the input needs no gradient";
    const bool packed = !forward_panels().empty() || !backward_data_panels().empty();
    return fmt::format("generated kernels for {} ({}){}{}", d_.normalised(), passes,
                       packed ? ", weights packed once per mini-batch" : "", intra_ ? ", intra-kernel parallel" : "");
  }

 private:
  ConvDescriptor d_;
  bool intra_ = false;
  std::unique_ptr<JitForwardKernel> fwd_;
  std::unique_ptr<JitBackwardDataKernel> bwd_data_;
  std::unique_ptr<JitBackwardWeightsKernel> bwd_weights_;
};

}  // namespace

SelectedSchedule training_schedule(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                   const std::string& records, std::vector<std::string>* why) {
  // Always the parallel variant, chosen by the layer alone: the schedule -- and so the
  // bits -- is the same whether the kernel runs on one thread inside the trainer's
  // batch-parallel region (its parallel loop then runs on the calling thread) or on all
  // of them (intra-kernel). Measured: parallel=none and parallel=pixels of
  // mb1ic8ih1iw24oc5kh1kw1 forward differ in the last bits.
  SelectedSchedule s = select_schedule(d, pass, t, records, why);
  s.schedule.parallel = intra_kernel_loop(d, pass, s.schedule, d.mb >= 8 ? Parallel::Images : Parallel::Pixels);
  s.source += ", parallel variant";
  return s;
}

std::unique_ptr<TrainConv> make_generated_conv(const TrainConvRequest& r, std::vector<std::string>* why) {
  return std::make_unique<GeneratedConv>(r, why);
}

}  // namespace convgen::model
