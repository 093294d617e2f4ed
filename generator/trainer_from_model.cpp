// Trainer from a model file (`convgen train`): import, then the engine with JIT-compiled
// generated kernels or the im2col + BLIS baseline.
#include <fmt/format.h>

#include "errors.h"
#include "model_trainer.h"

namespace convgen::model {

namespace {

TrainConvFactory conv_factory(const std::string& conv_impl, std::vector<std::string>* why) {
  if (conv_impl == "generated") return [why](const TrainConvRequest& r) { return make_generated_conv(r, why); };
  if (conv_impl == "im2col-blis") return [why](const TrainConvRequest& r) { return make_im2col_blis_conv(r, why); };
  throw Error(ExitCode::Usage, fmt::format("--conv-impl '{}': expected generated or im2col-blis", conv_impl));
}

}  // namespace

Trainer::Trainer(const std::string& model_path, const TrainerOptions& options, const TargetInfo& t,
                 std::vector<std::string>* why)
    : Trainer(prepare_training_graph(model_path, checked_micro_batch(options), why), options, t,
              conv_factory(options.conv_impl, why), why) {}

}  // namespace convgen::model
