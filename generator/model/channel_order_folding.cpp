#include "generator/model/channel_order_folding.h"

#include <algorithm>

#include <fmt/format.h>

namespace convgen::model {

namespace {

bool is_channel_permutation(const Graph& g, const Node& n) {
  if (n.op != Op::Gather || n.attributes.axis != 1) return false;
  const std::vector<int64_t>& x = g.value(n.inputs[0]).shape;
  const std::vector<int64_t>& order = n.attributes.indices;
  if (x.size() < 3 || g.value(n.outputs[0]).shape != x || int64_t(order.size()) != x[1]) return false;
  std::vector<bool> seen(order.size(), false);
  for (int64_t c : order) {
    if (c < 0 || c >= x[1] || seen[size_t(c)]) return false;
    seen[size_t(c)] = true;
  }
  return true;
}

// Why the Convs reading the permuted tensor cannot take the permutation, or "".
std::string convs_refuse(const Graph& g, const Node& gather, const std::vector<size_t>& readers) {
  const std::string& value = gather.outputs[0];
  for (size_t r : readers) {
    const Node& n = g.nodes[r];
    if (n.op != Op::Conv) return fmt::format("'{}' reads it ({})", n.name, op_name(n.op));
    if (n.inputs[0] != value || std::count(n.inputs.begin(), n.inputs.end(), value) != 1)
      return fmt::format("'{}' reads it as more than its data input", n.name);
    if (n.attributes.group != 1) return fmt::format("'{}' has groups", n.name);
    if (!g.is_float_constant(n.inputs[1])) return fmt::format("'{}''s weights are not constants", n.name);
  }
  return "";
}

}  // namespace

int fold_channel_permutations(Graph& g, std::vector<std::string>* why) {
  auto say = [&](const std::string& line) {
    if (why) why->push_back(line);
  };
  int folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node gather = g.nodes[i];
    if (!is_channel_permutation(g, gather)) continue;
    const std::vector<int64_t>& order = gather.attributes.indices;
    const std::string& x = gather.inputs[0];
    const std::string& y = gather.outputs[0];

    // The Concat first: it copies anyway, so the permutation costs nothing there, and the
    // readers may be anything. A Concat that already has an order keeps it: a second
    // permutation stays a pass (composing them is not worth a case).
    const int p = g.producer_of(x);
    if (p >= 0 && g.nodes[size_t(p)].op == Op::Concat && g.nodes[size_t(p)].attributes.axis == 1 &&
        g.nodes[size_t(p)].attributes.indices.empty() && g.readers_of(x).size() == 1 && !g.is_output(x)) {
      Node& concat = g.nodes[size_t(p)];
      concat.attributes.indices = order;
      concat.outputs[0] = y;
      g.values.erase(x);
      g.nodes.erase(g.nodes.begin() + static_cast<long>(i--));
      say(fmt::format("{} (channel permutation) folded into {}: it writes its inputs' channels in that order", gather.name,
                      concat.name));
      ++folded;
      continue;
    }

    const std::vector<size_t> readers = g.readers_of(y);
    std::string refused = g.is_output(y) ? "its output is a graph output" : readers.empty() ? "nothing reads it" : "";
    if (refused.empty()) refused = convs_refuse(g, gather, readers);
    if (!refused.empty()) {
      say(fmt::format("{} (channel permutation) kept as a pass: not after a Concat that feeds only it, and {}",
                      gather.name, refused));
      continue;
    }
    for (size_t r : readers) {
      Node& conv = g.nodes[r];
      const Value& w = g.value(conv.inputs[1]);
      Value permuted = w;
      permuted.name = conv.name + ".channel_ordered_weights";
      const int64_t K = w.shape[0], C = w.shape[1], taps = w.elements() / (K * C);
      for (int64_t k = 0; k < K; ++k)
        for (int64_t c = 0; c < C; ++c)
          std::copy_n(w.data.begin() + (k * C + c) * taps, taps,
                      permuted.data.begin() + (k * C + order[size_t(c)]) * taps);
      g.values[permuted.name] = std::move(permuted);
      conv.inputs[1] = conv.name + ".channel_ordered_weights";
      conv.inputs[0] = x;
    }
    g.values.erase(y);
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i--));
    say(fmt::format("{} (channel permutation) folded into the input-channel weights of {} Conv(s)", gather.name,
                    readers.size()));
    ++folded;
  }
  return folded;
}

}  // namespace convgen::model
