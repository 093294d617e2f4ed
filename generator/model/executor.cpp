#include "generator/model/executor.h"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <functional>

#include "generator/conv/jit.h"
#include "generator/model/batch_split.h"
#include "generator/model/kernels.h"
#include "runtime/graph/operators.h"
#include "runtime/ops/ops.h"
#include "schedules/errors.h"

namespace convgen::model {

struct ModelExecutor::Kernels {
  std::vector<std::unique_ptr<JitForwardKernel>> owned;
  std::vector<std::unique_ptr<JitBackwardDataKernel>> owned_transposed;
  std::map<std::string, JitForwardKernel*> by_layer;                   // Conv node name -> its kernel
  std::map<std::string, JitBackwardDataKernel*> transposed_by_layer;   // ConvTranspose node name -> its kernel
  int64_t last_workspace_bytes(const std::string& node) const {
    auto it = by_layer.find(node);
    return it != by_layer.end() ? it->second->last_workspace_bytes() : transposed_by_layer.at(node)->last_workspace_bytes();
  }
};

Tensor tensor_of(const Value& v) {
  Tensor t(v.shape, false);
  if (v.is_int64) {
    for (size_t i = 0; i < v.int64_data.size(); ++i) t.data[i] = static_cast<float>(v.int64_data[i]);
  } else {
    t.data.assign(v.data.begin(), v.data.end());
  }
  return t;
}

ModelExecutor::ModelExecutor(Graph graph, const TargetInfo& t, const std::string& records,
                             std::vector<std::string>* why, int threads, int64_t calls)
    : g_(std::move(graph)), calls_(std::max<int64_t>(1, calls)), threads_(std::max(1, threads)),
      kernels_(std::make_unique<Kernels>()) {
  const std::vector<PlannedKernel> planned = plan_kernels(g_, t, records, why);
  // Every OpenMP region of the run (kernels' parallel variants, element-wise ops, pooling)
  // takes exactly `threads`, 1 included: the bench's one-thread figures mean one thread.
  omp_set_num_threads(threads_);
  for (const PlannedKernel& k : planned) {
    // The planned schedule, already its parallel variant: the same on every thread count.
    const ConvSchedule& s = k.selection.schedule;
    if (k.pass == "bwd_data") {
      kernels_->owned_transposed.push_back(std::make_unique<JitBackwardDataKernel>(k.descriptor, s, t));
      for (const auto& layer : k.layers) kernels_->transposed_by_layer[layer] = kernels_->owned_transposed.back().get();
      continue;
    }
    kernels_->owned.push_back(std::make_unique<JitForwardKernel>(k.descriptor, s, t));
    // The plan packs the weights into the planned panels; the parallel variant must read the same.
    if (kernels_->owned.back()->weight_panels().floats != k.weight_panels.floats)
      throw Error(ExitCode::Internal, fmt::format("kernel {}: its weight panels differ from the plan's", k.name));
    for (const auto& layer : k.layers) kernels_->by_layer[layer] = kernels_->owned.back().get();
  }
  plan_ = make_plan(g_, planned);
  const std::vector<float> blob = weights_blob(g_, plan_);
  weights_.assign(blob.begin(), blob.end());
  if (calls_ == 1) arena_.assign(static_cast<size_t>(plan_.arena_floats), 0.0f);
  else call_arenas_ = std::make_unique<CallArenas>(plan_.arena_floats);
  // The blob now holds every constant the plan reads: drop the graph's copies (half
  // the resident weights of AlexNet or VGG otherwise). Shapes and names stay.
  for (auto& [name, v] : g_.values) {
    if (!v.is_constant) continue;
    std::vector<float>().swap(v.data);
    std::vector<int64_t>().swap(v.int64_data);
  }
}

ModelExecutor::~ModelExecutor() = default;

void run_plan_step(const PlanStep& s, const Plan& p, float* arena, const float* weights,
                   const std::function<void(const PlanStep&, const ConvOperands&)>& conv) {
  auto view = [&](int id) -> View {
    const PlanBuffer& b = p.buffers[id];
    return {b.constant ? const_cast<float*>(weights) + b.offset : arena + b.offset, b.shape, b.channels_last};
  };
  const Attributes& a = s.attributes;
  const View y = view(s.output);
  auto x = [&](size_t i) -> ConstView { return view(s.inputs[i]); };
  switch (s.kind) {
    case StepKind::Conv:
    case StepKind::ConvTranspose:
    {
      const int bias = conv_bias_input(s), residual = conv_residual_input(s);
      conv(s, ConvOperands{x(0).data, x(1).data, bias >= 0 ? view(bias).data : nullptr,
                           residual >= 0 ? view(residual).data : nullptr, y.data});
      return;
    }
    case StepKind::Unary: ops::unary(x(0), y, unary_of(s.op), a.alpha, a.clip_min, a.clip_max, a.beta); return;
    case StepKind::Binary: ops::binary(x(0), x(1), y, binary_of(s.op)); return;
    case StepKind::MaxPool: ops::max_pool(x(0), window_of(a), y); return;
    case StepKind::AveragePool: ops::average_pool(x(0), window_of(a), a.count_include_pad, y); return;
    case StepKind::GlobalPool: ops::global_pool(x(0), s.op == Op::GlobalMaxPool, y); return;
    case StepKind::Gemm: {
      const ConstView c = s.inputs.size() > 2 ? x(2) : ConstView{};
      ops::gemm(x(0), x(1), s.inputs.size() > 2 ? &c : nullptr, a.alpha, a.beta, a.trans_a, a.trans_b, y);
      return;
    }
    case StepKind::MatMul: ops::matmul(x(0), x(1), y); return;
    case StepKind::Concat: {
      std::vector<ConstView> xs;
      for (size_t i = 0; i < s.inputs.size(); ++i) xs.push_back(x(i));
      ops::concat(xs, a.axis, y, a.indices);
      return;
    }
    case StepKind::Copy: {
      // A layout conversion, or a relabelling of the same values (Flatten, Reshape,
      // Identity): copy in the input's shape, into the output's layout.
      const ConstView in = x(0);
      copy_layout(in, View{y.data, in.shape, y.channels_last && in.shape == y.shape});
      return;
    }
    case StepKind::Transpose: ops::transpose(x(0), a.perm, y); return;
    case StepKind::BatchNorm: ops::batch_norm(x(0), x(1), x(2), x(3), x(4), a.epsilon, y); return;
    case StepKind::LRN: ops::lrn(x(0), a.size, a.alpha, a.beta, a.lrn_bias, y); return;
    case StepKind::Pad: ops::pad(x(0), a.pad_amounts, a.pad_value, y); return;
    case StepKind::Slice: ops::slice(x(0), a.slice_first, a.slice_step, y); return;
    case StepKind::Resize: ops::resize(x(0), a.resize, y); return;
    case StepKind::Gather: ops::gather(x(0), a.axis, a.indices, y); return;
    case StepKind::DepthSpace: ops::depth_space(x(0), y, a.blocksize, a.crd, s.op == Op::DepthToSpace, false); return;
    case StepKind::LayerNorm: {
      const ConstView scale = s.inputs[1] >= 0 ? x(1) : ConstView{}, bias = s.inputs[2] >= 0 ? x(2) : ConstView{};
      ops::layer_norm(x(0), scale.data, scale.data ? scale.elements() : 0, bias.data, bias.data ? bias.elements() : 0,
                      a.axis, a.epsilon, y);
      return;
    }
    case StepKind::Reduce: ops::reduce(x(0), a.axes, reduce_of(s.op), y); return;
    case StepKind::NllLoss:
      ops::nll_loss(x(0), a.indices, s.inputs[1] >= 0 ? x(1).data : nullptr, a.has_ignore_index, a.ignore_index,
                    a.loss_reduction, y);
      return;
    case StepKind::Softmax: ops::softmax(x(0), a.axis, a.softmax_coerce_2d, s.op == Op::LogSoftmax, y); return;
  }
}

std::vector<int64_t> ModelExecutor::batch_shape(const std::string& value) const {
  return whole_batch_shape(g_.value(value).shape, calls_);
}

int64_t ModelExecutor::arena_floats_allocated() const {
  return calls_ == 1 ? plan_.arena_floats : plan_.arena_floats * static_cast<int64_t>(call_arenas_->arenas());
}

void ModelExecutor::run_call(const std::map<std::string, Tensor>& inputs, int64_t call, float* arena,
                             std::vector<Tensor>& outputs, std::vector<double>* ms) {
  // Dimension 0 is outermost in ONNX order: a call's samples are one contiguous block.
  for (size_t i = 0; i < g_.inputs.size(); ++i) {
    const PlanBuffer& b = plan_.buffers[plan_.inputs[i]];
    const float* samples = inputs.at(g_.inputs[i]).data.data() + call * b.elements();
    copy_layout(ConstView{samples, b.shape, false}, View{arena + b.offset, b.shape, false});
  }
  auto conv = [&](const PlanStep& s, const ConvOperands& o) {
    if (s.kind == StepKind::Conv) {
      kernels_->by_layer.at(s.node)->run(o.x, o.w, o.bias, o.y, o.residual);
      return;
    }
    // A ConvTranspose: its input is the convolution's dY, its output the convolution's dX.
    kernels_->transposed_by_layer.at(s.node)->run(o.x, o.w, nullptr, o.y);
    const ConvDescriptor& d = s.descriptor;
    if (o.bias) ops::add_channel_bias(o.y, d.mb * d.ih * d.iw, d.ic, o.bias);
  };
  for (size_t k = 0; k < plan_.steps.size(); ++k) {
    const auto start = std::chrono::steady_clock::now();
    run_plan_step(plan_.steps[k], plan_, arena, weights_.data(), conv);
    if (ms) (*ms)[k] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  for (size_t i = 0; i < plan_.outputs.size(); ++i) {
    const PlanBuffer& b = plan_.buffers[plan_.outputs[i]];
    const float* src = b.constant ? weights_.data() + b.offset : arena + b.offset;
    std::copy(src, src + b.elements(), outputs[i].data.begin() + call * b.elements());
  }
}

std::vector<Tensor> ModelExecutor::run(const std::map<std::string, Tensor>& inputs) {
  for (const std::string& name : g_.inputs) {
    auto it = inputs.find(name);
    if (it == inputs.end()) throw Error(ExitCode::BadData, fmt::format("{}: no data for input '{}'", g_.source, name));
    if (it->second.shape != batch_shape(name))
      throw Error(ExitCode::BadData, fmt::format("{}: input '{}' has the wrong shape", g_.source, name));
  }
  std::vector<Tensor> outputs;
  for (const std::string& name : g_.outputs) outputs.emplace_back(batch_shape(name), false);
  std::vector<double> ms(profiling_ ? plan_.steps.size() : 0, 0.0);
  int64_t timed_calls = 1;  // the calls whose steps `ms` sums
  if (calls_ == 1) {
    run_call(inputs, 0, arena_.data(), outputs, profiling_ ? &ms : nullptr);
  } else {
    timed_calls = 0;
    call_arenas_->run(calls_, [&](int64_t call, int thread, float* arena) {
      if (thread == 0) ++timed_calls;
      run_call(inputs, call, arena, outputs, profiling_ && thread == 0 ? &ms : nullptr);
    });
  }
  profile_.clear();
  for (size_t k = 0; k < ms.size(); ++k) {
    const PlanStep& s = plan_.steps[k];
    StepTiming t;
    t.node = s.node;
    t.op = s.op;
    t.ms = ms[k];
    if (s.kind == StepKind::Conv || s.kind == StepKind::ConvTranspose) {
      t.flops = s.descriptor.flops() * static_cast<double>(timed_calls);
      // Calls on several threads measure each other's heap: only a lone call's is its own.
      t.workspace_bytes = calls_ == 1 ? kernels_->last_workspace_bytes(s.node) : 0;
    }
    profile_.push_back(t);
  }
  return outputs;
}

}  // namespace convgen::model
