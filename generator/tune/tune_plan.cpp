#include "generator/tune/tune_plan.h"

#include <map>

#include <fmt/format.h>

#include "generator/model/batch_split.h"
#include "generator/model/kernels.h"
#include "generator/onnx/import.h"
#include "generator/train/prepare_graph.h"
#include "generator/train/training_record.h"
#include "generator/train/training_requests.h"
#include "runtime/train/trainer.h"
#include "schedules/errors.h"

namespace convgen {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

class ItemList {
 public:
  explicit ItemList(const std::vector<std::string>& passes) : passes_(passes) {}
  void add(ConvDescriptor d, const std::string& pass, const std::string& layer, PackWeights weights) {
    d.name.clear();
    if (std::find(passes_.begin(), passes_.end(), pass) == passes_.end()) return;
    const std::string key = d.normalised() + "|" + pass;
    auto [it, fresh] = index_.emplace(key, items_.size());
    if (fresh) items_.push_back({d, pass, {}, weights});
    auto& layers = items_[it->second].layers;
    if (std::find(layers.begin(), layers.end(), layer) == layers.end()) layers.push_back(layer);
  }
  std::vector<TuneItem> take() { return std::move(items_); }

 private:
  std::vector<std::string> passes_;
  std::vector<TuneItem> items_;
  std::map<std::string, size_t> index_;
};

void add_model(const std::string& path, const TuneSources& src, const TargetInfo& t, ItemList& items,
               std::vector<std::string>* why) {
  if (!src.train) {
    // What `convgen compile` runs: forward kernels of the fused inference graph, and the
    // backward-data kernels of its ConvTranspose nodes.
    if (std::find(src.passes.begin(), src.passes.end(), "fwd") == src.passes.end())
      throw Error(ExitCode::Usage, fmt::format("tune: {}: an inference model runs forward kernels only (its "
                                               "ConvTranspose layers' are backward-data kernels, tuned with them); "
                                               "add fwd to --passes, or tune with --train",
                                               path));
    const int64_t batch = src.batch > 0 ? src.batch : 1;
    auto import_at = [&](int64_t b) {
      model::ImportOptions options;
      options.batch = b;
      return model::import_onnx(path, options);
    };
    // At the per-call batch compile runs the batch in (generator/model/batch_split.h).
    const model::Graph g = model::split_batch(import_at, batch, src.per_call_batch, why).graph;
    for (const model::PlannedKernel& k : model::plan_kernels(g, t, "", nullptr))
      for (const std::string& layer : k.layers)
        items.add(k.descriptor, k.pass, path + ":" + layer,
                  k.packs_weights_at_load ? PackWeights::Prepacked : PackWeights::PerCall);
    return;
  }
  model::TrainerOptions topt;
  topt.batch = src.batch > 0 ? src.batch : 64;
  topt.micro_batch = src.micro_batch;
  topt.records = src.records;
  model::apply_training_record(path, &topt, t, why);
  const int64_t m = model::checked_micro_batch(topt);
  const model::TrainGraph tg = model::prepare_training_graph(path, m, why);
  for (const auto& [key, r] : model::training_conv_requests(tg, topt, t, {})) {
    for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
      if (std::string(pass) == "bwd_data" && !r.needs_backward_data) continue;
      if (std::string(pass) == "fwd" && !r.needs_forward) continue;
      for (const std::string& layer : model::training_layers_of(tg, r.descriptor))
        items.add(r.descriptor, pass, layer + fmt::format(" (mb {})", r.descriptor.mb),
                  r.pack_weights_once ? PackWeights::Prepacked : PackWeights::PerCall);
    }
  }
}

void add_layers(const std::string& path, const TuneSources& src, ItemList& items) {
  int row = 0;
  for (ConvDescriptor d : read_layer_set(path)) {
    ++row;
    const std::string name = d.name.empty() ? fmt::format("{} row {}", path, row) : d.name;
    if (src.batch > 0) d.mb = src.batch;
    validate(d);
    for (const std::string& pass : src.passes) items.add(d, pass, name, PackWeights::Prepacked);
  }
}

}  // namespace

std::vector<TuneItem> tune_items(const TuneSources& src, const TargetInfo& t, std::vector<std::string>* why) {
  ItemList items(src.passes);
  for (const std::string& input : src.inputs) {
    if (ends_with(input, ".onnx")) {
      add_model(input, src, t, items, why);
    } else if (ends_with(input, ".tsv")) {
      if (src.train) throw Error(ExitCode::Usage, fmt::format("tune: {}: --train needs a model file", input));
      add_layers(input, src, items);
    } else {
      if (src.train) throw Error(ExitCode::Usage, fmt::format("tune: {}: --train needs a model file", input));
      ConvDescriptor d = parse_descriptor(input);
      if (src.batch > 0) d.mb = src.batch;
      validate(d);
      const std::string name = d.name.empty() ? d.normalised() : d.name;
      // Refused before any kernel is tuned, not after the forward pass's.
      const std::string inference_only = inference_only_flags(d);
      for (const std::string& pass : src.passes)
        if (pass != "fwd" && !inference_only.empty())
          throw Error(ExitCode::Usage, fmt::format("tune: {}: {} is inference only: the {} pass does not exist for "
                                                   "it; tune it with --passes fwd",
                                                   input, inference_only, pass));
      for (const std::string& pass : src.passes) items.add(d, pass, name, PackWeights::Prepacked);
    }
  }
  return items.take();
}

Parallel recorded_parallel(const ConvDescriptor& d) {
  // generator/train's training_schedule and generator/model's plan_kernels alike.
  return d.mb >= 8 ? Parallel::Images : Parallel::Pixels;
}

}  // namespace convgen
