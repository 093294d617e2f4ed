
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_impl.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/operators.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

int64_t default_micro_batch(int64_t batch) {
  // Four micro-batches or more per mini-batch, as large as that allows: large enough for
  // efficient kernels and few private gradient copies, enough to share among threads.
  for (int64_t m = std::max<int64_t>(1, batch / 4); m >= 1; --m)
    if (batch % m == 0) return m;
  return 1;
}

int64_t checked_micro_batch(const TrainerOptions& options) {
  if (options.batch < 1) throw Error(ExitCode::Usage, "--batch must be at least 1");
  if (options.threads < 1) throw Error(ExitCode::Usage, "--threads must be at least 1");
  const int64_t m = options.micro_batch > 0 ? options.micro_batch : default_micro_batch(options.batch);
  if (m > options.batch)
    throw Error(ExitCode::Usage, fmt::format("--micro-batch {} is larger than --batch {}", m, options.batch));
  return m;
}

Trainer::Trainer(TrainGraph graph, const TrainerOptions& options, const TargetInfo& t, TrainConvFactory make_conv,
                 std::vector<std::string>* why)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = options;
  s.m = checked_micro_batch(s.options);
  s.options.micro_batch = s.m;
  if (graph.graph.batch != s.m)
    throw Error(ExitCode::Internal, fmt::format("trainer: graph bound to batch {}, micro-batch {}", graph.graph.batch, s.m));
  if (!make_conv) throw Error(ExitCode::Internal, "trainer: no convolution factory");
  s.target = t;
  s.why = why;
  s.group = s.options.group.get();
  s.make_conv = std::move(make_conv);
  s.tg = std::move(graph);
  s.index_values();
  s.choose_deferred_gradients();
  s.choose_conv_layers();
  s.gemm_seconds.assign(3 * s.tg.graph.nodes.size() + 3, 0.0);
  s.update_seconds.assign(static_cast<size_t>(std::max(1, s.options.threads)), 0.0);
  s.whole_batch_seconds.assign(static_cast<size_t>(std::max(1, s.options.threads)), 0.0);
  // Every map the threads read is complete before any step: no insertion under threads.
  for (size_t i = 0; i < s.tg.graph.nodes.size(); ++i)
    if (s.tg.graph.nodes[i].op == Op::BatchNormalization) s.batch_stats[i];
  s.train_phases = s.make_phases(s.tg.graph, true);
  s.eval_phases = s.make_phases(s.tg.graph, false);
  s.plan_gradient_memory();
  s.plan_updates();
  s.plan_gradient_buckets();
  const int64_t full_micro = (s.options.batch + s.m - 1) / s.m;
  s.intra = s.options.threads > 1 && (s.options.intra_kernel || full_micro < s.options.threads);
  if (s.why) s.why->push_back(s.memory_plan());
}

Trainer::~Trainer() = default;

