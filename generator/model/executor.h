// The in-process model executor behind `convgen run` and `convgen check`: runs an
// imported (and inference-fused) model graph with no C++ compile per model, over the
// same static plan (generator/model/plan.h) and operators (runtime/ops/ops.h) as the generated model
// driver. Convolutions run convgen's generated forward kernels, JIT-compiled from the
// same code and schedules `convgen compile` uses (one per distinct layer, shared).
// Activations stay in the kernels' channels-last layout between layers
// (runtime/ops/tensor.h); outputs come back in ONNX order. A graph imported at a per-call
// batch M runs a batch of `calls` x M samples as that many calls over private arenas
// (generator/model/batch_split.h, runtime/parallel/batch_calls.h).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generator/model/plan.h"
#include "runtime/graph/model_graph.h"
#include "runtime/ops/tensor.h"
#include "runtime/parallel/batch_calls.h"
#include "schedules/conv_schedule.h"

namespace convgen::model {

class ModelExecutor {
 public:
  // `records` may be empty. `why` (optional) gets the kernel and schedule decisions.
  // Every OpenMP region of the process then runs on `threads` threads (the convolutions'
  // parallel loops, element-wise ops, pooling). Each kernel is the parallel variant its
  // layer alone chooses (plan_kernels), so the outputs are the same bits for every count.
  // `calls` > 1: `graph` is the model at a per-call batch (split_batch) and run() takes
  // `calls` times as many samples, the calls spread over the threads (then the kernels'
  // and ops' own loops run serially inside each call).
  ModelExecutor(Graph graph, const TargetInfo& t, const std::string& records, std::vector<std::string>* why = nullptr,
                int threads = 1, int64_t calls = 1);
  ~ModelExecutor();
  ModelExecutor(const ModelExecutor&) = delete;
  ModelExecutor& operator=(const ModelExecutor&) = delete;

  // The graph's names and shapes (at the per-call batch); constants' data lives in the
  // plan's weights blob.
  const Graph& graph() const { return g_; }
  const Plan& plan() const { return plan_; }
  int64_t calls() const { return calls_; }
  // A graph input's or output's shape as run() takes or returns it: the whole batch.
  std::vector<int64_t> batch_shape(const std::string& value) const;
  // The floats of activation memory: the arena, times the threads' arenas when split.
  int64_t arena_floats_allocated() const;

  // With profiling on, run() times every step (--profile of `convgen run` / `check`);
  // split into calls, the time the first thread spent in the step over its calls.
  struct StepTiming {
    std::string node;
    Op op = Op::Identity;
    double ms = 0.0;
    double flops = 0.0;              // Conv: 2*N*K*(C/g)*R*S*P*Q; else 0
    int64_t workspace_bytes = 0;     // Conv: the kernel's heap workspace
  };
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<StepTiming>& profile() const { return profile_; }

  // inputs: one dense tensor per graph input, by name, of batch_shape. Returns the
  // graph's outputs in order, dense in ONNX order. BadData on a wrong input.
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

 private:
  struct Kernels;
  // One call: its inputs' samples into `arena`, the plan's steps (timed into `ms` when
  // not null), its outputs' samples out.
  void run_call(const std::map<std::string, Tensor>& inputs, int64_t call, float* arena, std::vector<Tensor>& outputs,
                std::vector<double>* ms);
  Graph g_;
  Plan plan_;
  int64_t calls_ = 1;
  int threads_ = 1;
  FloatBuffer weights_, arena_;
  std::unique_ptr<CallArenas> call_arenas_;
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
