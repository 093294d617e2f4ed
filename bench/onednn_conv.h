// Peer 2 of convgen-bench: oneDNN's forward convolution (v2 API), with the library
// choosing its own (blocked) layouts for src, weights and dst.
//
// Reorders from our NHWC / OIHW tensors into the chosen layouts happen once, in
// prepare(), and are timed separately (reorder_ms()); the timed run() executes only the
// convolution primitive on already-reordered memory, the way a framework that keeps
// oneDNN layouts between layers would call it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "schedules/conv_descriptor.h"

namespace convgen::bench {

class OnednnConv {
 public:
  // Creates the primitive (prop_kind::forward_training, convolution_direct, format_tag::any,
  // bias through the bias argument, ReLU through an eltwise post-op, user-managed
  // scratchpad) with `threads` OpenMP threads. Throws convgen::Error(Unsupported) when
  // oneDNN has no implementation for the layer.
  OnednnConv(const ConvDescriptor& d, int threads);
  ~OnednnConv();
  OnednnConv(const OnednnConv&) = delete;
  OnednnConv& operator=(const OnednnConv&) = delete;

  // Untimed setup: reorders x (NHWC), w (OIHW) and bias ([oc], ignored unless d.bias)
  // into the primitive's layouts. The first call also measures the reorders once (see
  // reorder_ms()).
  void prepare(const float* x, const float* w, const float* bias);

  // The timed call: only the convolution primitive, then waits on the stream.
  void run();

  // Reorders the primitive's last output to NHWK y [mb][oh][ow][oc].
  void fetch(float* y_nhwc);

  // prepare + run + fetch, for the correctness cross-check.
  void run_and_fetch(const float* x, const float* w, const float* bias, float* y_nhwc);

  // Implementation chosen by oneDNN, e.g. "jit:avx2".
  std::string impl_name() const;
  // Size of the primitive's scratchpad in bytes.
  int64_t workspace_bytes() const;
  // One measurement (after one warm-up execution) of the layout reorders a caller holding
  // NHWC/OIHW tensors would pay: src + weights into the chosen layouts plus dst back to
  // NHWC. 0 for a tensor whose chosen layout already is ours. Valid after prepare().
  double reorder_ms() const;
  double reorder_in_ms() const;   // src + weights (+ bias)
  double reorder_out_ms() const;  // dst -> NHWC
  // Chosen layouts, for the report: "src=aBcd8b wei=ABcd8b8a dst=aBcd8b".
  std::string layouts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "2.6.3" -- the oneDNN library version actually loaded.
std::string onednn_version();

}  // namespace convgen::bench
