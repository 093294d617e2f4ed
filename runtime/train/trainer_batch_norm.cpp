// BatchNormalization in training mode: per-micro-batch sums, combined by the pairwise tree.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <cmath>

#include "runtime/ops/tensor.h"
#include "runtime/train/batch_norm_kernels.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

auto Trainer::Impl::walk(Slot& slot, int v) -> ChannelWalk {
  const View x = view(slot, v);
  if (!x.channels_last && x.rank() > 2)
    throw Error(ExitCode::Internal, "trainer: BatchNormalization expects channels-last or 2-D activations");
  return {x.shape[1], x.elements() / x.shape[1]};
}

void Trainer::Impl::bn_partial_sums(Slot& slot, size_t node_index, Action a) {
  const Node& n = tg.graph.nodes[node_index];
  const int xv = id(n.inputs[0]);
  const ChannelWalk w = walk(slot, xv);
  const float* x = view(slot, xv).data;
  std::vector<double>& acc = slot.bn_partial[node_index];
  acc.assign(static_cast<size_t>(2 * w.channels), 0.0);
  const BatchStats& st = batch_stats.at(node_index);
  if (a == Action::BnSums) {
    bn::add_shifted_moments(x, w.pixels, w.channels, moments_shift(n), acc.data(), acc.data() + w.channels);
  } else {
    const int out = id(n.outputs[0]);
    if (!slot.grad_written[out]) std::fill(slot.grad[out].begin(), slot.grad[out].end(), 0.0f), slot.grad_written[out] = 1;
    const float* dy = slot.grad[out].data();
    bn::add_gradient_sums(x, dy, fused_activation(slot, node_index), w.pixels, w.channels, st.mean.data(), st.invstd.data(), acc.data(),
                          acc.data() + w.channels);
    // This micro-batch's scale and bias gradients; the parameter tree adds them up.
    for (int input : {1, 2}) {
      const int v = id(n.inputs[input]);
      if (values[v].parameter < 0) continue;
      const Target t = target_for(slot, v);
      for (int64_t c = 0; c < w.channels; ++c) {
        const float g = float(acc[input == 1 ? w.channels + c : c]);
        t.view.data[c] = t.accumulate ? t.view.data[c] + g : g;
      }
    }
  }
}

// The per-channel shift of the moments' sums: the running mean as the step found it
// (the same for every micro-batch and thread count, and near the batch mean once
// training runs, so S2/n - (S1/n)^2 cancels little).
const float* Trainer::Impl::moments_shift(const Node& n) const {
  return frozen[values[id(n.inputs[3])].frozen].data();
}

std::vector<double> Trainer::Impl::combined(size_t node_index) {
  std::vector<std::vector<double>*> parts;
  for (int64_t i = 0; i < active; ++i) parts.push_back(&slots[i].bn_partial[node_index]);
  for (size_t stride = 1; stride < parts.size(); stride *= 2)
    for (size_t i = 0; i + stride < parts.size(); i += 2 * stride)
      for (size_t c = 0; c < parts[i]->size(); ++c) (*parts[i])[c] += (*parts[i + stride])[c];
  return *parts[0];
}

