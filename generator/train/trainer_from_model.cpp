// Trainer from a model file (`convgen train`): import, then the engine with JIT-compiled
// generated kernels or the im2col + BLIS baseline.
#include "generator/train/trainer_from_model.h"

#include <utility>

#include <fmt/format.h>

#include "generator/train/conv_factories.h"
#include "generator/train/prepare_graph.h"
#include "generator/train/training_record.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

TrainConvFactory conv_factory(const std::string& conv_impl, std::vector<std::string>* why) {
  if (conv_impl == "generated") return [why](const TrainConvRequest& r) { return make_generated_conv(r, why); };
  if (conv_impl == "im2col-blis") return [why](const TrainConvRequest& r) { return make_im2col_blis_conv(r, why); };
  throw Error(ExitCode::Usage, fmt::format("--conv-impl '{}': expected generated or im2col-blis", conv_impl));
}

}  // namespace

std::unique_ptr<Trainer> make_trainer(const std::string& model_path, const TrainerOptions& options,
                                      const TargetInfo& t, std::vector<std::string>* why) {
  TrainerOptions o = options;
  apply_training_record(model_path, &o, t, why);
  return make_trainer_as_given(model_path, o, t, why);
}

std::unique_ptr<Trainer> make_trainer_as_given(const std::string& model_path, const TrainerOptions& options,
                                               const TargetInfo& t, std::vector<std::string>* why) {
  TrainConvFactory make_conv = conv_factory(options.conv_impl, why);
  TrainGraph graph = prepare_training_graph(model_path, checked_micro_batch(options), why);
  return std::make_unique<Trainer>(std::move(graph), options, t, std::move(make_conv), why);
}

}  // namespace convgen::model
