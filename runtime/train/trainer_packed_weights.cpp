// Weights packed into the kernels' panels once per mini-batch, not by every call
// (schedules/weight_panels.h). Per micro-batch, each call re-packed the whole weight
// tensor for a few output pixels: on small images that copy cost as much as the
// multiply, and on two threads both copies competed for the same memory.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "runtime/graph/operators.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

constexpr int64_t kPackItemFloats = 1 << 16;  // packed floats per work item, about

std::string layout_key(const WeightPanels& p) {
  std::string key;
  for (const WeightPanel& w : p.panels)
    key += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{};", w.offset, w.mr, w.channels, w.taps_w, w.taps_h,
                       w.blocks, w.groups, w.outputs, w.base, w.g_stride, w.o_stride, w.c_stride, w.s_stride,
                       w.r_stride);
  return key;
}

}  // namespace

const float* Trainer::Impl::unpacked_weights(size_t node) {
  const Node& n = tg.graph.nodes[node];
  if (is_conv_layer(n.op)) {
    const ConvLayer& L = conv_layers.at(node);
    if (L.crop) return L.cropped_w.data();
  }
  const ValueInfo& v = values[id(n.inputs[1])];
  if (v.parameter >= 0) return parameters[v.parameter].value.data();
  if (v.frozen >= 0) return frozen[v.frozen].data();
  throw Error(ExitCode::Internal, fmt::format("{}: its weights are neither trained nor constant", n.name));
}

void Trainer::Impl::prepare_packed_weights(bool train) {
  bool added = false;
  auto add = [&](size_t node, const TrainConv* k) {
    for (PanelPass pass : {kForwardPanels, kBackwardDataPanels}) {
      const auto at = std::make_tuple(node, k, int(pass));
      if (packed_for.count(at)) continue;
      const WeightPanels& panels = pass == kForwardPanels ? k->forward_panels() : k->backward_data_panels();
      if (panels.empty()) continue;
      auto [it, fresh] = packed_weights.try_emplace({node, int(pass), layout_key(panels)});
      if (fresh) {
        it->second.node = node;
        it->second.pass = pass;
        it->second.panels = panels;
        added = true;
      }
      packed_for.emplace(at, &it->second);
    }
  };
  for (const auto& [at, k] : kernels) add(at.first, k);
  for (const auto& [node, L] : conv_layers)
    if (L.batched)
      for (const auto& [count, k] : L.whole_batch) add(node, k);
  for (const auto& [node, bg] : batched)
    for (const auto& [rows, k] : bg.convs) add(node, k.get());
  if (added) plan_packed_weights();
  pack_panels(-1, train);
}

void Trainer::Impl::plan_packed_weights() {
  // Each node's last train phase with its forward and first with its backward.
  std::map<size_t, int64_t> last_forward, first_backward;
  for (size_t ph = 0; ph < train_phases.size(); ++ph) {
    for (const Step& st : train_phases[ph].steps) {
      if (st.action == Action::Forward) last_forward[st.node] = int64_t(ph);
      if (st.action == Action::Backward && !first_backward.count(st.node)) first_backward[st.node] = int64_t(ph);
    }
  }
  std::map<size_t, std::vector<PackedWeights*>> by_node;
  for (auto& [key, p] : packed_weights) by_node[p.node].push_back(&p);
  for (auto& [node, entries] : by_node) {
    PackedWeights *forward = nullptr, *backward = nullptr;
    int forwards = 0, backwards = 0;
    for (PackedWeights* p : entries) {
      p->pack_before_phase = -1;
      if (p->pass == kForwardPanels) forward = p, ++forwards;
      else backward = p, ++backwards;
    }
    const auto f = last_forward.find(node), b = first_backward.find(node);
    const bool share = forwards == 1 && backwards == 1 && f != last_forward.end() && b != first_backward.end() &&
                       b->second > f->second;
    for (PackedWeights* p : entries) {
      const bool borrows = share && p == backward;
      const int64_t floats = share && p == forward ? std::max(forward->panels.floats, backward->panels.floats)
                                                   : borrows ? 0 : p->panels.floats;
      if (static_cast<int64_t>(p->storage.size()) != floats) FloatBuffer(static_cast<size_t>(floats)).swap(p->storage);
    }
    for (PackedWeights* p : entries) p->data = p->storage.data();
    if (share) {
      backward->data = forward->data;
      backward->pack_before_phase = b->second;
    }
  }
  packed_before_phase.clear();
  for (auto& [key, p] : packed_weights) packed_before_phase[p.pack_before_phase].push_back(&p);
}

void Trainer::Impl::pack_panels(int64_t phase, bool train) {
  struct Item {
    PackedWeights* packed;
    const float* from;
    int64_t begin, end;
  };
  const auto due = packed_before_phase.find(phase);
  if (due == packed_before_phase.end()) return;
  std::vector<Item> items;
  for (PackedWeights* p : due->second) {
    if (!train && p->pass == kBackwardDataPanels) continue;
    const float* from = unpacked_weights(p->node);
    const int64_t blocks = packed_blocks(p->panels);
    const int64_t per_block = std::max<int64_t>(1, p->panels.floats / std::max<int64_t>(1, blocks));
    const int64_t step = std::max<int64_t>(1, kPackItemFloats / per_block);
    for (int64_t b = 0; b < blocks; b += step) items.push_back({p, from, b, std::min(blocks, b + step)});
  }
  if (items.empty()) return;
  const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
#pragma omp parallel for schedule(dynamic, 1) num_threads(options.threads)
  for (size_t i = 0; i < items.size(); ++i)
    pack_weight_panels(items[i].packed->panels, items[i].from, items[i].packed->data, items[i].begin, items[i].end);
  if (options.profile)
    step_seconds[kPacking] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

const float* Trainer::Impl::weights_for(size_t node, const TrainConv& k, PanelPass pass, const float* w) const {
  const WeightPanels& panels = pass == kForwardPanels ? k.forward_panels() : k.backward_data_panels();
  if (panels.empty()) return w;
  const auto it = packed_for.find(std::make_tuple(node, &k, int(pass)));
  if (it == packed_for.end())
    throw Error(ExitCode::Internal, fmt::format("{}: its weights were not packed for {}", tg.graph.nodes[node].name,
                                                k.describe()));
  return it->second->data;
}

}  // namespace convgen::model
