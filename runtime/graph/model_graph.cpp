#include "runtime/graph/model_graph.h"

#include <algorithm>

#include <fmt/format.h>

#include "schedules/errors.h"

namespace convgen::model {

const char* op_name(Op op) {
  switch (op) {
    case Op::Conv: return "Conv";
    case Op::ConvTranspose: return "ConvTranspose";
    case Op::Resize: return "Resize";
    case Op::LayerNormalization: return "LayerNormalization";
    case Op::DepthToSpace: return "DepthToSpace";
    case Op::Gather: return "Gather";
    case Op::NegativeLogLikelihoodLoss: return "NegativeLogLikelihoodLoss";
    case Op::SpaceToDepth: return "SpaceToDepth";
    case Op::Relu: return "Relu";
    case Op::LeakyRelu: return "LeakyRelu";
    case Op::Clip: return "Clip";
    case Op::Sigmoid: return "Sigmoid";
    case Op::MaxPool: return "MaxPool";
    case Op::AveragePool: return "AveragePool";
    case Op::GlobalAveragePool: return "GlobalAveragePool";
    case Op::GlobalMaxPool: return "GlobalMaxPool";
    case Op::Gemm: return "Gemm";
    case Op::MatMul: return "MatMul";
    case Op::Add: return "Add";
    case Op::Sub: return "Sub";
    case Op::Mul: return "Mul";
    case Op::Div: return "Div";
    case Op::Pow: return "Pow";
    case Op::PRelu: return "PRelu";
    case Op::Max: return "Max";
    case Op::Min: return "Min";
    case Op::Sum: return "Sum";
    case Op::Concat: return "Concat";
    case Op::Flatten: return "Flatten";
    case Op::Reshape: return "Reshape";
    case Op::Transpose: return "Transpose";
    case Op::BatchNormalization: return "BatchNormalization";
    case Op::LRN: return "LRN";
    case Op::WithinChannelLRN: return "WithinChannelLRN";
    case Op::Pad: return "Pad";
    case Op::Dropout: return "Dropout";
    case Op::Identity: return "Identity";
    case Op::Softmax: return "Softmax";
    case Op::LogSoftmax: return "LogSoftmax";
    case Op::HardSigmoid: return "HardSigmoid";
    case Op::HardSwish: return "HardSwish";
    case Op::Tanh: return "Tanh";
    case Op::Exp: return "Exp";
    case Op::Log: return "Log";
    case Op::Sqrt: return "Sqrt";
    case Op::Neg: return "Neg";
    case Op::Abs: return "Abs";
    case Op::Softplus: return "Softplus";
    case Op::Elu: return "Elu";
    case Op::Erf: return "Erf";
    case Op::ReduceMean: return "ReduceMean";
    case Op::ReduceSum: return "ReduceSum";
    case Op::ReduceMax: return "ReduceMax";
    case Op::ReduceL2: return "ReduceL2";
    case Op::Slice: return "Slice";
    case Op::Reciprocal: return "Reciprocal";
    case Op::Selu: return "Selu";
    case Op::Sin: return "Sin";
    case Op::Cos: return "Cos";
    case Op::Floor: return "Floor";
    case Op::Ceil: return "Ceil";
    case Op::ReduceMin: return "ReduceMin";
    case Op::ReduceProd: return "ReduceProd";
    case Op::ReduceSumSquare: return "ReduceSumSquare";
    case Op::ReduceL1: return "ReduceL1";
    case Op::ReduceLogSum: return "ReduceLogSum";
    case Op::ReduceLogSumExp: return "ReduceLogSumExp";
  }
  throw Error(ExitCode::Internal, "op_name: unknown Op");
}

int64_t Value::elements() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

const Value& Graph::value(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) throw Error(ExitCode::Internal, fmt::format("{}: no value named '{}'", source, name));
  return it->second;
}

std::vector<size_t> Graph::readers_of(const std::string& value) const {
  std::vector<size_t> r;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (std::find(nodes[i].inputs.begin(), nodes[i].inputs.end(), value) != nodes[i].inputs.end()) r.push_back(i);
  return r;
}

int Graph::producer_of(const std::string& value) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (std::find(nodes[i].outputs.begin(), nodes[i].outputs.end(), value) != nodes[i].outputs.end())
      return static_cast<int>(i);
  return -1;
}

bool Graph::is_output(const std::string& value) const {
  return std::find(outputs.begin(), outputs.end(), value) != outputs.end();
}

bool Graph::is_float_constant(const std::string& name) const {
  auto it = values.find(name);
  return it != values.end() && it->second.is_float_constant();
}

namespace {

// A convolution of input x (N, C, [H,] W), k output channels, and conv's window and groups.
ConvDescriptor window_descriptor(const Value& x, int64_t k, const Node& conv) {
  const Attributes& a = conv.attributes;
  const bool one_d = x.shape.size() == 3;
  ConvDescriptor d;
  d.name = conv.name;
  d.mb = x.shape[0];
  d.ic = x.shape[1];
  d.ih = one_d ? 1 : x.shape[2];
  d.iw = x.shape.back();
  d.oc = k;
  d.kh = one_d ? 1 : a.kernel[0];
  d.kw = a.kernel.back();
  d.sh = one_d ? 1 : a.strides[0];
  d.sw = a.strides.back();
  d.dh = one_d ? 1 : a.dilations[0];
  d.dw = a.dilations.back();
  d.pt = one_d ? 0 : a.pads_begin[0];
  d.pb = one_d ? 0 : a.pads_end[0];
  d.pl = a.pads_begin.back();
  d.pr = a.pads_end.back();
  d.g = a.group;
  return d;
}

}  // namespace

ConvDescriptor conv_descriptor(const Graph& g, const Node& conv) {
  ConvDescriptor d = window_descriptor(g.value(conv.inputs.at(0)), g.value(conv.inputs.at(1)).shape[0], conv);
  d.bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
  d.residual = conv.inputs.size() > 3 && !conv.inputs[3].empty();
  if (!conv.attributes.slice_of.empty()) d.out_stride = conv.attributes.slice_channels_total;
  d.relu = conv.attributes.fused_relu;
  d.activation = conv.attributes.fused_activation;
  if (d.activation == Activation::Clip) {
    d.clip_lo = conv.attributes.clip_min;
    d.clip_hi = conv.attributes.clip_max;
  }
  if (d.activation == Activation::LeakyRelu) d.leaky_alpha = conv.attributes.alpha;
  return d;
}

ConvDescriptor conv_layer_descriptor(const Graph& g, const Node& n) {
  return n.op == Op::ConvTranspose ? conv_transpose_descriptor(g, n) : conv_descriptor(g, n);
}

ConvDescriptor conv_transpose_descriptor(const Graph& g, const Node& conv_transpose) {
  return window_descriptor(g.value(conv_transpose.outputs.at(0)), g.value(conv_transpose.inputs.at(0)).shape[1],
                           conv_transpose);
}

}  // namespace convgen::model
