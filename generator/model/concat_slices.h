// Inference: a channel Concat whose every input is a Conv's output that nothing else reads
// (SqueezeNet's fire modules, Inception's branches) costs no pass of its own: each Conv's
// kernel writes its channels straight into their slice of the Concat's channels-last
// output (descriptor flag +outstride, the pixels as far apart as the Concat has
// channels), and the Concat copies nothing. The values are the Convs' own: the same bits.
//
// Applies to a Concat along channels (axis 1) of 4-D tensors, without a folded channel
// order, whose inputs are distinct Conv outputs each read by it alone and not graph
// outputs. The Conv nodes record the slice (Attributes::slice_of, slice_channel,
// slice_channels_total) and the Concat `written_in_place`; the plan (generator/model/plan.h)
// places the Conv outputs inside the Concat's buffer.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// `why` (optional) receives one line per Concat written in place or left to copy.
void write_concat_slices(Graph& g, std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
