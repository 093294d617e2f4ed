#include "runtime/parallel/pairwise_tree.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace convgen {

namespace {

// Beyond this many slots the doubling spans would overflow int64_t.
constexpr int64_t kMaxSlots = int64_t{1} << 62;

int64_t tree_top(int64_t count) {
  int64_t top = 1;
  while (top < count) top *= 2;
  return top;
}

// nodes_within(count, begin, end).size(), without building the list.
int64_t node_count(int64_t count, int64_t top, int64_t begin, int64_t end) {
  int64_t nodes = 0;
  for (int64_t x = begin; x < end; ++nodes) {
    int64_t span = 1;
    while (span * 2 <= top && x % (span * 2) == 0 && std::min(x + span * 2, count) <= end) span *= 2;
    x = std::min(x + span, count);
  }
  return nodes;
}

}  // namespace

std::vector<TreeNode> nodes_within(int64_t count, int64_t begin, int64_t end) {
  if (begin < 0 || begin > end || end > count || count > kMaxSlots)
    throw std::invalid_argument("nodes_within: range outside the slots");
  const int64_t top = tree_top(count);
  std::vector<TreeNode> nodes;
  for (int64_t x = begin; x < end;) {
    // Grow while the parent starts here and ends inside the range (a node past the last
    // slot ends at count: its missing half added nothing).
    int64_t span = 1;
    while (span * 2 <= top && x % (span * 2) == 0 && std::min(x + span * 2, count) <= end) span *= 2;
    nodes.push_back({x, span});
    x = std::min(x + span, count);
  }
  return nodes;
}

void finish_tree(int64_t count, const std::vector<TreeNode>& nodes, float* const* values, int64_t elem_begin,
                 int64_t elem_end) {
  // tree_sum's additions in its order, leaving out those inside a node (already in its
  // value). An addition at level `stride` into slot i is inside the node holding slot i
  // exactly when that node spans more than stride; otherwise nodes start at both i and
  // i + stride (the checks below make the nodes aligned power-of-two blocks that tile the
  // slots: a node holding i + stride and not starting there would overlap the node at i),
  // and their values are the operands.
  if (count < 0 || count > kMaxSlots) throw std::invalid_argument("finish_tree: slot count out of range");
  std::vector<int64_t> node_at(static_cast<size_t>(count), -1), holder(static_cast<size_t>(count), -1);
  int64_t covered = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const TreeNode& n = nodes[k];
    if (n.first != covered || n.first >= count || n.span < 1 || (n.span & (n.span - 1)) != 0 ||
        n.first % n.span != 0)
      throw std::invalid_argument("finish_tree: the nodes do not cover the slots in order");
    node_at[static_cast<size_t>(n.first)] = static_cast<int64_t>(k);
    covered = std::min(n.first + n.span, count);
    for (int64_t s = n.first; s < covered; ++s) holder[static_cast<size_t>(s)] = static_cast<int64_t>(k);
  }
  if (covered != count) throw std::invalid_argument("finish_tree: the nodes do not cover the slots");
  for (int64_t stride = 1; stride < count; stride *= 2) {
    for (int64_t i = 0; i + stride < count; i += 2 * stride) {
      if (nodes[static_cast<size_t>(holder[static_cast<size_t>(i)])].span > stride) continue;
      float* to = values[node_at[static_cast<size_t>(i)]];
      const float* from = values[node_at[static_cast<size_t>(i + stride)]];
      for (int64_t e = elem_begin; e < elem_end; ++e) to[e] += from[e];
    }
  }
}

std::vector<int64_t> tree_aligned_cuts(int64_t count, int holders) {
  if (holders < 1 || count < 0 || count > kMaxSlots) throw std::invalid_argument("tree_aligned_cuts: bad slot or holder count");
  const int64_t top = tree_top(count), base = count / holders, extra = count % holders;
  const auto R = static_cast<size_t>(holders), E = static_cast<size_t>(extra);
  // fewest[h][k]: the fewest nodes holders h.. form when k of the holders before h took
  // base + 1 slots (so holder h starts at h * base + k); larger[h][k]: whether holder h
  // then takes base + 1. Filled from the last holder back.
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max() / 4;
  std::vector<std::vector<int64_t>> fewest(R + 1, std::vector<int64_t>(E + 1, kNone));
  std::vector<std::vector<char>> larger(R, std::vector<char>(E + 1, 0));
  fewest[R][E] = 0;
  for (size_t h = R; h-- > 0;)
    for (size_t k = 0; k <= std::min(h, E); ++k) {
      const int64_t begin = static_cast<int64_t>(h) * base + static_cast<int64_t>(k);
      if (k < E && fewest[h + 1][k + 1] < kNone) {  // larger first: tried first, kept on ties
        fewest[h][k] = node_count(count, top, begin, begin + base + 1) + fewest[h + 1][k + 1];
        larger[h][k] = 1;
      }
      if (fewest[h + 1][k] < kNone) {
        const int64_t nodes = node_count(count, top, begin, begin + base) + fewest[h + 1][k];
        if (nodes < fewest[h][k]) fewest[h][k] = nodes, larger[h][k] = 0;
      }
    }
  std::vector<int64_t> cuts(R + 1, 0);
  size_t k = 0;
  for (size_t h = 0; h < R; ++h) {
    const bool more = larger[h][k] != 0;
    cuts[h + 1] = cuts[h] + base + (more ? 1 : 0);
    k += more ? 1 : 0;
  }
  return cuts;
}

double tree_exchange_vs_ring(int64_t count, const std::vector<int64_t>& cuts) {
  if (cuts.size() < 2 || cuts.front() != 0 || cuts.back() != count)
    throw std::invalid_argument("tree_exchange_vs_ring: the cuts do not cover the slots");
  const auto holders = static_cast<double>(cuts.size() - 1);
  if (cuts.size() == 2) return 1.0;
  int64_t nodes = 0;
  for (size_t h = 0; h + 1 < cuts.size(); ++h) {
    if (cuts[h + 1] < cuts[h]) throw std::invalid_argument("tree_exchange_vs_ring: the cuts decrease");
    nodes += node_count(count, tree_top(count), cuts[h], cuts[h + 1]);
  }
  return (double(nodes) / holders + 1.0) / 2.0;
}

}  // namespace convgen
