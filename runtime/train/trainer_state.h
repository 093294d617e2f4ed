// A trainer's state in and out of files: the weights blob of a generated training driver
// (NAME.weights: every float constant of the training graph, in one fixed order) and
// checkpoints (runtime/checkpoint/checkpoint.h) for `convgen train` and for generated drivers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/trainer.h"

namespace convgen::model {

// The float constants of the graph (initial weights and frozen tensors) in the order a
// generated driver's weights file holds them: by value name.
std::vector<float> float_constants_blob(const TrainGraph& tg);
// The same with the trainer's current parameter values and state tensors (BatchNorm
// running statistics) in place of the initial ones: a trained driver's weights file.
std::vector<float> current_weights_blob(const Trainer& trainer);

// Sets every trainable tensor and every state tensor (BatchNorm running statistics) from
// the float32 initializers of the same name in an ONNX model file (runtime/train/onnx_weights.h), e.g.
// one trained elsewhere; momentum buffers are left as they are. BadData naming the file
// and the tensor for one the file lacks or whose shape differs.
void load_onnx_weights(Trainer& trainer, const std::string& path);

// Every trainable tensor (value and momentum), every state tensor and the given scalars,
// tied to `model_hash` and to `options_key` (the options a resume must keep, in words).
train::Checkpoint make_checkpoint(const Trainer& trainer, const std::string& model_hash, const std::string& options_key,
                                  int64_t step, int64_t epoch, int64_t position, uint64_t seed, double lr);
// Restores one into the trainer (tensors and the step count; the caller takes the other
// scalars). BadData naming `path` for another model, other options, or tensors that do
// not match the model.
void restore_checkpoint(const train::Checkpoint& c, const std::string& path, const std::string& model_hash,
                        const std::string& options_key, Trainer& trainer);

// A generated driver's checkpoints: the driver's weights key stands for the model; the
// options key is momentum, weight decay and seed (the learning rate is state: restored).
// `epoch` and `position` are the caller's place in its data, given back by load.
void save_driver_checkpoint(const Trainer& trainer, const std::string& dir, const std::string& weights_key,
                            int64_t epoch, int64_t position);
std::pair<int64_t, int64_t> load_driver_checkpoint(Trainer& trainer, const std::string& dir,
                                                   const std::string& weights_key);

}  // namespace convgen::model
