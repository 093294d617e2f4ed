// A model graph made ready for training (docs/training.md): imported with the batch bound
// to the micro-batch size and training forms accepted (ImportOptions::training), the trailing Softmax / LogSoftmax dropped (training uses
// softmax cross-entropy on its input, the logits), a Relu that is a Conv's only reader
// fused into that Conv's kernels (the backward kernels then mask dY by y > 0 while
// packing it), every op checked to have a backward, and its trainable parameters named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph/train_graph.h"

namespace convgen::model {

// Unsupported (naming the file, node and op) for an op without a backward, a model with
// other than one image input and one [N, classes] output, or a shape that does not carry
// the batch in dimension 0.
TrainGraph prepare_training_graph(const std::string& model_path, int64_t micro_batch,
                                  std::vector<std::string>* why = nullptr);

// The ops training supports, for messages and docs.
bool op_trains(Op op);

}  // namespace convgen::model
