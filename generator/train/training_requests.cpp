#include "generator/train/training_requests.h"

#include <memory>

#include "runtime/graph/model_graph.h"
#include "runtime/graph/operators.h"
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
    if (!fresh) it->second.needs_forward |= r.needs_forward;
    it->second.descriptor = d;
    return std::make_unique<RecordedConv>();
  };
  Trainer engine(graph, options, t, record, nullptr);
  engine.prepare(options.batch);
  for (int64_t c : sample_counts)
    if (c % options.batch != 0) engine.prepare(c % options.batch);
  return requests;
}

// The layers a training kernel serves, for the header and messages: the Conv nodes of
// that shape (any batch), or the Gemm layers run as 1x1 convolutions.
std::vector<std::string> training_layers_of(const TrainGraph& tg, const ConvDescriptor& d) {
  std::vector<std::string> layers;
  for (const Node& n : tg.graph.nodes) {
    if (!is_conv_layer(n.op)) continue;
    ConvDescriptor c = conv_layer_descriptor(tg.graph, n);
    c.name.clear();
    c.mb = d.mb;
    if (c == d) layers.push_back(n.name);
  }
  // A Linear-form Gemm runs as a 1x1 convolution of a 1 x rows image (runtime/train/trainer.cpp).
  const bool gemm_form = d.mb == 1 && d.ih == 1 && d.kh == 1 && d.kw == 1;
  for (const Node& n : tg.graph.nodes) {
    if (!gemm_form || n.op != Op::Gemm || !n.attributes.trans_b) continue;
    const auto& w = tg.graph.value(n.inputs[1]).shape;
    if (w.size() == 2 && w[0] == d.oc && w[1] == d.ic) layers.push_back(n.name + " (1x1 conv)");
  }
  if (layers.empty()) layers.push_back("(unnamed)");
  return layers;
}

}  // namespace convgen::model
