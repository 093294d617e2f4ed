// Which kernels a model needs: one kernel per distinct (layer, pass, schedule, target)
// among its Conv nodes (forward) and ConvTranspose nodes (the backward-data pass of
// conv_transpose_descriptor's convolution) -- identical layer shapes share one kernel. Each kernel's
// function name is derived from a content hash of that key, so the same kernel has the
// same name (and bytes) in every model and in the kernel cache. Every kernel is its
// schedule's intra-kernel parallel variant, chosen by the layer alone, so a model gives
// the same bits on any thread count. Forward GEMM kernels of constant weights read them as
// panels packed once at load (no packing per call).
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/schedule_selection.h"
#include "schedules/weight_panels.h"

namespace convgen::model {

struct PlannedKernel {
  std::string name;                 // C function name: "convgen_<pass>_" + 16 hex digits of the key's SHA-256
  std::string pass = "fwd";         // "fwd", or "bwd_data" for a ConvTranspose
  ConvDescriptor descriptor;        // the layer, without a name
  SelectedSchedule selection;       // schedule and where it came from
  std::string key;                  // descriptor | pass | schedule | target | generator hash
  std::vector<std::string> layers;  // the Conv / ConvTranspose nodes it serves, in graph order
  // compile-layer --schedule words applied after selection (the parallel variant, and
  // for inference how weights are packed); part of the key.
  std::string schedule_overrides;
  // A forward kernel of constant weights: a GEMM schedule reads them packed at load (what
  // `convgen tune` times its GEMM candidates with, whatever the selected strategy).
  bool packs_weights_at_load = false;
  // A forward GEMM kernel of constant weights reads them packed once, at load
  // (pack_weights=prepacked, schedules/weight_panels.h): the panels the plan packs them
  // into. Empty: the kernel takes ONNX OIHW weights.
  WeightPanels weight_panels;
};

// `records` may be empty (analytic defaults). `why` gets the schedule decisions.
std::vector<PlannedKernel> plan_kernels(const Graph& g, const TargetInfo& t, const std::string& records,
                                        std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
