#include "generator/onnx/channel_shuffle.h"

#include <map>

namespace convgen::model {

std::vector<int64_t> channel_shuffle_order(int64_t channels, int64_t groups) {
  std::vector<int64_t> order(static_cast<size_t>(channels));
  const int64_t per_group = channels / groups;
  for (int64_t c = 0; c < channels; ++c) order[size_t(c)] = (c % groups) * per_group + c / groups;
  return order;
}

namespace {

std::map<std::string, int> reader_counts(const Graph& g) {
  std::map<std::string, int> readers;
  for (const Node& n : g.nodes)
    for (const std::string& in : n.inputs)
      if (!in.empty()) ++readers[in];
  for (const std::string& out : g.outputs) readers[out] += 2;  // never a private intermediate
  return readers;
}

int sole_reader_index(const Graph& g, const std::string& value) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const std::string& in : g.nodes[i].inputs)
      if (in == value) return static_cast<int>(i);
  return -1;
}

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
    const std::map<std::string, int> readers = reader_counts(g);
    const Node& split = g.nodes[i];
    const std::string& grouped = split.outputs[0];
    const std::vector<int64_t>& shape = g.value(split.inputs[0]).shape;
    const int64_t groups = split_groups(shape, g.value(grouped).shape);
    auto read_once = [&](const std::string& v) {
      auto it = readers.find(v);  // absent: nothing reads it (import keeps unused nodes)
      return it != readers.end() && it->second == 1;
    };
    if (groups == 0 || !read_once(grouped)) continue;
    const int t = sole_reader_index(g, grouped);
    if (t < 0 || g.nodes[t].op != Op::Transpose || !swaps_axes_1_and_2(g.nodes[t].attributes.perm)) continue;
    const std::string& swapped = g.nodes[t].outputs[0];
    if (!read_once(swapped)) continue;
    const int merge = sole_reader_index(g, swapped);
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
