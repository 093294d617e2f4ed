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
// setting); im2col, col2im and the bias sum use `threads` OpenMP threads.
#pragma once

#include <cstdint>
#include <vector>

#include "conv_descriptor.h"

namespace convgen::bench {

class Im2colBlisBackwardData {
 public:
  // Allocates the column buffer (untimed setup).
  Im2colBlisBackwardData(const ConvDescriptor& d, int threads);

  // The timed call: one SGEMM per group, then col2im (unless direct).
  // dy: NHWK [mb][oh][ow][oc]; w: OIHW [oc][ic/g][kh][kw]; dx: NHWC [mb][ih][iw][ic], every
  // element written. No aliasing.
  void run(const float* dy, const float* w, float* dx);

  // Bytes of the column buffer (N*P*Q x C*R*S floats); 0 when direct.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // True when run() writes the GEMM result straight into dX (1x1, stride 1, no padding).
  bool direct() const { return direct_; }

 private:
  void col2im(float* dx) const;

  ConvDescriptor d_;
  int threads_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // C/g*R*S
  std::vector<float> col_;  // [g][N*P*Q][C/g*R*S]
};

class Im2colBlisBackwardWeights {
 public:
  // Allocates the im2col buffer (untimed setup).
  Im2colBlisBackwardWeights(const ConvDescriptor& d, int threads);

  // The timed call: im2col (unless direct) + one SGEMM per group + the bias sum.
  // x: NHWC [mb][ih][iw][ic]; dy: NHWK [mb][oh][ow][oc]; dw: OIHW [oc][ic/g][kh][kw];
  // db: [oc], written when d.bias (ignored otherwise; may be null then). No aliasing.
  void run(const float* x, const float* dy, float* dw, float* db);

  // Bytes of the im2col buffer (N*P*Q x C*R*S floats); 0 when direct.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // True when run() reads X directly as the GEMM operand (1x1, stride 1, no padding).
  bool direct() const { return direct_; }

 private:
  void im2col(const float* x);
  void bias_gradient(const float* dy, float* db) const;

  ConvDescriptor d_;
  int threads_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // C/g*R*S
  std::vector<float> col_;  // [g][N*P*Q][C/g*R*S]
};

}  // namespace convgen::bench
