// The tuner's evaluator for one layer and pass (schedules/tune/tuner.h): builds each
// candidate with the JIT kernels (generator/conv/jit.h, the code compile-layer emits),
// runs it on integer-valued data and compares every output bit with the analytic
// default's, which is itself checked against a plain reference at sampled elements
// first; then times it by the timing rule. Batches are built in parallel threads
// (--jobs) and timed one at a time afterwards, so no build ever runs beside a timing.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "generator/conv/jit.h"
#include "generator/tune/sampled_reference.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/tune/timing_rule.h"
#include "schedules/tune/tuner.h"

namespace convgen {

struct EvaluatorOptions {
  int threads = 1;              // OpenMP threads the candidates run on while checked and timed
  int jobs = 1;                 // candidates built at once
  TimingRule rule;
  double min_sample_seconds = 0.01;  // a sample repeats the call until it lasts this long
  // Test hook: candidates whose describe() is this text are built with the forward
  // generator's planted padding bug (ForwardBuildOptions::inject_padding_bug); the check
  // must find them wrong. Empty: none.
  std::string plant_wrong;
};

class KernelEvaluator : public CandidateEvaluator {
 public:
  // `default_schedule` must be the key's analytic default (with the consumer's parallel
  // field); it is built and checked against the sampled reference here. Error(Internal)
  // if it disagrees with the reference.
  KernelEvaluator(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                  const ConvSchedule& default_schedule, EvaluatorOptions options);
  ~KernelEvaluator() override;

  void prepare(const std::vector<ConvSchedule>& batch) override;
  CandidateResult evaluate(const ConvSchedule& s, double best_so_far) override;
  CandidateResult check(const ConvSchedule& s) override;
  std::vector<TimingStats> retime_interleaved(const std::vector<ConvSchedule>& schedules, int rounds) override;
  double flops() const override;

  // The default kernel's heap workspace, and the most a candidate may allocate: the
  // larger of that and the analytic default's budget (5% of the im2col buffer, >= 1 MiB).
  int64_t workspace_limit() const { return workspace_limit_; }

  struct Kernel;  // one built candidate (generator/tune/kernel_evaluator.cpp)

 private:
  ConvDescriptor d_;
  std::string pass_;
  TargetInfo t_;
  EvaluatorOptions options_;
  PassTensors in_;
  std::vector<FloatBuffer> expected_;          // the default's outputs
  std::vector<FloatBuffer> expected_scratch_;  // a candidate's outputs
  int64_t workspace_limit_ = 0;
  std::map<std::string, std::shared_ptr<Kernel>> built_;  // prepared, by describe()
  std::shared_ptr<Kernel> default_kernel_;
  int64_t default_reps_ = 0;
  double reference_seconds_ = 0;  // the default's best time at the first evaluate()
  std::map<std::string, std::string> build_errors_;
  mutable std::mutex packing_mutex_;
  mutable std::map<std::string, std::shared_ptr<const FloatBuffer>> packed_;  // panels by layout

  std::shared_ptr<Kernel> build(const ConvSchedule& s, KernelSource source = KernelSource::Cache) const;
  std::shared_ptr<Kernel> kernel_for(const ConvSchedule& s, std::string* error);
  // The evaluator's weights packed into `panels`, one buffer per distinct layout; null
  // when there are none (the kernel reads ONNX weights).
  std::shared_ptr<const FloatBuffer> packed(const WeightPanels& panels) const;
  // Builds (or reuses) and checks the candidate; its kernel when the check passed.
  CandidateResult check_candidate(const ConvSchedule& s, std::shared_ptr<Kernel>* kernel);
  double sample_seconds(Kernel& k, int64_t reps);
  int64_t calibrate(Kernel& k);
};

}  // namespace convgen
