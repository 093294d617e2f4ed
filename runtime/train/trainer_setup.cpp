// Setting up: what the trainer knows of each value, the layers' kernels, a micro-batch's buffers.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "runtime/graph/operators.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

void Trainer::Impl::choose_deferred_gradients() {
  const Graph& g = tg.graph;
  deferred_node.assign(g.nodes.size(), 0);
  deferred_param.assign(parameters.size(), 0);
  deferred_grad.assign(parameters.size(), {});
  std::map<std::string, int> uses;
  for (const Node& n : g.nodes)
    for (const std::string& in : n.inputs) ++uses[in];
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op != Op::Gemm && n.op != Op::MatMul) continue;
    if (n.op == Op::Gemm && n.attributes.trans_a) continue;
    if (g.value(n.inputs[0]).shape.size() != 2) continue;  // a MatMul of [N, ..., K] rows: per micro-batch
    const int w = id(n.inputs[1]);
    if (values[w].parameter < 0 || uses[n.inputs[1]] != 1) continue;
    const bool has_c = n.op == Op::Gemm && n.inputs.size() > 2 && !n.inputs[2].empty();
    if (has_c) {
      // C: a bias parameter [N] read by this node alone; anything else stays per micro-batch.
      const int c = id(n.inputs[2]);
      if (values[c].parameter < 0 || uses[n.inputs[2]] != 1 || values[c].shape.size() != 1 ||
          values[c].shape[0] != values[id(n.outputs[0])].sample_elements)
        continue;
    }
    deferred_node[i] = 1;
    BatchedGemm bg;
    for (int input : {1, 2}) {
      if (static_cast<size_t>(input) >= n.inputs.size() || n.inputs[input].empty()) continue;
      const int v = id(n.inputs[input]);
      if (values[v].parameter < 0) continue;
      deferred_param[values[v].parameter] = 1;
      deferred_grad[values[v].parameter].assign(parameters[values[v].parameter].value.size(), 0.0f);
      if (input == 2) bg.bias_param = values[v].parameter;
    }
    const Attributes& at = n.attributes;
    bg.as_conv = n.op == Op::Gemm && at.trans_b && at.alpha == 1.0f && (!has_c || at.beta == 1.0f);
    batched[i] = std::move(bg);
  }
}

void Trainer::Impl::index_values() {
  const Graph& g = tg.graph;
  std::map<std::string, int> trainable;
  for (size_t i = 0; i < tg.trainable.size(); ++i) trainable[tg.trainable[i]] = static_cast<int>(i);
  for (const auto& [name, v] : g.values) {
    ValueInfo info;
    info.name = name;
    info.shape = v.shape;
    info.constant = v.is_constant;
    if (v.is_constant) {
      auto t = trainable.find(name);
      if (t != trainable.end()) {
        info.parameter = t->second;
      } else {
        info.frozen = static_cast<int>(frozen.size());
        std::vector<float> data = v.data;
        if (v.is_int64) data.assign(v.int64_data.begin(), v.int64_data.end());
        frozen.push_back(std::move(data));
      }
    } else {
      info.channels_last = v.shape.size() == 3 || v.shape.size() == 4;
      int64_t e = 1;
      for (size_t d = 1; d < v.shape.size(); ++d) e *= v.shape[d];
      info.sample_elements = e;
    }
    value_id[name] = static_cast<int>(values.size());
    values.push_back(std::move(info));
  }
  // A MatMul over the last axis of a tensor of rank 3 or 4 (ConvNeXt's Linear layers on
  // [N, H, W, C]) reads and writes it as rows of a dense matrix.
  // (LayerNormalization and Gather convert to dense rows themselves -- a channel Gather
  // runs channels-last -- since their inputs are often a convolution's.)
  for (const Node& n : g.nodes)
    if (n.op == Op::MatMul || n.op == Op::Gemm)
      for (const std::string& name : {n.inputs[0], n.outputs[0]}) values[value_id.at(name)].channels_last = false;
  parameters.resize(tg.trainable.size());
  for (size_t i = 0; i < tg.trainable.size(); ++i) {
    const Value& v = g.value(tg.trainable[i]);
    parameters[i] = Parameter{v.name, v.shape, v.data, std::vector<float>(v.data.size(), 0.0f)};
  }
  for (const Node& n : g.nodes) {
    bool any = false;
    for (const std::string& in : n.inputs)
      if (!in.empty()) any = any || values[id(in)].requires_grad || values[id(in)].parameter >= 0;
    for (const std::string& out : n.outputs) values[id(out)].requires_grad = any;
  }
  for (const Node& n : g.nodes)
    if (n.op == Op::BatchNormalization)
      for (int i : {3, 4}) {
        ValueInfo& v = values[id(n.inputs[i])];
        if (v.frozen < 0)
          throw Error(ExitCode::Unsupported, fmt::format("{}: node '{}' (BatchNormalization): not supported in "
                                                         "training: running statistics that are not initializers",
                                                         g.source, n.name));
        if (!v.state) state_names.push_back(v.name);
        v.state = true;
      }
  input = id(tg.input);
  logits = id(tg.logits);
  if (!values[logits].requires_grad)
    throw Error(ExitCode::Unsupported, fmt::format("{}: not supported in training: no trainable parameter reaches "
                                                   "the logits '{}'", g.source, tg.logits));
}

