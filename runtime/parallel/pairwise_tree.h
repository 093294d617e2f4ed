// The fixed pairwise tree over micro-batches, split between holders of contiguous
// ranges of them: what makes a sum over micro-batches the same bits whoever computes
// its parts (threads today; processes, each holding a range of micro-batches, next).
//
// The tree is ops::tree_sum's (runtime/train/train_ops.h): over `count` slots, level l
// adds slot i + 2^l into slot i for i a multiple of 2^(l+1). Its node (first, span) --
// span a power of two, first a multiple of span, first < count -- is the sum of slots
// [first, min(first + span, count)). A holder of slots [begin, end) can form alone
// exactly the nodes inside its range (nodes_within); any holder that receives the
// values of those nodes from every range finishes the tree (finish_tree) and gets
// tree_sum's bits, whatever the ranges were: float addition is commutative, and every
// addition is the one the tree makes, on the same two operands.
#pragma once

#include <cstdint>
#include <vector>

namespace convgen {

struct TreeNode {
  int64_t first = 0;  // first slot, a multiple of span
  int64_t span = 1;   // a power of two; the node ends at min(first + span, count)
  bool operator==(const TreeNode& o) const { return first == o.first && span == o.span; }
};

// The largest tree nodes inside [begin, end), in slot order: they cover the range
// exactly, and none of them has a parent inside it. Empty for an empty range.
// Requires 0 <= begin <= end <= count.
std::vector<TreeNode> nodes_within(int64_t count, int64_t begin, int64_t end);

// Finishes the tree over `count` slots from `nodes` (the nodes_within of ranges that
// cover [0, count) without overlap, in slot order) and their values: values[i] holds
// node i's sum. On return values[0] holds the sum of all slots, with tree_sum's bits,
// for elements [elem_begin, elem_end) only (callers split the elements). The other
// values are used as scratch.
void finish_tree(int64_t count, const std::vector<TreeNode>& nodes, float* const* values, int64_t elem_begin,
                 int64_t elem_end);

// How `count` slots are split between `holders` (ranks) that each hold a contiguous range,
// in holder order: holders + 1 cut points, range h = [cuts[h], cuts[h + 1]). The sizes
// differ by at most one, as rank_range's (process_group.h), so the work is balanced; among
// those splits, the one whose ranges form the fewest tree nodes in all (nodes_within),
// larger ranges first on ties. Every node a holder forms is one value per gradient element
// it sends when the tree is finished across holders, so fewer nodes move fewer bytes
// (tree_exchange_vs_ring). The bits never depend on the split (finish_tree's contract).
std::vector<int64_t> tree_aligned_cuts(int64_t count, int holders);

// The values per gradient element that reach other holders when the tree over the ranges
// `cuts` is finished as the trainer does (each holder's node values for chunk c to the
// chunk's owner, then an all-gather of the finished chunks, chunks of equal size), as a
// multiple of a ring all-reduce's 2(R - 1): (mean nodes per holder + 1) / 2. 1.0 when
// every range is a single node; 1.0 for one holder (nothing moves).
double tree_exchange_vs_ring(int64_t count, const std::vector<int64_t>& cuts);

}  // namespace convgen