void Trainer::Impl::combine(Action a, size_t node_index) {
  const Node& n = tg.graph.nodes[node_index];
  BatchStats& st = batch_stats.at(node_index);
  const std::vector<double> total = combined(node_index);
  const int64_t channels = int64_t(total.size() / 2);
  const double elements = double(batch_count) * double(values[id(n.inputs[0])].sample_elements / channels);
  if (a == Action::BnSums) {
    st.mean.resize(static_cast<size_t>(channels));
    st.var.resize(static_cast<size_t>(channels));
    st.invstd.resize(static_cast<size_t>(channels));
    st.alpha.resize(static_cast<size_t>(channels));
    st.beta.resize(static_cast<size_t>(channels));
    // The shift the sums were taken around: read before the running mean moves.
    const float* shift = moments_shift(n);
    float* running_mean = frozen[values[id(n.inputs[3])].frozen].data();
    float* running_var = frozen[values[id(n.inputs[4])].frozen].data();
    const float momentum = n.attributes.momentum;  // ONNX: running = momentum * running + (1 - momentum) * batch
    for (int64_t c = 0; c < channels; ++c) {
      const double offset = total[c] / elements;  // mean - shift
      st.mean[c] = double(shift[c]) + offset;
      st.var[c] = std::max(0.0, total[channels + c] / elements - offset * offset);
      st.invstd[c] = float(1.0 / std::sqrt(st.var[c] + double(n.attributes.epsilon)));
      const double unbiased = elements > 1 ? st.var[c] * (elements / (elements - 1)) : st.var[c];
      running_mean[c] = momentum * running_mean[c] + (1.0f - momentum) * float(st.mean[c]);
      running_var[c] = momentum * running_var[c] + (1.0f - momentum) * float(unbiased);
    }
    // y = x * alpha + beta per channel, PyTorch's CPU form; kept for a fused Clip's backward.
    // Scale and bias are parameters, the same in every slot, and do not move before the
    // step's updates.
    const float* scale = view(slots[0], id(n.inputs[1])).data;
    const float* bias = view(slots[0], id(n.inputs[2])).data;
    for (int64_t c = 0; c < channels; ++c) {
      st.alpha[c] = st.invstd[c] * scale[c];
      st.beta[c] = bias[c] - float(st.mean[c]) * st.alpha[c];
    }
  } else {
    st.dy_sum.assign(total.begin(), total.begin() + channels);
    st.dy_xhat_sum.assign(total.begin() + channels, total.end());
  }
}

void Trainer::Impl::batch_norm_forward(Slot& slot, size_t node_index) {
  const Node& n = tg.graph.nodes[node_index];
  const int xv = id(n.inputs[0]);
  const ChannelWalk w = walk(slot, xv);
  const float* x = view(slot, xv).data;
  float* y = view(slot, id(n.outputs[0])).data;
  const BatchStats& st = batch_stats.at(node_index);
  bn::scale_shift(x, w.pixels, w.channels, st.alpha.data(), st.beta.data(), fused_activation(slot, node_index), y);
}

bn::FusedActivation Trainer::Impl::fused_activation(Slot& slot, size_t node_index) {
  const Node& n = tg.graph.nodes[node_index];
  bn::FusedActivation act;
  if (n.attributes.fused_relu) {
    act.kind = bn::Fused::Relu;
    act.y = view(slot, id(n.outputs[0])).data;
  } else if (n.attributes.fused_clip) {
    const BatchStats& st = batch_stats.at(node_index);
    act.kind = bn::Fused::Clip;
    act.alpha = st.alpha.data();
    act.beta = st.beta.data();
    act.lo = n.attributes.clip_min;
    act.hi = n.attributes.clip_max;
  }
  return act;
}

void Trainer::Impl::batch_norm_backward(Slot& slot, size_t node_index) {
  const Node& n = tg.graph.nodes[node_index];
  const int xv = id(n.inputs[0]);
  if (!values[xv].requires_grad) return;
  const ChannelWalk w = walk(slot, xv);
  const float* x = view(slot, xv).data;
  const int out = id(n.outputs[0]);
  const float* dy = slot.grad[out].data();
  const float* scale = view(slot, id(n.inputs[1])).data;
  const BatchStats& st = batch_stats.at(node_index);
  const double elements = double(batch_count) * double(w.pixels / slot.size);
  const Target t = target_for(slot, xv);
  // dx = scale * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means over the mini-batch.
  const size_t channels = static_cast<size_t>(w.channels);
  std::vector<double> a(channels), m1(channels), m2(channels);
  for (size_t c = 0; c < channels; ++c) {
    a[c] = double(scale[c]) * double(st.invstd[c]);
    m1[c] = st.dy_sum[c] / elements;
    m2[c] = st.dy_xhat_sum[c] / elements;
  }
  bn::input_gradient(x, dy, fused_activation(slot, node_index), w.pixels, w.channels, st.mean.data(), st.invstd.data(), a.data(), m1.data(), m2.data(),
                     t.accumulate, t.view.data);
}

}  // namespace convgen::model
