// Backward peers of convgen-bench: the classic explicit im2col / col2im + BLIS SGEMM
// formulation of the two backward convolutions, on the same NHWC / OIHW tensors as convgen.
//
// Both order a column of the im2col matrix as the ONNX weights order their reduction,
// (c, r, s) with s innermost, so the OIHW weights (backward-data) and the OIHW weight
// gradient (backward-weights) are plain row-major GEMM operands used in place: nothing is
// re-laid, inside or outside the timed call. (The forward peer orders columns (r, s, c)
// for contiguous copies; here that would cost a weight re-layout per call.)
//
// Backward-data, per group g:
//   Col_g[N*P*Q x C/g*R*S] = dY_g[N*P*Q x K/g] * W_g[K/g x C/g*R*S]
//   then col2im: dX = 0 and every column entry is added back into the input element its
//   tap read in the forward pass. col2im runs per input row (n, h), gathering the output
//   rows and kernel rows that land on it, so no two threads ever add into one element.
// Backward-weights, per group g:
//   dW_g[K/g x C/g*R*S] = dY_g^T[K/g x N*P*Q] * A_g[N*P*Q x C/g*R*S],  A_g = im2col(X)
//   written straight into the OIHW dW (one im2col of X builds every group's A_g);
//   db[k] = sum of dY[.][k] over images and pixels, a separate pass when the layer has a bias.
// 1x1, stride-1, unpadded layers skip the column buffer: dY (backward-data) and X
// (backward-weights) are read directly as GEMM operands.
//
// ReLU is not fused: the caller passes dY with the forward output's mask already applied.
// BLIS runs with `threads` threads per call (a BLIS runtime object, not the global
// setting); im2col, col2im and the bias sum use `threads` OpenMP threads, and with
// threads == 1 no OpenMP parallel region at all (so the calls nest inside a caller's).
// Buffers (runtime/im2col/im2col_blis.h): Owned allocates the column buffer in the constructor and the
// plain run() uses it; CallerProvided allocates nothing and only the const run() taking a
// workspace may be called (safe from several threads at once, each with its own).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/im2col/im2col_blis.h"
#include "runtime/memory/aligned_buffer.h"
#include "schedules/conv_descriptor.h"

namespace convgen::bench {

class Im2colBlisBackwardData {
 public:
  // Owned: allocates the column buffer (untimed setup). CallerProvided: allocates nothing.
  Im2colBlisBackwardData(const ConvDescriptor& d, int threads, Buffers buffers = Buffers::Owned);

  // The timed call (Owned only): one SGEMM per group, then col2im (unless direct).
  // dy: NHWK [mb][oh][ow][oc]; w: OIHW [oc][ic/g][kh][kw]; dx: NHWC [mb][ih][iw][ic], every
  // element written. No aliasing.
  void run(const float* dy, const float* w, float* dx);
  // The same with the column buffer in `workspace` (workspace_bytes_for(d) bytes; may be
  // null when that is 0); either mode.
  void run(const float* dy, const float* w, float* dx, float* workspace) const;

  // Bytes of the column buffer this object owns (N*P*Q x C*R*S floats); 0 when direct or
  // the buffers are caller-provided.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // The column buffer's bytes for `d` (what an Owned object allocates), without allocating it.
  static int64_t workspace_bytes_for(const ConvDescriptor& d);
  // True when run() writes the GEMM result straight into dX (1x1, stride 1, no padding).
  bool direct() const { return direct_; }

 private:
  void col2im(const float* col, float* dx) const;

  ConvDescriptor d_;
  int threads_;
  Buffers buffers_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // C/g*R*S
  FloatBuffer col_;  // [g][N*P*Q][C/g*R*S]; Owned only
};

class Im2colBlisBackwardWeights {
 public:
  // Owned: allocates the im2col buffer (untimed setup). CallerProvided: allocates nothing.
  Im2colBlisBackwardWeights(const ConvDescriptor& d, int threads, Buffers buffers = Buffers::Owned);

  // The timed call (Owned only): im2col (unless direct) + one SGEMM per group + the bias sum.
  // x: NHWC [mb][ih][iw][ic]; dy: NHWK [mb][oh][ow][oc]; dw: OIHW [oc][ic/g][kh][kw];
  // db: [oc], written when d.bias (ignored otherwise; may be null then). No aliasing.
  void run(const float* x, const float* dy, float* dw, float* db);
  // The same with the im2col buffer in `workspace` (workspace_bytes_for(d) bytes; may be
  // null when that is 0); either mode.
  void run(const float* x, const float* dy, float* dw, float* db, float* workspace) const;

  // Bytes of the im2col buffer this object owns (N*P*Q x C*R*S floats); 0 when direct or
  // the buffers are caller-provided.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // The im2col buffer's bytes for `d` (what an Owned object allocates), without allocating it.
  static int64_t workspace_bytes_for(const ConvDescriptor& d);
  // True when run() reads X directly as the GEMM operand (1x1, stride 1, no padding).
  bool direct() const { return direct_; }

 private:
  void im2col(const float* x, float* col) const;
  void bias_gradient(const float* dy, float* db) const;

  ConvDescriptor d_;
  int threads_;
  Buffers buffers_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // C/g*R*S
  FloatBuffer col_;  // [g][N*P*Q][C/g*R*S]; Owned only
};

}  // namespace convgen::bench
