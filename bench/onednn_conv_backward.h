// Backward peers of convgen-bench: oneDNN's convolution backward-data and
// backward-weights primitives (v2 API), each created the way a training framework does,
// with a forward_training primitive descriptor of the same layer as the hint and
// format_tag::any for every tensor, so the library picks its own (blocked) layouts.
//
// As in OnednnConv, prepare() reorders our NHWC / OIHW inputs into those layouts once,
// untimed (the reorder cost is measured separately), and the timed run() executes only
// the primitive. Neither fuses a ReLU: the caller passes dY with the ReLU mask of the
// forward output already applied.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "schedules/conv_descriptor.h"

namespace convgen::bench {

// diff_src = backward-data(diff_dst, weights).
class OnednnConvBackwardData {
 public:
  // Creates the primitive (convolution_direct, user-managed scratchpad) with `threads`
  // OpenMP threads. Throws convgen::Error(Unsupported) when oneDNN has no implementation
  // for the layer.
  OnednnConvBackwardData(const ConvDescriptor& d, int threads);
  ~OnednnConvBackwardData();
  OnednnConvBackwardData(const OnednnConvBackwardData&) = delete;
  OnednnConvBackwardData& operator=(const OnednnConvBackwardData&) = delete;

  // Untimed setup: reorders dy (NHWK [mb][oh][ow][oc]) and w (OIHW [oc][ic/g][kh][kw]) into
  // the primitive's layouts. The first call also measures the reorders once.
  void prepare(const float* dy, const float* w);
  // The timed call: only the primitive, then waits on the stream.
  void run();
  // Reorders the last diff_src to NHWC dx [mb][ih][iw][ic].
  void fetch(float* dx_nhwc);
  // prepare + run + fetch, for the correctness cross-check.
  void run_and_fetch(const float* dy, const float* w, float* dx_nhwc);

  // Implementation chosen by oneDNN, e.g. "jit:avx2".
  std::string impl_name() const;
  // Size of the primitive's scratchpad in bytes.
  int64_t workspace_bytes() const;
  // Reorders a caller holding NHWC/OIHW tensors would pay (one warm measurement, valid
  // after prepare()): dy + w into the chosen layouts, diff_src back to NHWC.
  double reorder_ms() const;
  double reorder_in_ms() const;
  double reorder_out_ms() const;
  // Chosen layouts, for the report: "diff_dst=aBcd8b wei=ABcd8a8b diff_src=aBcd8b".
  std::string layouts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// diff_weights (and diff_bias when d.bias) = backward-weights(src, diff_dst).
class OnednnConvBackwardWeights {
 public:
  // As OnednnConvBackwardData's constructor; the primitive also computes diff_bias when
  // the layer has a bias.
  OnednnConvBackwardWeights(const ConvDescriptor& d, int threads);
  ~OnednnConvBackwardWeights();
  OnednnConvBackwardWeights(const OnednnConvBackwardWeights&) = delete;
  OnednnConvBackwardWeights& operator=(const OnednnConvBackwardWeights&) = delete;

  // Untimed setup: reorders x (NHWC [mb][ih][iw][ic]) and dy (NHWK) into the primitive's
  // layouts. The first call also measures the reorders once.
  void prepare(const float* x, const float* dy);
  // The timed call: only the primitive, then waits on the stream.
  void run();
  // Reorders the last diff_weights to OIHW dw [oc][ic/g][kh][kw] and, when d.bias, copies
  // diff_bias to db [oc] (db is ignored otherwise and may be null).
  void fetch(float* dw_oihw, float* db);
  // prepare + run + fetch, for the correctness cross-check.
  void run_and_fetch(const float* x, const float* dy, float* dw_oihw, float* db);

  std::string impl_name() const;
  int64_t workspace_bytes() const;
  // As above: x + dy in, diff_weights (+ diff_bias) back out.
  double reorder_ms() const;
  double reorder_in_ms() const;
  double reorder_out_ms() const;
  // "src=... diff_dst=... diff_wei=...".
  std::string layouts() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace convgen::bench
