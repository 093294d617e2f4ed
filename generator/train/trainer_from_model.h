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

// options.records' training record for this model, batch and target, if any, sets the
// micro-batch and parallel modes (training_record.h). Usage error for an unknown
// options.conv_impl; import errors name the file and node.
std::unique_ptr<Trainer> make_trainer(const std::string& model_path, const TrainerOptions& options,
                                      const TargetInfo& t, std::vector<std::string>* why = nullptr);

// The same with `options` exactly as given, no training record read: what the step
// search of `convgen tune --train` times.
std::unique_ptr<Trainer> make_trainer_as_given(const std::string& model_path, const TrainerOptions& options,
                                               const TargetInfo& t, std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