std::vector<NodeTime> Trainer::profile() const {
  const Impl& s = *impl_;
  const size_t nodes = s.tg.graph.nodes.size();
  std::vector<double> total = s.gemm_seconds;
  for (const Impl::Slot& slot : s.slots)
    for (size_t i = 0; i < slot.seconds.size(); ++i) total[i] += slot.seconds[i];
  std::vector<NodeTime> out;
  const char* passes[] = {"forward", "backward", "statistics"};
  for (size_t n = 0; n <= nodes; ++n)
    for (int p = 0; p < 3; ++p) {
      if (total[3 * n + p] == 0.0) continue;
      const bool loss = n == nodes;
      out.push_back({loss ? "loss" : s.tg.graph.nodes[n].name, loss ? "SoftmaxCrossEntropy" : op_name(s.tg.graph.nodes[n].op),
                     passes[p], total[3 * n + p]});
    }
  // Wall time of the step's parts; "waiting" is thread-seconds idle at the phases' ends.
  const char* parts[] = {"phases", "waiting", "combines", "tail:dW+updates", "packing weights", "updates",
                         "whole-batch weight gradients", "step", "communication", "exposed communication"};
  static_assert(sizeof(parts) / sizeof(parts[0]) == Impl::kStepParts, "a name per step part");
  std::array<double, Impl::kStepParts> seconds = s.step_seconds;
  for (double t : s.update_seconds) seconds[Impl::kUpdates] += t;
  for (double t : s.whole_batch_seconds) seconds[Impl::kWholeBatchGradients] += t;
  for (int p = 0; p < Impl::kStepParts; ++p) {
    const bool thread_time = p == Impl::kWaiting || p == Impl::kUpdates || p == Impl::kWholeBatchGradients;
    if (seconds[p] != 0.0 || (s.distributed() && p >= Impl::kStep))
      out.push_back({"(step)", parts[p], thread_time ? "threads" : "wall", seconds[p]});
  }
  // The step less the time it waited on exchanges (posted ones travel beside computation).
  if (s.distributed())
    out.push_back({"(step)", "compute", "wall", s.step_seconds[Impl::kStep] - s.step_seconds[Impl::kExposed]});
  for (size_t t = 0; t < s.thread_busy.size(); ++t)
    out.push_back({"(step)", fmt::format("thread {} busy", t), "thread", s.thread_busy[t]});
  return out;
}

Trainer::ExchangeVolume Trainer::exchange_volume() const {
  return {impl_->exchanged_bytes, impl_->gradient_bytes, impl_->ring_bytes};
}

void Trainer::prepare(int64_t count) {
  Impl& s = *impl_;
  if (count < 1 || count > s.options.batch)
    throw Error(ExitCode::Internal, fmt::format("trainer: prepare({}) with batch size {}", count, s.options.batch));
  s.ensure_batch_kernels(count);
}

StepStats Trainer::train_step(const float* pixels, const int32_t* labels, int64_t count) {
  return impl_->run_batch(pixels, labels, count, true);
}

std::pair<int64_t, int64_t> Trainer::samples_of_this_rank(int64_t count) const {
  return impl_->distributed() ? impl_->samples_of_rank(count, impl_->group->rank()) : std::pair<int64_t, int64_t>(0, count);
}

StepStats Trainer::evaluate(const float* pixels, const int32_t* labels, int64_t count) {
  return impl_->run_batch(pixels, labels, count, false);
}

void Trainer::forward(const float* pixels, int64_t count, float* logits) {
  Impl& s = *impl_;
  const std::vector<int32_t> no_labels(static_cast<size_t>(std::max<int64_t>(count, 0) * s.tg.label_elements), 0);
  s.run_batch(pixels, no_labels.data(), count, false);
  // Across ranks, every rank's logits to every rank first.
  if (s.distributed()) s.share_samples(s.batch_act[s.logits].data(), s.values[s.logits].sample_elements);
  // Each micro-batch's logits, in sample order, dense (a segmentation map is NCHW).
  float* out = logits;
  for (int64_t i = 0; i < s.active; ++i) {
    const int64_t n = std::min(s.m, count - i * s.m);
    const float* from = s.batch_act[s.logits].data() + i * s.m * s.values[s.logits].sample_elements;
    const ConstView v{from, s.shape_at(s.logits, n), s.values[s.logits].channels_last};
    copy_layout(v, View{out, v.shape, false});
    out += v.elements();
  }
}

std::vector<std::vector<float>> Trainer::last_gradients() const {
  const Impl& s = *impl_;
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < s.parameters.size(); ++p) {
    if (const Impl::ConvLayer* L = s.cropped_gradient_of[p]) {
      out.emplace_back(s.parameters[p].value.size());
      expand_weight_gradient_elements(L->full, L->taps, L->cropped_dw.data(), 0, int64_t(out.back().size()),
                                      out.back().data());
      continue;
    }
    const FloatBuffer& g = s.deferred_param[p]   ? s.deferred_grad[p]
                           : s.distributed() ? s.reduced_grad.at(p)
                                             : s.slots.at(0).param_grad[p];  // the tree's root
    out.emplace_back(g.begin(), g.end());
  }
  return out;
}

