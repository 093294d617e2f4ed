// The generated training driver (`convgen compile --train`, docs/training.md): a
// model's training graph written out as C++ (every node, attribute and shape; the float
// constants in a weights file beside it) plus the table of its ahead-of-time kernels,
// around the batch-parallel engine (runtime/train/trainer.h). The in-process trainer of
// `convgen train` and a generated driver run the same engine on kernels generated from
// the same code and schedules, so they compute the same bits (tested).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "generator/train/prepare_graph.h"
#include "schedules/conv_descriptor.h"

namespace convgen::model {

// One layer at one size and the kernels generated for it (function names).
struct TrainKernelRow {
  ConvDescriptor descriptor;  // no name
  std::string forward, backward_data, backward_weights;  // backward_data "" when no dX is needed
};

struct TrainDriverSpec {
  std::string name;            // C identifier: NAME.h, NAME.weights
  std::string cpp_namespace;   // the driver's C++ namespace (default convgen_model_<name>)
  int64_t batch = 0, micro_batch = 0;
  std::vector<int64_t> sample_counts;  // the data sizes whose partial batches have kernels
  std::string target;          // the kernels' Halide target
  std::string weights_key;     // ties NAME.weights to this driver
  std::string regenerate;      // the command that produced it
  std::vector<TrainKernelRow> kernels;
  // Conv node -> "micro-batch" | "whole-batch" from a training record (`convgen tune
  // --train`), baked into the driver; empty: the trainer's cost model chooses, as in
  // `convgen train` without a record.
  std::map<std::string, std::string> recorded_modes;
};

// NAME.h: the class <cpp_namespace>::Trainer and the compile-time constants.
std::string training_driver_declaration(const TrainGraph& tg, const TrainDriverSpec& spec);

// NAME.cpp: `provenance` (comment lines) first.
std::string training_driver_source(const TrainGraph& tg, const TrainDriverSpec& spec, const std::string& provenance);

}  // namespace convgen::model
