#include "model_executor.h"

#include <fmt/format.h>

#include "conv_jit.h"
#include "errors.h"
#include "model_kernels.h"
#include "ops.h"

namespace convgen::model {

struct ModelExecutor::Kernels {
  std::vector<std::unique_ptr<JitForwardKernel>> owned;
  std::map<std::string, JitForwardKernel*> by_layer;  // Conv node name -> its kernel
};

Tensor tensor_of(const Value& v) {
  Tensor t(v.shape, false);
  if (v.is_int64) {
    for (size_t i = 0; i < v.int64_data.size(); ++i) t.data[i] = static_cast<float>(v.int64_data[i]);
  } else {
    t.data = v.data;
  }
  return t;
}

ModelExecutor::ModelExecutor(Graph graph, const TargetInfo& t, const std::string& records,
                             std::vector<std::string>* why)
    : g_(std::move(graph)), kernels_(std::make_unique<Kernels>()) {
  for (const PlannedKernel& k : plan_kernels(g_, t, records, why)) {
    kernels_->owned.push_back(std::make_unique<JitForwardKernel>(k.descriptor, k.selection.schedule, t));
    for (const auto& layer : k.layers) kernels_->by_layer[layer] = kernels_->owned.back().get();
  }
}

ModelExecutor::~ModelExecutor() = default;

namespace {

ops::Window window_of(const Attributes& a) {
  return {a.kernel, a.strides, a.dilations, a.pads_begin, a.pads_end};
}

}  // namespace

std::vector<Tensor> ModelExecutor::run(const std::map<std::string, Tensor>& inputs) {
  std::map<std::string, Tensor> live;
  for (const auto& name : g_.inputs) {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw Error(ExitCode::BadData, fmt::format("{}: no data for input '{}'", g_.source, name));
    if (it->second.shape != g_.value(name).shape)
      throw Error(ExitCode::BadData, fmt::format("{}: input '{}' has the wrong shape", g_.source, name));
    live[name] = it->second;
  }
  auto get = [&](const std::string& name) -> const Tensor& {
    auto it = live.find(name);
    if (it != live.end()) return it->second;
    const Value& v = g_.value(name);
    if (!v.is_constant) throw Error(ExitCode::Internal, fmt::format("executor: value '{}' not computed", name));
    return live.emplace(name, tensor_of(v)).first->second;
  };
  for (const Node& n : g_.nodes) {
    const Attributes& a = n.attributes;
    const std::vector<int64_t>& out_shape = g_.value(n.outputs[0]).shape;
    Tensor y;
    switch (n.op) {
      case Op::Conv: {
        JitForwardKernel* k = kernels_->by_layer.at(n.name);
        const Tensor x = with_layout(get(n.inputs[0]), true);
        const Tensor w = with_layout(get(n.inputs[1]), false);
        const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
        y = Tensor(out_shape, true);
        k->run(x.data.data(), w.data.data(), bias ? get(n.inputs[2]).data.data() : nullptr, y.data.data());
        break;
      }
      case Op::Relu: y = ops::unary(get(n.inputs[0]), ops::Unary::Relu); break;
      case Op::LeakyRelu: y = ops::unary(get(n.inputs[0]), ops::Unary::LeakyRelu, a.alpha); break;
      case Op::Clip: y = ops::unary(get(n.inputs[0]), ops::Unary::Clip, 0.0f, a.clip_min, a.clip_max); break;
      case Op::Sigmoid: y = ops::unary(get(n.inputs[0]), ops::Unary::Sigmoid); break;
      case Op::Identity:
      case Op::Dropout: y = get(n.inputs[0]); break;
      case Op::MaxPool: y = ops::max_pool(get(n.inputs[0]), window_of(a), out_shape); break;
      case Op::AveragePool:
        y = ops::average_pool(get(n.inputs[0]), window_of(a), a.count_include_pad, out_shape);
        break;
      case Op::GlobalAveragePool: y = ops::global_pool(get(n.inputs[0]), false); break;
      case Op::GlobalMaxPool: y = ops::global_pool(get(n.inputs[0]), true); break;
      case Op::Gemm: {
        const bool has_c = n.inputs.size() > 2 && !n.inputs[2].empty();
        y = ops::gemm(get(n.inputs[0]), get(n.inputs[1]), has_c ? &get(n.inputs[2]) : nullptr, a.alpha, a.beta,
                      a.trans_a, a.trans_b);
        break;
      }
      case Op::MatMul: y = ops::matmul(get(n.inputs[0]), get(n.inputs[1]), out_shape); break;
      case Op::Add: y = ops::binary(get(n.inputs[0]), get(n.inputs[1]), ops::Binary::Add, out_shape); break;
      case Op::Sub: y = ops::binary(get(n.inputs[0]), get(n.inputs[1]), ops::Binary::Sub, out_shape); break;
      case Op::Mul: y = ops::binary(get(n.inputs[0]), get(n.inputs[1]), ops::Binary::Mul, out_shape); break;
      case Op::Div: y = ops::binary(get(n.inputs[0]), get(n.inputs[1]), ops::Binary::Div, out_shape); break;
      case Op::Pow: y = ops::binary(get(n.inputs[0]), get(n.inputs[1]), ops::Binary::Pow, out_shape); break;
      case Op::Sum: {
        y = get(n.inputs[0]);
        for (size_t i = 1; i < n.inputs.size(); ++i) y = ops::binary(y, get(n.inputs[i]), ops::Binary::Add, out_shape);
        if (n.inputs.size() == 1 && y.shape != out_shape) y = ops::reshape(y, out_shape);
        break;
      }
      case Op::Concat: {
        std::vector<const Tensor*> xs;
        for (const auto& in : n.inputs) xs.push_back(&get(in));
        y = ops::concat(xs, a.axis);
        break;
      }
      case Op::Flatten:
      case Op::Reshape: y = ops::reshape(get(n.inputs[0]), out_shape); break;
      case Op::Transpose: y = ops::transpose(get(n.inputs[0]), a.perm); break;
      case Op::BatchNormalization:
        y = ops::batch_norm(get(n.inputs[0]), get(n.inputs[1]), get(n.inputs[2]), get(n.inputs[3]), get(n.inputs[4]),
                            a.epsilon);
        break;
      case Op::LRN: y = ops::lrn(get(n.inputs[0]), a.size, a.alpha, a.beta, a.lrn_bias); break;
      case Op::Pad: y = ops::pad(get(n.inputs[0]), a.pad_amounts, a.pad_value); break;
      case Op::Softmax:
      case Op::LogSoftmax:
        y = ops::softmax(get(n.inputs[0]), a.axis, a.softmax_coerce_2d, n.op == Op::LogSoftmax);
        break;
    }
    if (y.shape != out_shape)
      throw Error(ExitCode::Internal, fmt::format("executor: node '{}' ({}) produced a wrong shape", n.name, op_name(n.op)));
    live[n.outputs[0]] = std::move(y);
  }
  std::vector<Tensor> outputs;
  for (const auto& name : g_.outputs) outputs.push_back(with_layout(get(name), false));
  return outputs;
}

}  // namespace convgen::model
