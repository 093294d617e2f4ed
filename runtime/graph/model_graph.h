// A model as convgen sees it after import (generator/onnx/import.h): one semantics for
// every supported operator whatever the ONNX opset it came in, every shape static and
// known, constant sub-graphs folded away. Later stages (kernel generation, the model
// driver, the in-process executor) read only this, never ONNX protobufs.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/resize.h"
#include "schedules/conv_descriptor.h"

namespace convgen::model {

enum class Op {
  Conv,
  // A transposed convolution: the backward-data pass of conv_transpose_descriptor's
  // convolution, plus its bias (Attributes: that convolution's window and groups)
  ConvTranspose,
  Relu, LeakyRelu, Clip, Sigmoid, MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, Gemm, MatMul,
  Add, Sub, Mul, Div, Pow, PRelu, Max, Min, Sum, Concat, Flatten, Reshape, Transpose, BatchNormalization, LRN, Pad, Dropout,
  Identity, Softmax, LogSoftmax,
  // Element-wise functions of one input (runtime/graph/operators.h: is_unary)
  HardSigmoid, HardSwish, Tanh, Exp, Log, Sqrt, Neg, Abs, Softplus, Elu, Erf, Reciprocal, Selu, Sin, Cos, Floor, Ceil,
  // Reductions over `axes` (runtime/graph/operators.h: is_reduction)
  ReduceMean, ReduceSum, ReduceMax, ReduceL2, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1, ReduceLogSum,
  ReduceLogSumExp,
  // A strided window of the input (ONNX Slice; Split lowers to one Slice per output)
  Slice,
  // Spatial interpolation (ONNX Resize; Upsample lowers to it), Attributes::resize
  Resize,
  // Y of ONNX LayerNormalization over axes [axis, rank) (Attributes axis, epsilon); inputs
  // x, then optionally scale (absent: one; InstanceNormalization lowers to it) and bias,
  // each of the normalised shape or one element
  LayerNormalization,
  // Channels to and from blocks of pixels (Attributes blocksize, crd)
  DepthToSpace, SpaceToDepth,
  // Blocks of an activation along `axis` picked by constant indices (ONNX Gather)
  Gather,
  // ONNX NegativeLogLikelihoodLoss with constant labels (Attributes: indices = the labels,
  // loss_reduction, ignore_index); inputs x, optionally the class weights.
  // SoftmaxCrossEntropyLoss lowers to LogSoftmax over the channels, then this.
  NegativeLogLikelihoodLoss,
  // Training only, never imported: Caffe's WITHIN_CHANNEL LRN written with standard ops
  // (x * (bias + alpha * AveragePool_k(x*x))^exponent), fused into one node by
  // prepare_training_graph (generator/train/prepare_graph.h). Attributes: size k, alpha, lrn_bias, beta =
  // the exponent.
  WithinChannelLRN
};

// The ONNX op type an Op stands for ("Conv", ...).
const char* op_name(Op op);

// A tensor of the graph: float32 activations and weights; int64 only for constants that
// feed shape inputs (Reshape's shape, Pad's pads), which lowering reads into attributes.
struct Value {
  std::string name;
  std::vector<int64_t> shape;
  bool is_constant = false;
  bool is_int64 = false;
  std::vector<float> data;         // float32 constants (initializers, folded Constant nodes)
  std::vector<int64_t> int64_data; // int64 constants
  int64_t elements() const;
  // A float32 constant (an initializer or a folded Constant): weights, biases, frozen data.
  bool is_float_constant() const { return is_constant && !is_int64; }
};

// Every attribute an Op uses, already normalised (defaults filled in, per-opset forms
// unified, auto_pad resolved into explicit pads). Fields an Op does not use keep their
// defaults. Spatial lists are per spatial axis, rows first; Conv1d has one axis.
struct Attributes {
  // Conv, MaxPool, AveragePool
  std::vector<int64_t> kernel, strides, dilations;
  std::vector<int64_t> pads_begin, pads_end;
  int64_t group = 1;
  bool ceil_mode = false;
  bool count_include_pad = false;
  // Gemm: Y = alpha * A' * B' + beta * C
  float alpha = 1.0f, beta = 1.0f;
  bool trans_a = false, trans_b = false;
  // LeakyRelu slope and Elu's alpha (alpha above); HardSigmoid and HardSwish:
  // clamp(alpha * x + beta, 0, 1) (times x for HardSwish); Selu: alpha and gamma (in
  // beta); Clip bounds (inputs or attributes per opset)
  float clip_min = -3.4028235e38f, clip_max = 3.4028235e38f;
  // Concat, Flatten, Softmax, LogSoftmax, LayerNormalization: the axis, made non-negative
  int64_t axis = 1;
  // Softmax/LogSoftmax before opset 13: flatten to 2-D at axis, then normalise rows
  bool softmax_coerce_2d = false;
  // Transpose
  std::vector<int64_t> perm;
  // Reduce*: the reduced axes (non-negative, sorted; all axes when the model gave none)
  // and whether they stay as extent-1 dimensions
  std::vector<int64_t> axes;
  bool keepdims = true;
  // Slice: per axis of the input, the first index taken and the step (clamped, in range)
  std::vector<int64_t> slice_first, slice_step;
  // Reshape: the output shape (0 and -1 resolved)
  std::vector<int64_t> shape;
  // BatchNormalization, LayerNormalization
  float epsilon = 1e-5f, momentum = 0.9f;
  // LRN: size, alpha, beta (above) and bias
  int64_t size = 0;
  float lrn_bias = 1.0f;
  // Pad: constant mode only; pads per axis of the tensor, begin then end
  std::vector<int64_t> pad_amounts;
  float pad_value = 0.0f;
  // Resize: mode, coordinates, rounding and per-spatial-axis scales
  ops::ResizeSpec resize;
  // Gather: the indices along `axis` (non-negative, flattened in their own shape's order).
  // Concat (inference graphs only, generator/model/channel_order_folding.h): empty, or the order of the
  // joined axis's positions in the output (a channel shuffle folded in)
  std::vector<int64_t> indices;
  // NegativeLogLikelihoodLoss: the reduction, and the ignored label when has_ignore_index
  ops::LossReduction loss_reduction = ops::LossReduction::Mean;
  int64_t ignore_index = 0;
  bool has_ignore_index = false;
  // DepthToSpace, SpaceToDepth: the block edge; DepthToSpace's mode (CRD: channel-major
  // blocks, else DCR: depth-major, SpaceToDepth's order)
  int64_t blocksize = 0;
  bool crd = false;
  // Dropout ratio (identity at inference)
  float ratio = 0.5f;
  // Conv: a following Relu fused into the kernel's epilogue (generator/model/fusion.h); MaxPool
  // (training graphs only, generator/train/prepare_graph.h): a following Relu fused into the pooling
  bool fused_relu = false;
  // Conv (inference graphs only): a fourth input is a residual added before the activation
  // (generator/model/fusion.h).
  // Conv (inference graphs only): its output is channels [slice_channel, slice_channel + K)
  // of the channel Concat producing `slice_of`, written there by the kernel; Concat: every
  // input is written so (`written_in_place`), nothing is left to copy
  // (generator/model/concat_slices.h).
  std::string slice_of;
  int64_t slice_channel = 0, slice_channels_total = 0;
  bool written_in_place = false;
  // Conv (inference graphs only): an activation other than ReLU fused into the kernel's
  // epilogue (generator/model/fusion.h), with a Clip's bounds in clip_min and clip_max and
  // a LeakyRelu's slope in alpha
  Activation fused_activation = Activation::None;
  // BatchNormalization (training graphs only): a following Clip fused into the normalisation,
  // its bounds in clip_min and clip_max (MobileNet's ReLU6)
  bool fused_clip = false;
};

struct Node {
  std::string name;     // the ONNX node's name, or "<op>_<index>" when it has none
  Op op = Op::Identity;
  std::vector<std::string> inputs;   // value names; "" for an absent optional input
  std::vector<std::string> outputs;
  Attributes attributes;
};

struct Graph {
  std::string source;          // the model file, for messages
  int64_t opset = 0;           // the opset the model was written for
  int64_t batch = 1;           // the bound batch size
  std::vector<std::string> inputs, outputs;  // graph inputs (not initializers), outputs
  std::map<std::string, Value> values;
  std::vector<Node> nodes;     // in a valid execution order
  // Constants folded from Transpose(W) of a 2-D float constant W (perm [1, 0]), by name:
  // the W they came from. Training reads MatMul(x, W') as a Gemm of W with transB, so
  // that W itself is the parameter (PyTorch exports nn.Linear on [N, ..., K] this way).
  std::map<std::string, std::string> transposed_constants;
  // Float constants that are a module's parameters whatever their size, where an
  // element-wise op reads them (InstanceNormalization's scale and bias: one value each
  // with one channel). Training trains them; a one-element constant is otherwise frozen.
  std::set<std::string> parameter_constants;

