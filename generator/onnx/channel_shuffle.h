// Step 6 of import_onnx (generator/onnx/import.h): a channel shuffle written as
// Reshape [N, C, ...] -> [N, g, C/g, ...], Transpose swapping axes 1 and 2, Reshape back
// to [N, C, ...] (ShuffleNet's, as PyTorch exports it) becomes one Gather along the
// channels with constant indices: a permutation that later stages can fold away
// (generator/model/fusion.h) or run in the activation's own layout, instead of three
// copies through the dense layout.
#pragma once

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// Rewrites every such chain whose intermediate values have no other reader and are not
// graph outputs; the Gather keeps the Transpose's node name. Returns how many.
int fold_channel_shuffles(Graph& g);

// The channel order of a shuffle in `groups` groups of C / groups: output channel c
// reads input channel (c % groups) * (C / groups) + c / groups.
std::vector<int64_t> channel_shuffle_order(int64_t channels, int64_t groups);

}  // namespace convgen::model
