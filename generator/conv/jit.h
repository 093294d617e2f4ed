// JitForwardKernel: the generated forward kernel compiled in-process (Halide JIT) from
// exactly the code the AOT generator uses. Tests and benchmarks use it to run many
// layer shapes without a generator process per kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

// Where a kernel's code comes from. Cache: the kernel cache (generator/kernel_cache),
// loaded or built and stored there, JIT-compiled in-process when the cache is off or
// cannot make shared objects. PrivateCopy: the same, but loaded as a copy of its own, so
// its code sits at other addresses than every other load of it in this process -- the
// tuner's second default, whose gap to the first measures code-placement noise.
enum class KernelSource { Cache, PrivateCopy };

class JitForwardKernel {
 public:
  JitForwardKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                   const ForwardBuildOptions& options = {}, KernelSource source = KernelSource::Cache);
  ~JitForwardKernel();
  JitForwardKernel(const JitForwardKernel&) = delete;
  JitForwardKernel& operator=(const JitForwardKernel&) = delete;

  // x: NHWC [mb][ih][iw][ic]; w: ONNX OIHW [oc][ic/g][kh][kw], or the packed panels
  // when weight_panels() is not empty; bias: [oc] or nullptr when the descriptor has no
  // bias; y: NHWK [mb][oh][ow][oc] (with +outstride(S), a slice: pixels S floats apart);
  // residual: dense NHWK [mb][oh][ow][oc], given exactly when the
  // descriptor has +residual. No aliasing.
  void run(const float* x, const float* w, const float* bias, float* y, const float* residual = nullptr);

  // A GEMM schedule with pack_weights=prepacked: the panels run() reads (fill them with
  // pack_weight_panels); else empty and run() takes ONNX weights.
  const WeightPanels& weight_panels() const { return panels_; }

  // Peak bytes the kernel allocated on the heap during the last run (packed panels).
  int64_t last_workspace_bytes() const;

  const ConvDescriptor& descriptor() const { return d_; }
  const ConvSchedule& schedule() const { return s_; }

 private:
  struct Impl;
  ConvDescriptor d_;
  ConvSchedule s_;
  WeightPanels panels_;
  std::unique_ptr<Impl> impl_;
};

// The backward-data kernel (generator/conv/backward.h), JIT-compiled.
class JitBackwardDataKernel {
 public:
  JitBackwardDataKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                        const ForwardBuildOptions& options = {}, KernelSource source = KernelSource::Cache);
  ~JitBackwardDataKernel();
  JitBackwardDataKernel(const JitBackwardDataKernel&) = delete;
  JitBackwardDataKernel& operator=(const JitBackwardDataKernel&) = delete;

  // dy: NHWK [mb][oh][ow][oc]; w: ONNX OIHW, or the packed panels when weight_panels()
  // is not empty; y: the forward output NHWK, read only when the layer fused a ReLU (dY
  // is masked by y > 0), else may be null; dx: NHWC [mb][ih][iw][ic], every element
  // written. No aliasing.
  void run(const float* dy, const float* w, const float* y, float* dx);
  int64_t last_workspace_bytes() const;
  // As JitForwardKernel's: one panel per residue class with taps.
  const WeightPanels& weight_panels() const { return panels_; }

 private:
  struct Impl;
  ConvDescriptor d_;
  WeightPanels panels_;
  std::unique_ptr<Impl> impl_;
};

// The backward-weights kernel (generator/conv/backward.h), JIT-compiled.
class JitBackwardWeightsKernel {
 public:
  JitBackwardWeightsKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                           const ForwardBuildOptions& options = {}, KernelSource source = KernelSource::Cache);
  ~JitBackwardWeightsKernel();
  JitBackwardWeightsKernel(const JitBackwardWeightsKernel&) = delete;
  JitBackwardWeightsKernel& operator=(const JitBackwardWeightsKernel&) = delete;

  // x: NHWC; dy: NHWK; y: as for backward-data; dw: ONNX OIHW [oc][ic/g][kh][kw];
  // db: [oc], written when the layer has a bias (else may be null). No aliasing.
  void run(const float* x, const float* dy, const float* y, float* dw, float* db);
  int64_t last_workspace_bytes() const;

 private:
  struct Impl;
  ConvDescriptor d_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace convgen
