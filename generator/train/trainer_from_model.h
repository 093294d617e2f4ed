// A trainer from a model file (`convgen train`, tests, convgen-train-bench): the model
// imported for training (prepare_training_graph), then the engine
// (runtime/train/trainer.h) with convolutions as options.conv_impl says -- "generated"
// JIT-compiles convgen's kernels, "im2col-blis" the baseline (conv_factories.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/train/trainer.h"

namespace convgen::model {

// Usage error for an unknown options.conv_impl; import errors name the file and node.
std::unique_ptr<Trainer> make_trainer(const std::string& model_path, const TrainerOptions& options,
                                      const TargetInfo& t, std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