void Trainer::Impl::ensure_kernels(int64_t n) {
  const Graph& g = tg.graph;
  for (size_t index = 0; index < g.nodes.size(); ++index) {
    const Node& node = g.nodes[index];
    if (!is_conv_layer(node.op) || conv_layers.at(index).batched) continue;  // batched: over the mini-batch only
    auto key = std::make_pair(index, n);
    if (kernels.count(key)) continue;
    TrainConv* k = conv_kernels(index, n, intra, true);
    if (why) why->push_back(fmt::format("{}: {}", node.name, k->describe()));
    kernels.emplace(key, k);
  }
}

void Trainer::Impl::ensure_batch_kernels(int64_t count) {
  if (std::find(prepared_counts.begin(), prepared_counts.end(), count) != prepared_counts.end()) return;
  // Compiling (or loading) kernels can take minutes, and one rank's kernel cache may be
  // cold where another's is warm: the others' watchdogs are told not to count it.
  struct Busy {
    ProcessGroup* group;
    explicit Busy(ProcessGroup* g) : group(g) {
      if (group) group->busy(true);
    }
    ~Busy() {
      if (group) group->busy(false);
    }
  } busy(distributed() ? group : nullptr);
  const int64_t micro = (count + m - 1) / m, last = count - (micro - 1) * m;
  ensure_kernels(m);
  if (last != m) ensure_kernels(last);
  for (auto& entry : batched) gemm_conv(entry.first, count);
  // Whole-batch layers' weight gradients: one kernel over the mini-batch, its parallel
  // variant on all threads (T only decides how many run it).
  for (auto& [index, layer] : conv_layers) {
    if (layer.mode != ParallelMode::WholeBatch || layer.whole_batch.count(count)) continue;
    TrainConv* k = conv_kernels(index, count, true, layer.batched);
    if (why)
      why->push_back(fmt::format("{}: {} over {} samples: {}", tg.graph.nodes[index].name,
                                 layer.batched ? "every pass" : "weight gradient", count, k->describe()));
    layer.whole_batch.emplace(count, k);
  }
  prepared_counts.push_back(count);
}

void Trainer::Impl::allocate_batch_buffers() {
  if (!batch_act.empty()) return;
  batch_act.resize(values.size());
  batch_grad.resize(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueInfo& v = values[i];
    if (v.constant) continue;
    batch_act[i].allocate(static_cast<size_t>(v.sample_elements * options.batch));
    if (v.requires_grad && grad_offset[i] < 0)
      batch_grad[i].allocate(static_cast<size_t>(v.sample_elements * options.batch));
  }
}

