// The training graph the engine runs (runtime/train/trainer.h): a model graph bound to
// the micro-batch size with its logits and trainable parameters named. Made by
// generator/train/prepare_graph.h from a model file, or written out as C++ by a generated
// training driver (`convgen compile --train`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

struct TrainGraph {
  Graph graph;                       // batch = the micro-batch size
  std::string input;                 // the one graph input, [N, C, H, W]
  std::string logits;                // [N, classes], or [N, classes, H, W] (segmentation)
  int64_t classes = 0;
  int64_t label_elements = 1;        // labels per sample: 1, or the H x W of a label map
  std::vector<int64_t> sample_shape; // C, H, W
  // Float initializers that feed Conv/Gemm/MatMul weights and biases and
  // BatchNormalization scale and bias, in graph order; every other constant is frozen.
  std::vector<std::string> trainable;
};

}  // namespace convgen::model
