// JitForwardKernel: the generated forward kernel compiled in-process (Halide JIT) from
// exactly the code the AOT generator uses. Tests and benchmarks use it to run many
// layer shapes without a generator process per kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conv_descriptor.h"
#include "conv_pipeline.h"
#include "conv_schedule.h"

namespace convgen {

class JitForwardKernel {
 public:
  JitForwardKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                   const ForwardBuildOptions& options = {});
  ~JitForwardKernel();
  JitForwardKernel(const JitForwardKernel&) = delete;
  JitForwardKernel& operator=(const JitForwardKernel&) = delete;

  // x: NHWC [mb][ih][iw][ic]; w: ONNX OIHW [oc][ic/g][kh][kw]; bias: [oc] or nullptr
  // when the descriptor has no bias; y: NHWK [mb][oh][ow][oc]. No aliasing.
  void run(const float* x, const float* w, const float* bias, float* y);

  // Peak bytes the kernel allocated on the heap during the last run (packed panels).
  int64_t last_workspace_bytes() const;

  const ConvDescriptor& descriptor() const { return d_; }
  const ConvSchedule& schedule() const { return s_; }

 private:
  struct Impl;
  ConvDescriptor d_;
  ConvSchedule s_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace convgen
