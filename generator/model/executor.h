// The in-process model executor behind `convgen run` and `convgen check`: runs an
// imported (and inference-fused) model graph with no C++ compile per model, over the
// same static plan (generator/model/plan.h) and operators (runtime/ops/ops.h) as the generated model
// driver. Convolutions run convgen's generated forward kernels, JIT-compiled from the
// same code and schedules `convgen compile` uses (one per distinct layer, shared).
// Activations stay in the kernels' channels-last layout between layers
// (runtime/ops/tensor.h); outputs come back in ONNX order.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generator/model/plan.h"
#include "runtime/graph/model_graph.h"
#include "runtime/ops/tensor.h"
#include "schedules/conv_schedule.h"

namespace convgen::model {

class ModelExecutor {
 public:
  // `records` may be empty. `why` (optional) gets the kernel and schedule decisions.
  // Every OpenMP region of the process then runs on `threads` threads (the convolutions'
  // parallel loops, element-wise ops, pooling). Each kernel is the parallel variant its
  // layer alone chooses (plan_kernels), so the outputs are the same bits for every count.
  ModelExecutor(Graph graph, const TargetInfo& t, const std::string& records, std::vector<std::string>* why = nullptr,
                int threads = 1);
  ~ModelExecutor();
  ModelExecutor(const ModelExecutor&) = delete;
  ModelExecutor& operator=(const ModelExecutor&) = delete;

  // The graph's names and shapes; constants' data lives in the plan's weights blob.
  const Graph& graph() const { return g_; }
  const Plan& plan() const { return plan_; }

  // With profiling on, run() times every step (--profile of `convgen run` / `check`).
  struct StepTiming {
    std::string node;
    Op op = Op::Identity;
    double ms = 0.0;
    double flops = 0.0;              // Conv: 2*N*K*(C/g)*R*S*P*Q; else 0
    int64_t workspace_bytes = 0;     // Conv: the kernel's heap workspace
  };
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<StepTiming>& profile() const { return profile_; }

  // inputs: one dense tensor per graph input, by name, of the inferred shape. Returns
  // the graph's outputs in order, dense in ONNX order. BadData on a wrong input.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

 private:
  struct Kernels;
  Graph g_;
  Plan plan_;
  FloatBuffer weights_, arena_;
  std::unique_ptr<Kernels> kernels_;
  bool profiling_ = false;
  std::vector<StepTiming> profile_;
};

// The operands of a Conv or ConvTranspose step: x channels-last, w ONNX OIHW (or its
// panels), bias or null, residual (+residual) or null, y channels-last.
struct ConvOperands {
  const float *x, *w, *bias, *residual;
  float* y;
};

// Runs one step of a plan over an arena and a weights blob; `conv` runs the Conv steps.
void run_plan_step(const PlanStep& s, const Plan& p, float* arena, const float* weights,
                   const std::function<void(const PlanStep&, const ConvOperands&)>& conv);

// A constant Value as a dense tensor.
Tensor tensor_of(const Value& v);

}  // namespace convgen::model
