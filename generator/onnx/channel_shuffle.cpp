#include "generator/onnx/channel_shuffle.h"

namespace convgen::model {

std::vector<int64_t> channel_shuffle_order(int64_t channels, int64_t groups) {
  std::vector<int64_t> order(static_cast<size_t>(channels));
  const int64_t per_group = channels / groups;
  for (int64_t c = 0; c < channels; ++c) order[size_t(c)] = (c % groups) * per_group + c / groups;
  return order;
}

namespace {

// [N, C, rest...] -> [N, g, C / g, rest...] with 1 < g < C: the groups, else 0.
int64_t split_groups(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() < 3 || to.size() != from.size() + 1 || to[0] != from[0]) return 0;
  for (size_t d = 2; d < from.size(); ++d)
    if (to[d + 1] != from[d]) return 0;
  if (to[1] < 2 || to[2] < 2 || to[1] * to[2] != from[1]) return 0;
  return to[1];
}

bool swaps_axes_1_and_2(const std::vector<int64_t>& perm) {
  if (perm.size() < 4 || perm[0] != 0 || perm[1] != 2 || perm[2] != 1) return false;
  for (size_t d = 3; d < perm.size(); ++d)
    if (perm[d] != int64_t(d)) return false;
  return true;
}

}  // namespace

int fold_channel_shuffles(Graph& g) {
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != Op::Reshape) continue;
    const Node& split = g.nodes[i];
    const std::string& grouped = split.outputs[0];
    const std::vector<int64_t>& shape = g.value(split.inputs[0]).shape;
    const int64_t groups = split_groups(shape, g.value(grouped).shape);
    // The one node reading v (a Transpose or Reshape: one input each), or -1; none when v
    // is a graph output or unused (import keeps unused nodes).
    auto only_reader = [&](const std::string& v) {
      const std::vector<size_t> r = g.readers_of(v);
      return r.size() == 1 && !g.is_output(v) ? static_cast<long>(r[0]) : -1L;
    };
    if (groups == 0) continue;
    const long t = only_reader(grouped);
    if (t < 0 || g.nodes[t].op != Op::Transpose || !swaps_axes_1_and_2(g.nodes[t].attributes.perm)) continue;
    const std::string& swapped = g.nodes[t].outputs[0];
    const long merge = only_reader(swapped);
    if (merge < 0 || g.nodes[merge].op != Op::Reshape || g.value(g.nodes[merge].outputs[0]).shape != shape) continue;

    Node gather;
    gather.name = g.nodes[t].name;
    gather.op = Op::Gather;
    gather.inputs = {split.inputs[0]};
    gather.outputs = {g.nodes[merge].outputs[0]};
    gather.attributes.axis = 1;
    gather.attributes.indices = channel_shuffle_order(shape[1], groups);
    g.values.erase(grouped);
    g.values.erase(swapped);
    // The Gather takes the place of the last Reshape (its readers follow it); the first
    // two nodes go. Erase from the back so the indices stay valid.
    g.nodes[merge] = gather;
    g.nodes.erase(g.nodes.begin() + t);
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    --i;
    ++folded;
  }
  return folded;
}

}  // namespace convgen::model