const std::vector<Parameter>& Trainer::parameters() const { return impl_->parameters; }
std::vector<Parameter>& Trainer::parameters() { return impl_->parameters; }
std::vector<std::pair<std::string, std::vector<float>>> Trainer::state_tensors() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const std::string& name : impl_->state_names)
    out.emplace_back(name, impl_->frozen[impl_->values[impl_->value_id.at(name)].frozen]);
  return out;
}

void Trainer::set_state_tensor(const std::string& name, const std::vector<float>& data) {
  auto it = impl_->value_id.find(name);
  if (it == impl_->value_id.end() || !impl_->values[it->second].state)
    throw Error(ExitCode::Internal, fmt::format("trainer: no state tensor '{}'", name));
  std::vector<float>& to = impl_->frozen[impl_->values[it->second].frozen];
  if (to.size() != data.size()) throw Error(ExitCode::Internal, fmt::format("trainer: state tensor '{}' size", name));
  to = data;
}

int64_t Trainer::steps_taken() const { return impl_->steps; }
void Trainer::set_steps_taken(int64_t steps) { impl_->steps = steps; }
void Trainer::set_learning_rate(float lr) { impl_->options.lr = lr; }
const TrainGraph& Trainer::graph() const { return impl_->tg; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
int64_t Trainer::micro_batch() const { return impl_->m; }

TrainerMemory Trainer::memory() const { return impl_->memory(); }

std::string Trainer::parallel_modes() const {
  std::string out;
  for (const auto& [node, layer] : impl_->conv_layers)
    out += (out.empty() ? "" : ",") + impl_->tg.graph.nodes[node].name + "=" + parallel_mode_name(layer.mode);
  return out;
}

std::map<std::string, ParallelMode> Trainer::parallel_mode_of_layer() const {
  std::map<std::string, ParallelMode> out;
  for (const auto& [node, layer] : impl_->conv_layers) out[impl_->tg.graph.nodes[node].name] = layer.mode;
  return out;
}

std::vector<std::string> Trainer::batched_layers() const {
  std::vector<std::string> out;
  for (const auto& [node, layer] : impl_->conv_layers)
    if (layer.batched) out.push_back(impl_->tg.graph.nodes[node].name);
  return out;
}

std::string Trainer::execution_key() const {
  std::string batched;
  for (const std::string& name : batched_layers()) batched += (batched.empty() ? "" : ",") + name;
  return parallel_modes() + " batched=" + batched;
}

double Trainer::step_flops(int64_t count) const {
  const Impl& s = *impl_;
  double flops = 0.0;
  for (const Node& n : s.tg.graph.nodes) {
    if (is_conv_layer(n.op)) {
      ConvDescriptor d = conv_layer_descriptor(s.tg.graph, n);
      d.mb = count;
      const bool data_pass = s.values[s.value_id.at(n.inputs[0])].requires_grad;
      flops += d.flops() * (data_pass ? 3.0 : 2.0);
    } else if (n.op == Op::Gemm || n.op == Op::MatMul) {
      const auto& a = s.tg.graph.value(n.inputs[0]).shape;
      const auto& b = s.tg.graph.value(n.inputs[1]).shape;
      const bool ta = n.op == Op::Gemm && n.attributes.trans_a, tb = n.op == Op::Gemm && n.attributes.trans_b;
      const double k = double(ta ? a[0] : a[1]), cols = double(tb ? b[0] : b[1]);
      const bool data_pass = s.values[s.value_id.at(n.inputs[0])].requires_grad;
      flops += 2.0 * double(count) * k * cols * (data_pass ? 3.0 : 2.0);
    }
  }
  return flops;
}

}  // namespace convgen::model
