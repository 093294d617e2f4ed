// Peer 1 of convgen-bench: the classic explicit im2col + BLIS SGEMM convolution.
//
// Per group g:  Y_g[N*P*Q x K/g] = A_g[N*P*Q x R*S*C/g] * B_g[R*S*C/g x K/g]
//   A_g  im2col of the NHWC input, row = output pixel (n,p,q), column = (r,s,c) with c
//        innermost; zero-padding taps are written as zeros, dilation and strides are
//        applied here. One pass over the input builds every group's matrix, stored
//        group-major [g][pixel][r][s][c], so each A_g is a dense row-major block: the
//        input is read once however many groups there are, and the GEMM streams A_g.
//   B_g  the ONNX OIHW weights re-laid to [(r,s,c)][k]: once, in the constructor (owned
//        buffers), or on every call of the caller-provided-workspace run() (pack_weights).
//   Y_g  written in place into the NHWK output through BLIS strides (row stride K,
//        column offset g*K/g), so no output copy is needed.
// Bias (and ReLU when flagged) is a separate pass over Y, as a GEMM library user would do.
// For 1x1, stride-1, unpadded layers A_g is the input itself (no im2col, no workspace).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/memory/aligned_buffer.h"
#include "schedules/conv_descriptor.h"

namespace convgen::bench {

// Who holds a peer's buffers (every im2col+BLIS peer takes this).
//   Owned           convgen-bench: the constructor allocates the im2col / column buffer
//                   (and packs the forward weights); the plain run() uses them.
//   CallerProvided  the trainer's adapter (generator/train/im2col_conv.cpp): the object
//                   allocates nothing; only the run() overloads taking a workspace may be
//                   called. Those are const and touch nothing but their arguments, so
//                   several threads may call them on one object at once, each with its
//                   own workspace.
enum class Buffers { Owned, CallerProvided };

class Im2colBlisConv {
 public:
  // Owned: packs `w_oihw` ([oc][ic/g][kh][kw]) into the GEMM layout (untimed setup; null:
  // pack later with set_weights) and allocates the im2col buffer. CallerProvided: ignores
  // `w_oihw` and allocates nothing. BLIS runs with `threads` threads (per call, through a
  // BLIS runtime object, not the global setting); the im2col and bias passes use `threads`
  // OpenMP threads, and with threads == 1 no OpenMP parallel region at all (so the calls
  // nest inside a caller's parallel region).
  Im2colBlisConv(const ConvDescriptor& d, int threads, const float* w_oihw,
                 Buffers buffers = Buffers::Owned);

  // The timed forward pass (Owned only): im2col (unless direct) + one SGEMM per group +
  // bias/ReLU pass. x: NHWC [mb][ih][iw][ic]; bias: [oc] (ignored unless d.bias; may be
  // null then); y: NHWK [mb][oh][ow][oc]. No aliasing.
  void run(const float* x, const float* bias, float* y);
  // The same with new weights every call and caller-provided buffers (either mode): packs
  // `w_oihw` into `packed_w` (packed_weights_bytes_for(d) bytes), builds the im2col
  // matrix in `workspace` (workspace_bytes_for(d) bytes; may be null when that is 0),
  // then the SGEMMs and the bias/ReLU pass. The packing is part of the call.
  void run(const float* x, const float* w_oihw, const float* bias, float* y, float* workspace,
           float* packed_w) const;

  // Re-packs new weights (untimed; Owned only); same layout as the constructor's argument.
  void set_weights(const float* w_oihw);
  // The GEMM layout of the weights: OIHW `w_oihw` -> `packed` [g][(r*kw+s)*ic/g + c][oc/g].
  static void pack_weights(const ConvDescriptor& d, const float* w_oihw, float* packed);

  // Bytes of the im2col buffer this object owns (N*P*Q x R*S*C floats, every group's
  // matrix); 0 when the layer is a direct 1x1 GEMM or the buffers are caller-provided.
  int64_t workspace_bytes() const { return static_cast<int64_t>(col_.size() * sizeof(float)); }
  // The im2col buffer's bytes for `d` (what an Owned object allocates), without allocating it.
  static int64_t workspace_bytes_for(const ConvDescriptor& d);
  // Bytes of the packed weights for `d` (oc * ic/g * kh * kw floats).
  static int64_t packed_weights_bytes_for(const ConvDescriptor& d);
  static bool is_direct(const ConvDescriptor& d);
  // True when run() calls SGEMM directly on the input (1x1, stride 1, no padding).
  bool direct() const { return direct_; }
  const ConvDescriptor& descriptor() const { return d_; }

 private:
  void run_packed(const float* x, const float* packed_w, const float* bias, float* y, float* col) const;
  void im2col(const float* x, float* col) const;
  void bias_relu(const float* bias, float* y) const;

  ConvDescriptor d_;
  int threads_;
  Buffers buffers_;
  bool direct_;
  int64_t pixels_;  // N*P*Q
  int64_t kdim_;    // R*S*C/g
  FloatBuffer packed_w_;  // [g][(r*kw+s)*icg + c][ocg]; Owned only
  FloatBuffer col_;       // [g][N*P*Q][R*S*C/g]; Owned only
};

// The peers' im2col / col2im / bias passes: body(begin, end) over blocks of [0, n). With
// threads <= 1, one call body(0, n) on the calling thread and no OpenMP region; else an
// OpenMP region of `threads` threads, each taking one contiguous static block. Every
// caller writes each element from exactly one index, so the result is the same either way.
void for_blocks(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& body);

// Version string of the BLIS library actually loaded ("0.9.0") and the kernel
// configuration it selected for this CPU ("zen3").
std::string blis_version();
std::string blis_arch();

}  // namespace convgen::bench
