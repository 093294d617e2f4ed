// Part of fuse_for_inference (generator/model/fusion.h): a channel permutation (a Gather
// along axis 1 whose indices are a permutation; ShuffleNet's channel shuffle imports as
// one, generator/onnx/channel_shuffle.h) costs no pass of its own where the graph allows:
//  - after a channel Concat that feeds only it, the Concat writes its inputs' channels in
//    the permuted order (Attributes::indices on the Concat);
//  - before Convs (group 1, constant weights) that are its only readers, the permutation
//    moves into each Conv's input-channel weights (W'[k][order[c]] = W[k][c]) and the
//    Convs read the unpermuted tensor.
// Elsewhere the Gather stays: one pass in the activation's own layout.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// Returns how many permutations were folded; `why` (optional) gets one line per Gather.
int fold_channel_permutations(Graph& g, std::vector<std::string>* why);

}  // namespace convgen::model
