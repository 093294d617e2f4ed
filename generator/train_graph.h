// A model graph made ready for training (docs/training.md): imported with the batch bound
// to the micro-batch size and training forms accepted (ImportOptions::training), the trailing Softmax / LogSoftmax dropped (training uses
// softmax cross-entropy on its input, the logits), a Relu that is a Conv's only reader
// fused into that Conv's kernels (the backward kernels then mask dY by y > 0 while
// packing it), every op checked to have a backward, and its trainable parameters named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model_graph.h"

namespace convgen::model {

struct TrainGraph {
  Graph graph;                       // batch = the micro-batch size
  std::string input;                 // the one graph input, [N, C, H, W]
  std::string logits;                // [N, classes]
  int64_t classes = 0;
  std::vector<int64_t> sample_shape; // C, H, W
  // Float initializers that feed Conv/Gemm/MatMul weights and biases and
  // BatchNormalization scale and bias, in graph order; every other constant is frozen.
  std::vector<std::string> trainable;
};

// Unsupported (naming the file, node and op) for an op without a backward, a model with
// other than one image input and one [N, classes] output, or a shape that does not carry
// the batch in dimension 0.
TrainGraph prepare_training_graph(const std::string& model_path, int64_t micro_batch,
                                  std::vector<std::string>* why = nullptr);

// The ops training supports, for messages and docs.
bool op_trains(Op op);

}  // namespace convgen::model