TrainerMemory Trainer::Impl::memory() const {
  TrainerMemory r;
  const int64_t micro = (options.batch + m - 1) / m;
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueInfo& v = values[i];
    if (v.constant) continue;
    r.activations += v.sample_elements * options.batch;
    if (!v.requires_grad) continue;
    r.unshared_gradients += v.sample_elements * options.batch;
    if (grad_offset[i] < 0) r.gradients += v.sample_elements * options.batch;
  }
  r.gradients += grad_arena_floats * micro;
  for (size_t p = 0; p < parameters.size(); ++p) {
    const int64_t n = static_cast<int64_t>(parameters[p].value.size());
    if (!deferred_param[p]) r.private_weight_gradients += n * micro;
    else if (!cropped_gradient_of[p]) r.whole_batch_weight_gradients += n;
  }
  return r;
}

std::string Trainer::Impl::memory_plan() const {
  const TrainerMemory r = memory();
  const auto mib = [](int64_t floats) { return double(floats) * 4.0 / (1024.0 * 1024.0); };
  return fmt::format("memory: activations {:.1f} MiB; their gradients {:.1f} MiB, shared by lifetime ({:.1f} MiB "
                     "one buffer each); weight gradients {:.1f} MiB private to the {} micro-batches and {:.1f} MiB "
                     "whole-batch",
                     mib(r.activations), mib(r.gradients), mib(r.unshared_gradients), mib(r.private_weight_gradients),
                     (options.batch + m - 1) / m, mib(r.whole_batch_weight_gradients));
}

void Trainer::Impl::prepare_slot(Slot& slot, int64_t n) {
  const int64_t index = slot.first_sample / m;
  if (slot.size == n && slot.index == index && !slot.act.empty()) return;
  slot.size = n;
  slot.index = index;
  slot.act.assign(values.size(), {});
  slot.grad.assign(values.size(), {});
  if (!slot.grad_arena.data() && grad_arena_floats > 0) {
    slot.grad_arena.allocate(static_cast<size_t>(grad_arena_floats));
    std::fill(slot.grad_arena.data(), slot.grad_arena.data() + grad_arena_floats, 0.0f);
  }
  // This micro-batch's samples of every whole-batch buffer, zeroed here: first touched by
  // the thread that always runs this micro-batch.
  for (size_t i = 0; i < values.size(); ++i) {
    const ValueInfo& v = values[i];
    if (v.constant) continue;
    const size_t first = static_cast<size_t>(slot.first_sample * v.sample_elements), len = static_cast<size_t>(v.sample_elements * n);
    slot.act[i] = {batch_act[i].data() + first, len};
    std::fill(slot.act[i].begin(), slot.act[i].end(), 0.0f);
    if (!v.requires_grad) continue;
    slot.grad[i] = {grad_offset[i] >= 0 ? slot.grad_arena.data() + grad_offset[i] : batch_grad[i].data() + first, len};
    std::fill(slot.grad[i].begin(), slot.grad[i].end(), 0.0f);
  }
  slot.param_grad.assign(parameters.size(), {});
  for (size_t p = 0; p < parameters.size(); ++p)
    if (!deferred_param[p]) slot.param_grad[p].assign(parameters[p].value.size(), 0.0f);
  slot.masks.assign(tg.graph.nodes.size(), {});
  slot.bn_partial.assign(tg.graph.nodes.size(), {});
  slot.argmax.assign(tg.graph.nodes.size(), {});
  slot.grad_written.assign(values.size(), 0);
  slot.param_written.assign(parameters.size(), 0);
}

void Trainer::Impl::load_input(Slot& slot, const float* pixels) {
  const View in = view(slot, input);
  copy_layout(ConstView{pixels, in.shape, false}, in);
}

}  // namespace convgen::model
