// Inference fusions on the model graph, before kernels are planned:
//  - a channel permutation (ShuffleNet's shuffle) folds into the Concat before it or the
//    Convs after it (generator/model/channel_order_folding.h);
//  - a Gemm of activations by constant weights runs as a 1x1 convolution
//    (generator/model/gemm_as_conv.h);
//  - BatchNormalization after a Conv folds into the Conv's weights and bias (constant
//    folding in double: w' = w * s / sqrt(v + eps), b' = (b - m) * s / sqrt(v + eps) + B);
//  - an Add of a Conv's output and a tensor of its shape (a residual connection) becomes
//    the Conv kernel's residual input, added after the bias (the Add's bits);
//  - Relu after a Conv (or after that sum) becomes the Conv kernel's fused epilogue, and
//    so do Clip (ReLU6), LeakyRelu, HardSwish and x * Sigmoid(x) (SiLU)
//    (generator/conv/epilogue.h: Clip and LeakyRelu give the unfused bits, HardSwish and
//    SiLU agree within rounding).
//  - a channel Concat of Conv outputs is written in place by their kernels
//    (generator/model/concat_slices.h).
// Each applies only when the Conv's output feeds nothing else (SiLU: its Sigmoid and
// Mul) and is not a graph output.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// `why` (optional) receives one line per fusion made or refused.
void fuse_for_inference(Graph& g, std::vector<std::string>* why = nullptr);

// Training keeps BatchNormalization (its statistics are the mini-batch's); only the
// Relu fusion applies, and the backward kernels apply its mask.
void fuse_for_training(Graph& g, std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