  const Value& value(const std::string& name) const;
  // A value of that name exists and is a float32 constant.
  bool is_float_constant(const std::string& name) const;
  // The indices of the nodes reading `value`, in order, each once however many of its
  // inputs it is.
  std::vector<size_t> readers_of(const std::string& value) const;
  // The index of the node computing `value`, or -1 (a graph input or a constant).
  int producer_of(const std::string& value) const;
  bool is_output(const std::string& value) const;
};

// The convolution descriptor of a Conv node (forward pass): N, C, H, W from its input,
// K, R, S from its weights, its attributes; the epilogue from its bias input and
// fused_relu. Conv1d is H = 1.
ConvDescriptor conv_descriptor(const Graph& g, const Node& conv);

// The convolution whose backward-data pass a ConvTranspose node is. Its input is the
// ConvTranspose's output (C = output channels, H, W = output extents) and its output
// the ConvTranspose's input (K = input channels); same kernel, strides, pads, dilations
// and groups, and the same weights array (ONNX stores ConvTranspose weights as
// [C_in][C_out/g][kh][kw], a convolution's as [K][C/g][kh][kw]). No epilogue: the
// ConvTranspose's bias is per output channel and is added after the kernel.
ConvDescriptor conv_transpose_descriptor(const Graph& g, const Node& conv_transpose);

// The convolution whose kernels run a Conv node (conv_descriptor) or a ConvTranspose
// node (conv_transpose_descriptor).
ConvDescriptor conv_layer_descriptor(const Graph& g, const Node& n);

}  // namespace convgen::model
