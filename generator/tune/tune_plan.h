// What `convgen tune` tunes: one item per distinct (layer shape, pass), gathered from
// model files, layer-set TSV files and descriptors, for the consumer that will run the
// kernels -- inference kernels at the compile batch with compile's fusions applied, or
// (train) every training kernel the engine asks for at its micro-batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

struct TuneSources {
  std::vector<std::string> inputs;  // MODEL.onnx, LAYERS.tsv or DESCRIPTOR, in order
  std::vector<std::string> passes = {"fwd", "bwd_data", "bwd_weights"};
  bool train = false;
  int64_t batch = 0;        // models: the compile (or training) batch; TSV/descriptors: replaces mb; 0 = as given
  int64_t micro_batch = 0;  // --train: the trainer's micro-batch (0: its default)
  int64_t per_call_batch = 0;  // inference models: compile's --per-call-batch (0: its default)
  // --train: the records file; its training record for the model (if any) sets the
  // micro-batch and parallel modes whose kernels are tuned, as `convgen train` runs them.
  std::string records;
};

struct TuneItem {
  ConvDescriptor descriptor;        // without a name
  std::string pass;
  std::vector<std::string> layers;  // the layers (or rows) it serves, for messages
  // How its consumer hands a GEMM kernel its weights, and so how candidates are timed:
  // packed once into panels, untimed (compile's inference kernels, the trainer's
  // micro-batched layers, convgen-bench by default), or packed inside every call. The
  // tuning space applies it to GEMM forward and backward-data candidates only.
  PackWeights weights = PackWeights::PerCall;
};

// In order of first appearance; a shape and pass two consumers share is timed as the
// first asks. Layer sets and descriptors: forward and backward-data packed once, as
// convgen-bench and compile run them. Error(Usage) for an input that is neither a readable
// .onnx / .tsv file nor a descriptor; import errors name the file and node.
std::vector<TuneItem> tune_items(const TuneSources& sources, const TargetInfo& t, std::vector<std::string>* why);

// The parallel field a tuned schedule carries, as its consumers build it: images for
// (micro-)batches of 8 or more, else pixels -- generator/train's training_schedule and
// generator/model's plan_kernels alike, never the thread count. Part of every candidate and
// of the recorded schedule; candidates are timed with it on --threads threads.
Parallel recorded_parallel(const ConvDescriptor& d);

}  // namespace convgen
