// The pairwise tree split between holders of micro-batch ranges
// (runtime/parallel/pairwise_tree.h): whatever the ranges -- any number of holders,
// empty ones included -- each holder's nodes plus finish_tree give ops::tree_sum's bits.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "runtime/train/train_ops.h"
#include "runtime/parallel/pairwise_tree.h"
#include "runtime/parallel/process_group.h"

using convgen::TreeNode;

namespace {

constexpr int64_t kElems = 7;

// Slots of values whose sums round differently in different orders.
std::vector<std::vector<float>> random_slots(int64_t count, std::mt19937& rng) {
  std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
  std::vector<std::vector<float>> slots(static_cast<size_t>(count), std::vector<float>(kElems));
  for (auto& s : slots)
    for (auto& v : s) v = pick(rng) * (1 << (rng() % 20));
  return slots;
}

std::vector<float> tree_sum_of(std::vector<std::vector<float>> slots) {
  std::vector<float*> p;
  for (auto& s : slots) p.push_back(s.data());
  convgen::ops::tree_sum(p.data(), static_cast<int64_t>(p.size()), 0, kElems);
  return slots[0];
}

// Every holder forms its nodes from its own slots alone (tree_sum over the node's slots),
// then one finisher combines all holders' nodes.
std::vector<float> split_sum(const std::vector<std::vector<float>>& slots, const std::vector<int64_t>& cuts) {
  const int64_t count = static_cast<int64_t>(slots.size());
  std::vector<TreeNode> nodes;
  std::vector<std::vector<float>> values;
  for (size_t h = 0; h + 1 < cuts.size(); ++h) {
    for (const TreeNode& n : convgen::nodes_within(count, cuts[h], cuts[h + 1])) {
      std::vector<std::vector<float>> mine(slots.begin() + n.first,
                                           slots.begin() + std::min(n.first + n.span, count));
      nodes.push_back(n);
      values.push_back(tree_sum_of(mine));
    }
  }
  std::vector<float*> p;
  for (auto& v : values) p.push_back(v.data());
  convgen::finish_tree(count, nodes, p.data(), 0, kElems);
  return values[0];
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("pairwise tree: any split into contiguous ranges gives tree_sum's bits", "[pairwise_tree]") {
  std::mt19937 rng(42);
  int differs_from_sequential = 0;
  for (int64_t count = 1; count <= 19; ++count) {
    const auto slots = random_slots(count, rng);
    const std::vector<float> want = tree_sum_of(slots);
    std::vector<float> sequential = slots[0];
    for (int64_t s = 1; s < count; ++s)
      for (int64_t e = 0; e < kElems; ++e) sequential[e] += slots[s][e];
    differs_from_sequential += !same_bits(sequential, want);
    // Every split into 1, 2 and 3 ranges (cut points anywhere, empty ranges included),
    // and balanced splits over up to 8 holders as a trainer would make them.
    std::vector<std::vector<int64_t>> splits;
    for (int64_t a = 0; a <= count; ++a) {
      splits.push_back({0, a, count});
      for (int64_t b = a; b <= count; ++b) splits.push_back({0, a, b, count});
    }
    for (int64_t holders = 1; holders <= 8; ++holders) {
      std::vector<int64_t> cuts;
      for (int64_t h = 0; h <= holders; ++h) cuts.push_back(count * h / holders);
      splits.push_back(cuts);
    }
    for (const auto& cuts : splits) {
      INFO("count " << count << " cuts " << Catch::Detail::stringify(cuts));
      CHECK(same_bits(split_sum(slots, cuts), want));
    }
  }
  // The data tells orders apart, so the test fails for a finisher that sums otherwise.
  CHECK(differs_from_sequential > 0);
}

TEST_CASE("pairwise tree: the nodes of a range cover it with the largest aligned blocks", "[pairwise_tree]") {
  using V = std::vector<TreeNode>;
  CHECK(convgen::nodes_within(8, 0, 8) == V{{0, 8}});
  CHECK(convgen::nodes_within(8, 3, 8) == V{{3, 1}, {4, 4}});
  CHECK(convgen::nodes_within(8, 1, 7) == V{{1, 1}, {2, 2}, {4, 2}, {6, 1}});
  CHECK(convgen::nodes_within(5, 4, 5) == V{{4, 4}});  // past the last slot: nothing added
  CHECK(convgen::nodes_within(5, 0, 5) == V{{0, 8}});
  CHECK(convgen::nodes_within(6, 2, 2).empty());
  CHECK_THROWS(convgen::nodes_within(6, 4, 7));
  std::vector<float> a(1), b(1);
  std::vector<float*> p = {a.data(), b.data()};
  CHECK_THROWS(convgen::finish_tree(4, V{{0, 2}}, p.data(), 0, 1));            // a gap
  CHECK_THROWS(convgen::finish_tree(4, V{{0, 1}, {1, 2}}, p.data(), 0, 1));    // not aligned
  CHECK_THROWS(convgen::finish_tree(4, V{{0, 4}, {4, 1}}, p.data(), 0, 1));    // past the last slot
  CHECK_THROWS(convgen::finish_tree(0, V{{0, 1}}, p.data(), 0, 1));
  CHECK_THROWS(convgen::finish_tree(4, V{{0, 3}, {3, 1}}, p.data(), 0, 1));    // not a power of two
}

TEST_CASE("pairwise tree: single-slot nodes and element ranges finished in parts", "[pairwise_tree]") {
  // Nodes need not be the largest: all single slots is the tree itself. Elements may be
  // finished in disjoint parts (threads), each part leaving the others alone.
  std::mt19937 rng(7);
  for (int64_t count : {1, 2, 5, 13}) {
    auto slots = random_slots(count, rng);
    const std::vector<float> want = tree_sum_of(slots);
    std::vector<TreeNode> nodes;
    std::vector<float*> p;
    for (int64_t s = 0; s < count; ++s) {
      nodes.push_back({s, 1});
      p.push_back(slots[static_cast<size_t>(s)].data());
    }
    const float untouched = slots[0][5];
    convgen::finish_tree(count, nodes, p.data(), 0, 3);
    if (count > 1) CHECK(slots[0][5] == untouched);
    convgen::finish_tree(count, nodes, p.data(), 3, kElems);
    INFO("count " << count);
    CHECK(same_bits(slots[0], want));
  }
}

TEST_CASE("rank_range: contiguous ranges in rank order, sizes within one, ranks without items", "[pairwise_tree]") {
  for (int64_t count : {0, 1, 2, 3, 7, 16, 17})
    for (int ranks : {1, 2, 3, 4, 5}) {
      INFO("count " << count << " ranks " << ranks);
      int64_t next = 0, smallest = count, largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto [b, e] = convgen::rank_range(count, r, ranks);
        CHECK(b == next);
        CHECK(e >= b);
        smallest = std::min(smallest, e - b), largest = std::max(largest, e - b);
        next = e;
      }
      CHECK(next == count);
      CHECK(largest - smallest <= 1);
    }
  // The larger ranges first: 7 over 3 is 3, 2, 2.
  CHECK(convgen::rank_range(7, 0, 3) == std::pair<int64_t, int64_t>(0, 3));
  CHECK(convgen::rank_range(7, 2, 3) == std::pair<int64_t, int64_t>(5, 7));
  CHECK(convgen::rank_range(1, 2, 3) == std::pair<int64_t, int64_t>(1, 1));
}

namespace {

int64_t nodes_of_split(int64_t count, const std::vector<int64_t>& cuts) {
  int64_t nodes = 0;
  for (size_t h = 0; h + 1 < cuts.size(); ++h) nodes += int64_t(convgen::nodes_within(count, cuts[h], cuts[h + 1]).size());
  return nodes;
}

// Every split of `count` into `holders` contiguous ranges of sizes within one: the fewest
// nodes any of them forms (exhaustive, for small counts).
int64_t fewest_nodes_by_search(int64_t count, int holders) {
  const int64_t base = count / holders, extra = count % holders;
  int64_t best = INT64_MAX;
  for (int64_t mask = 0; mask < (int64_t{1} << holders); ++mask) {
    if (__builtin_popcountll(static_cast<unsigned long long>(mask)) != extra) continue;
    std::vector<int64_t> cuts = {0};
    for (int h = 0; h < holders; ++h) cuts.push_back(cuts.back() + base + ((mask >> h) & 1));
    best = std::min(best, nodes_of_split(count, cuts));
  }
  return best;
}

}  // namespace

TEST_CASE("tree_aligned_cuts: balanced ranges forming the fewest tree nodes", "[pairwise_tree]") {
  for (int64_t count = 0; count <= 40; ++count)
    for (int holders : {1, 2, 3, 4, 5, 7}) {
      INFO("count " << count << " holders " << holders);
      const std::vector<int64_t> cuts = convgen::tree_aligned_cuts(count, holders);
      REQUIRE(cuts.size() == size_t(holders) + 1);
      CHECK(cuts.front() == 0);
      CHECK(cuts.back() == count);
      int64_t smallest = count, largest = 0;
      for (int h = 0; h < holders; ++h) {
        CHECK(cuts[h + 1] >= cuts[h]);
        smallest = std::min(smallest, cuts[h + 1] - cuts[h]), largest = std::max(largest, cuts[h + 1] - cuts[h]);
      }
      CHECK(largest - smallest <= 1);
      CHECK(nodes_of_split(count, cuts) == fewest_nodes_by_search(count, holders));
      // Never more nodes than rank_range's split.
      std::vector<int64_t> plain = {0};
      for (int h = 0; h < holders; ++h) plain.push_back(convgen::rank_range(count, h, holders).second);
      CHECK(nodes_of_split(count, cuts) <= nodes_of_split(count, plain));
    }
  // 9 over 2: [0, 4) and [4, 9) are one node each plus (8, 8)'s, where rank_range's
  // [0, 5) and [5, 9) form five; 13 over 3: 4, 4, 5, three whole nodes.
  CHECK(convgen::tree_aligned_cuts(9, 2) == std::vector<int64_t>{0, 4, 9});
  CHECK(convgen::tree_aligned_cuts(13, 3) == std::vector<int64_t>{0, 4, 8, 13});
  // 7 over 3: 2, 2, 3 is three nodes, rank_range's 3, 2, 2 six.
  CHECK(convgen::tree_aligned_cuts(7, 3) == std::vector<int64_t>{0, 2, 4, 7});
  // No gain from moving: the larger ranges first, as rank_range.
  CHECK(convgen::tree_aligned_cuts(6, 4) == std::vector<int64_t>{0, 2, 4, 5, 6});
  CHECK(convgen::tree_aligned_cuts(1, 3) == std::vector<int64_t>{0, 1, 1, 1});
  CHECK_THROWS(convgen::tree_aligned_cuts(4, 0));
}

TEST_CASE("tree_exchange_vs_ring: (mean nodes per holder + 1) / 2", "[pairwise_tree]") {
  CHECK(convgen::tree_exchange_vs_ring(4, {0, 4}) == 1.0);
  CHECK(convgen::tree_exchange_vs_ring(4, {0, 2, 4}) == 1.0);       // one node each
  CHECK(convgen::tree_exchange_vs_ring(9, {0, 5, 9}) == 1.75);      // 2 + 3 nodes
  CHECK(convgen::tree_exchange_vs_ring(9, {0, 4, 9}) == 1.25);      // 1 + 2
  CHECK(convgen::tree_exchange_vs_ring(12, {0, 4, 8, 12}) == 1.0);  // four per rank: whole nodes
  CHECK_THROWS(convgen::tree_exchange_vs_ring(9, {0, 4, 8}));
}
