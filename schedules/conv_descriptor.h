// ConvDescriptor: one convolution layer, every bound a number, in ONNX conventions.
// This is the key that specialises a generated kernel. Parsing and printing live in
// schedules/conv_descriptor.cpp; docs/descriptor.md is the grammar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace convgen {

// An activation of the forward epilogue other than ReLU, after the bias (ONNX semantics:
// Clip(lo, hi), LeakyRelu(alpha), HardSwish = x * clamp(x / 6 + 1/2, 0, 1), Silu = x *
// Sigmoid(x)). Inference only: the backward kernels know ReLU's mask alone (`relu`), so
// the backward passes refuse a layer with one of these.
enum class Activation { None, Clip, LeakyRelu, HardSwish, Silu };

struct ConvDescriptor {
  std::string name;  // free-form label ("res2a"); not part of the normalised key
  int64_t mb = 1;    // minibatch N
  int64_t ic = 0;    // input channels C (all groups)
  int64_t ih = 0, iw = 0;
  int64_t oc = 0;    // output channels K (all groups)
  int64_t kh = 1, kw = 1;
  int64_t sh = 1, sw = 1;
  int64_t pt = 0, pb = 0, pl = 0, pr = 0;  // zero padding top/bottom/left/right
  int64_t dh = 1, dw = 1;                  // ONNX dilation (1 = dense)
  int64_t g = 1;                           // groups
  // Fused epilogue of the forward pass.
  bool bias = false;
  // Adds a tensor of the output's shape and layout (a residual connection) after the bias,
  // before the activation: y = act(conv + bias + residual). Inference only, as above.
  bool residual = false;
  // > 0: the output is a channel slice of a channels-last tensor of this many channels per
  // pixel (a Concat's output the kernel writes its part of); its pixels lie out_stride
  // floats apart. 0: dense, oc apart. Inference only, as above.
  int64_t out_stride = 0;
  bool relu = false;
  Activation activation = Activation::None;  // exclusive with relu
  float clip_lo = 0.0f, clip_hi = 0.0f;      // Activation::Clip's bounds
  float leaky_alpha = 0.0f;                  // Activation::LeakyRelu's slope

  int64_t oh() const { return (ih + pt + pb - dh * (kh - 1) - 1) / sh + 1; }
  int64_t ow() const { return (iw + pl + pr - dw * (kw - 1) - 1) / sw + 1; }
  // Rows of the padded input that a band of `out_rows` consecutive output rows reads.
  int64_t band_input_rows(int64_t out_rows) const { return (out_rows - 1) * sh + (kh - 1) * dh + 1; }
  int64_t icg() const { return ic / g; }  // input channels per group
  int64_t out_pixel_stride() const { return out_stride > 0 ? out_stride : oc; }
  int64_t ocg() const { return oc / g; }  // output channels per group
  bool depthwise() const { return g > 1 && icg() == 1; }

  // Nominal flop count of one pass: 2*N*K*(C/g)*R*S*P*Q, padded taps counted.
  double flops() const;
  // Size in bytes of the im2col matrix an explicit im2col+GEMM would build.
  int64_t im2col_bytes() const;

  // Canonical text form, parseable again (docs/descriptor.md). Excludes the name.
  std::string normalised() const;
  // Canonical form plus n"name" when a name is set.
  std::string to_string() const;

  bool operator==(const ConvDescriptor& o) const { return normalised() == o.normalised(); }
};

// The activation's flag as the grammar writes it, without the '+': "clip(0,6)",
// "leakyrelu(0.01)", "hardswish", "silu"; "" for none. Numbers in the shortest form that
// reads back to the same float.
std::string activation_flag(const ConvDescriptor& d);

// The inference-only parts of the descriptor as the grammar writes them ("+residual",
// "+clip(0,6)", "+outstride(96)", concatenated); "" when the backward passes can run the layer.
std::string inference_only_flags(const ConvDescriptor& d);

// The activation gives the bits of its runtime operator applied to the same value (none,
// ReLU, Clip, LeakyRelu); HardSwish and Silu agree only within rounding
// (generator/conv/epilogue.h states the bound).
bool activation_is_exact(const ConvDescriptor& d);

// How far an inexact activation's (HardSwish, Silu) result may lie from the value `want`
// of its definition on the same input: 8 float ulps plus 1e-30 absolute
// (generator/conv/epilogue.h derives it). Tests and the tuner's check use this one bound.
double inexact_activation_bound(double want);

// Parses the benchdnn-style grammar (plus pt/pb/pl/pr, bias, relu, activation flags). Throws
// convgen::Error(ExitCode::BadDescriptor) with a message naming the offending field.
ConvDescriptor parse_descriptor(const std::string& text);

// Parses one data row of a shared/layers TSV file (ONNX conventions):
// name mb ic ih iw oc kh kw sh sw ph pw dh dw g
ConvDescriptor parse_tsv_row(const std::string& line, const std::string& where);

// Reads a whole TSV layer set, skipping '#' comments and blank lines.
std::vector<ConvDescriptor> read_layer_set(const std::string& path);

// Throws convgen::Error(BadDescriptor) naming the field if the descriptor is not a
// valid convolution or would overflow 32-bit indexing in generated code.
void validate(const ConvDescriptor& d);

}  // namespace convgen
