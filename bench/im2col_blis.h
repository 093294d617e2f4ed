// Peer 1 of convgen-bench: the classic explicit im2col + BLIS SGEMM convolution.
//
// Per group g:  Y_g[N*P*Q x K/g] = A_g[N*P*Q x R*S*C/g] * B_g[R*S*C/g x K/g]
//   A_g  im2col of the NHWC input, row = output pixel (n,p,q), column = (r,s,c) with c
//        innermost; zero-padding taps are written as zeros, dilation and strides are
//        applied here. One pass over the input builds every group's matrix, stored
//        group-major [g][pixel][r][s][c], so each A_g is a dense row-major block: the
//        input is read once however many groups there are, and the GEMM streams A_g.
//   B_g  the ONNX OIHW weights re-laid to [(r,s,c)][k], once, in the constructor.
//   Y_g  written in place into the NHWK output through BLIS strides (row stride K,
//        column offset g*K/g), so no output copy is needed.
// Bias (and ReLU when flagged) is a separate pass over Y, as a GEMM library user would do.
// For 1x1, stride-1, unpadded layers A_g is the input itself (no im2col, no workspace).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "conv_descriptor.h"

namespace convgen::bench {

class Im2colBlisConv {
 public:
  // Packs `w_oihw` ([oc][ic/g][kh][kw]) into the GEMM layout (untimed setup) and
  // allocates the im2col buffer. BLIS runs with `threads` threads (per call, through a
  // BLIS runtime object, not the global setting); the im2col and bias passes use
  // `threads` OpenMP threads.
  Im2colBlisConv(const ConvDescriptor& d, int threads, const float* w_oihw);

  // The timed forward pass: im2col (unless direct) + one SGEMM per group + bias/ReLU pass.
  // x: NHWC [mb][ih][iw][ic]; bias: [oc] (ignored unless d.bias; may be null then);
  // y: NHWK [mb][oh][ow][oc]. No aliasing.
  void run(const float* x, const float* bias, float* y);

  // Re-packs new weights (untimed); same layout as the constructor's argument.
  void set_weights(const float* w_oihw);

  // Bytes of the im2col buffer (N*P*Q x R*S*C floats, every group's matrix);
  // 0 when the layer is a direct 1x1 GEMM.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // What workspace_bytes() will be for `d`, without allocating it.
  static int64_t workspace_bytes_for(const ConvDescriptor& d);
  static bool is_direct(const ConvDescriptor& d);
  // True when run() calls SGEMM directly on the input (1x1, stride 1, no padding).
  bool direct() const { return direct_; }
  const ConvDescriptor& descriptor() const { return d_; }

 private:
  void im2col(const float* x);
  void bias_relu(const float* bias, float* y) const;

  ConvDescriptor d_;
  int threads_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // R*S*C/g
  std::vector<float> packed_w_;  // [g][(r*kw+s)*icg + c][ocg]
  std::vector<float> col_;       // [g][N*P*Q][R*S*C/g]
};

// Version string of the BLIS library actually loaded ("0.9.0") and the kernel
// configuration it selected for this CPU ("zen3").
std::string blis_version();
std::string blis_arch();

}  // namespace convgen::bench
