// Gradients summed over micro-batches by the fixed tree, then the SGD update.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <chrono>

#include <omp.h>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"

namespace convgen::model {

namespace {
constexpr int64_t kUpdateChunk = 16384;  // floats of one parameter per work item
}  // namespace

void Trainer::Impl::plan_updates() {
  const size_t count = train_phases.size();
  // The last phase that reads each parameter or writes its gradient in the backward;
  // its gradient is complete, and the weight no longer read, once that phase has ended.
  std::vector<int64_t> last_use(parameters.size(), -1);
  auto touch = [&](size_t node, size_t phase) {
    for (const std::string& name : tg.graph.nodes[node].inputs) {
      const int v = id(name);
      if (v >= 0 && values[v].parameter >= 0)
        last_use[values[v].parameter] = std::max<int64_t>(last_use[values[v].parameter], int64_t(phase));
    }
  };
  bool backward = false;
  for (size_t ph = 0; ph < count; ++ph) {
    for (const Step& st : train_phases[ph].steps) {
      backward = backward || st.action == Action::Loss;
      if (backward && (st.action == Action::Backward || st.action == Action::BnBackwardSums)) touch(st.node, ph);
    }
    if (train_phases[ph].combine == Action::GemmBackward || train_phases[ph].combine == Action::ConvBackward)
      touch(train_phases[ph].combine_node, ph);
  }
  // A whole-batch layer's gradient is computed in the phase after its backward's.
  for (size_t ph = 0; ph < count; ++ph)
    for (size_t node : train_phases[ph].weight_gradients_ready) {
      const ConvLayer& L = conv_layers.at(node);
      for (int p : {L.w_param, L.b_param})
        if (p >= 0) last_use[p] = std::max<int64_t>(last_use[p], int64_t(ph) + 1);
    }
  // updates_after[k]: ready once phase k has ended; the last two lists (and parameters
  // nothing touches) wait for the work after the last phase.
  updates_after.assign(count + 1, {});
  for (size_t p = 0; p < parameters.size(); ++p) {
    const size_t after = last_use[p] < 0 ? count : static_cast<size_t>(std::min<int64_t>(last_use[p], int64_t(count)));
    const int64_t n = static_cast<int64_t>(parameters[p].value.size());
    for (int64_t b = 0; b < n; b += kUpdateChunk)
      updates_after[after].push_back({static_cast<int>(p), b, std::min<int64_t>(b + kUpdateChunk, n)});
  }
}

void Trainer::Impl::update_chunk(const UpdateChunk& w) {
  thread_local std::vector<float> expanded;  // a cropped layer's chunk of weight gradient, cache-resident
  thread_local std::vector<float*> grads;
  Parameter& par = parameters[w.p];
  const bool first = steps == 0;
  if (const ConvLayer* L = cropped_gradient_of[w.p]) {
    expanded.resize(static_cast<size_t>(w.end - w.begin));
    expand_weight_gradient_elements(L->full, L->taps, L->cropped_dw.data(), w.begin, w.end, expanded.data());
    ops::sgd_update(par.value.data() + w.begin, par.momentum.data() + w.begin, expanded.data(), 0, w.end - w.begin,
                    options.lr, options.momentum, options.weight_decay, first);
    return;
  }
  const float* g = deferred_param[w.p] ? deferred_grad[w.p].data() : distributed() ? reduced_grad[w.p].data() : nullptr;
  if (!g) {
    grads.resize(static_cast<size_t>(active));
    for (int64_t s = 0; s < active; ++s) {
      Slot& slot = slots[s];
      grads[s] = slot.param_grad[w.p].data();
      // A micro-batch no gradient reached adds zeros.
      if (!slot.param_written[w.p]) std::fill(grads[s] + w.begin, grads[s] + w.end, 0.0f);
    }
    ops::tree_sum(grads.data(), active, w.begin, w.end);
    g = grads[0];
  }
  ops::sgd_update(par.value.data(), par.momentum.data(), g, w.begin, w.end, options.lr, options.momentum,
                  options.weight_decay, first);
}

void Trainer::Impl::drain_updates(const std::vector<UpdateChunk>& chunks, std::atomic<size_t>& next) {
  const bool timed = options.profile;
  for (size_t j; (j = next.fetch_add(1)) < chunks.size();) {
    const auto start = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    update_chunk(chunks[j]);
    if (timed)  // thread time: each thread its own entry
      update_seconds[static_cast<size_t>(omp_get_thread_num())] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

}  // namespace convgen::model
