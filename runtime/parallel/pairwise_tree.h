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

}  // namespace convgen
