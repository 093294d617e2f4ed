// The generated model driver: a model's static plan (generator/model/plan.h) written out as C++ --
// one call per step, in order, over one arena and one weights blob whose sizes and
// offsets are constants -- for `convgen compile` to emit beside the kernels.
#pragma once

#include <string>

#include "generator/model/plan.h"
#include "runtime/graph/model_graph.h"

namespace convgen::model {

// The declaration of the driver class, for NAME.h: namespace `ns` (convgen compile's
// default: convgen_model_<name>), class Model { Model(weights path); forward(inputs,
// outputs); sizes }. `calls` > 1: `g` and `p` are at a per-call batch
// (generator/model/batch_split.h) and forward() runs that many calls of them over
// per-thread arenas (runtime/parallel/batch_calls.h); the sizes are the whole batch's.
std::string driver_declaration(const std::string& name, const Graph& g, const Plan& p, const std::string& ns,
                               int64_t calls = 1);

// NAME.cpp: `provenance` (comment lines) first; `plan_key` ties it to its weights file.
// The Model constructor first refuses a CPU without `target`'s features
// (runtime/driver/cpu_features.h).
std::string driver_source(const std::string& name, const Graph& g, const Plan& p, const std::string& plan_key,
                          const std::string& target, const std::string& provenance, const std::string& ns,
                          int64_t calls = 1);

}  // namespace convgen::model
