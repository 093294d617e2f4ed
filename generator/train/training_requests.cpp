#include "generator/train/training_requests.h"

#include <memory>

#include "schedules/conv_descriptor.h"
#include "schedules/errors.h"

namespace convgen::model {
namespace {

// A convolution the trainer asked for; never run (the caller only records requests).
class RecordedConv : public TrainConv {
 public:
  void forward(const float*, const float*, const float*, float*) override { refuse(); }
  void backward_data(const float*, const float*, const float*, float*) override { refuse(); }
  void backward_weights(const float*, const float*, const float*, float*, float*) override { refuse(); }
  std::string describe() const override { return "recorded for generation"; }

 private:
  [[noreturn]] static void refuse() { throw Error(ExitCode::Internal, "a recorded convolution was run"); }
};

}  // namespace

std::map<std::string, TrainConvRequest> training_conv_requests(const TrainGraph& graph, const TrainerOptions& options,
                                                               const TargetInfo& t,
                                                               const std::vector<int64_t>& sample_counts) {
  std::map<std::string, TrainConvRequest> requests;
  TrainConvFactory record = [&requests](const TrainConvRequest& r) -> std::unique_ptr<TrainConv> {
    ConvDescriptor d = r.descriptor;
    d.name.clear();
    auto [it, fresh] = requests.emplace(d.normalised(), r);
    if (!fresh) it->second.needs_backward_data |= r.needs_backward_data;
    it->second.descriptor = d;
    return std::make_unique<RecordedConv>();
  };
  Trainer engine(graph, options, t, record, nullptr);
  engine.prepare(options.batch);
  for (int64_t c : sample_counts)
    if (c % options.batch != 0) engine.prepare(c % options.batch);
  return requests;
}

}  // namespace convgen::model
