// Gradient memory: lifetimes over the backward's events, and offsets in each micro-batch's arena.
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <limits>

namespace convgen::model {

namespace {

constexpr int64_t kAlignFloats = kCacheLineBytes / sizeof(float);

int64_t aligned(int64_t floats) { return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats; }

}  // namespace

void Trainer::Impl::plan_gradient_memory() {
  const size_t count = values.size();
  grad_offset.assign(count, -1);
  grad_arena_floats = 0;
  // Gradients read over the whole mini-batch: whole-batch Conv layers' outputs.
  std::vector<char> batch_wide(count, 0);
  for (const auto& [node, L] : conv_layers)
    if (L.mode == ParallelMode::WholeBatch) batch_wide[static_cast<size_t>(id(tg.graph.nodes[node].outputs[0]))] = 1;
  auto planned = [&](int v) { return v >= 0 && !values[v].constant && values[v].requires_grad && !batch_wide[v]; };

  // Each value's first and last backward event, in the order a micro-batch runs them.
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<int64_t> first(count, kNever), last(count, -1);
  int64_t event = 0;
  auto touch = [&](int v) {
    if (!planned(v)) return;
    first[v] = std::min(first[v], event);
    last[v] = std::max(last[v], event);
  };
  auto touch_node = [&](size_t node) {
    const Node& n = tg.graph.nodes[node];
    for (const std::string& name : n.outputs) touch(id(name));
    for (const std::string& name : n.inputs) touch(id(name));
  };
  for (const Phase& phase : train_phases) {
    for (const Step& st : phase.steps) {
      if (st.action == Action::Loss) touch(logits);
      else if (st.action == Action::Backward || st.action == Action::BnBackwardSums) touch_node(st.node);
      else continue;
      ++event;
    }
    if (phase.combine == Action::GemmBackward || phase.combine == Action::ConvBackward)
      touch_node(phase.combine_node), ++event;
  }

  // Largest first, each at the lowest offset free of every placed gradient it overlaps in time.
  std::vector<int> order;
  for (size_t v = 0; v < count; ++v)
    if (planned(int(v)) && last[v] >= 0) order.push_back(int(v));
  auto floats = [&](int v) { return aligned(values[v].sample_elements * m); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return floats(a) > floats(b); });
  std::vector<int> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of the overlapping ones
  for (int v : order) {
    taken.clear();
    for (int u : placed)
      if (first[u] <= last[v] && first[v] <= last[u]) taken.emplace_back(grad_offset[u], grad_offset[u] + floats(u));
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (offset + floats(v) <= begin) break;
      offset = std::max(offset, end);
    }
    grad_offset[v] = offset;
    grad_arena_floats = std::max(grad_arena_floats, offset + floats(v));
    placed.push_back(v);
  }
  // Gradients no event touches (nothing reads them): any place will do.
  for (size_t v = 0; v < count; ++v)
    if (planned(int(v)) && grad_offset[v] < 0) {
      grad_offset[v] = grad_arena_floats;
      grad_arena_floats += floats(int(v));
    }
}

}  // namespace convgen::model
