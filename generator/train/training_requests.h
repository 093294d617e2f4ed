// The convolutions a training run asks for: the engine (runtime/train/trainer.h) is set
// up with a recording factory for a full mini-batch and each partial one, so the list is
// exactly what `convgen train` JIT-compiles. `convgen compile --train` generates their
// kernels; `convgen tune --train` tunes them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/graph/train_graph.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/trainer.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen::model {

// Keyed by the descriptor's normalised text (no name); needs_backward_data is the OR of
// every request of that shape. `sample_counts`: data set sizes whose last partial
// mini-batch (count mod batch) is a size of its own.
std::map<std::string, TrainConvRequest> training_conv_requests(const TrainGraph& graph, const TrainerOptions& options,
                                                               const TargetInfo& t,
                                                               const std::vector<int64_t>& sample_counts);

// The layers a training kernel serves, for headers and messages: the Conv nodes of that
// shape (any batch), or the Gemm layers run as 1x1 convolutions ("(unnamed)" if none).
std::vector<std::string> training_layers_of(const TrainGraph& tg, const ConvDescriptor& d);

}  // namespace convgen::model
