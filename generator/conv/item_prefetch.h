// Prefetching the next reduction item while this one computes.
//
// A kernel that walks a large input in items (backward-weights: bands of output rows)
// reads each item's input from memory when it first touches it. Where that first touch
// is strided (a tile's taps are a few floats of every pixel's row) or is a packing copy
// made before any FMA of the item, the core waits on memory with the FMA units idle:
// 1x1 256->64 at 56x56, mb 8, ran at 66 GF/s with 26 MB of input and 115 with 13 MB.
// Halide 14's own `prefetch` directive cannot express this (it prefetches the region
// of a later iteration of the same loop, with non-temporal hints that keep the lines
// out of L2). An ItemPrefetch instead names, for each item, the element ranges of the
// next item, and a lowering pass (item_prefetch_pass) spreads one prefetcht0 per cache
// line of those ranges over the item: a few lines each time its innermost compute loop
// starts, so the lines arrive in L2 while the FMAs run.
//
// Prefetches never change a result: they only move lines between memory and caches.
#pragma once

#include <string>
#include <vector>

#include <Halide.h>

namespace convgen {

struct ItemPrefetch {
  // The loop over items (its body computes one item) and the compute loop inside it
  // that carries the prefetches, as named in the lowered statement
  // ("<func>.s<stage>.<var>"). Where Halide lowered them otherwise (a short loop peeled
  // or gone) the kernel is left without the prefetch: it computes the same.
  std::string item_loop;
  std::string inner_loop;
  struct Range {
    std::string buffer;         // an input of the kernel (its name in the pipeline)
    Halide::Expr first;         // first element of the next item's range, in the
                                // item loops' variables (item_loop_var below)
    int elements = 0;           // its length in elements
    int element_bytes = 4;
  };
  std::vector<Range> ranges;
  // Lines asked for each time the inner loop starts: the item's lines divided by the
  // inner loop's runs per item, so they spread over the whole item. A parallel loop
  // inside the item gives each of its iterations an equal share of the lines.
  int lines_per_visit = 1;
};

// The variable of a loop of the lowered statement, for ItemPrefetch::Range::first.
Halide::Expr item_loop_var(const std::string& loop_name);

// The range of `elements` (at most `total`) from `first`, moved back where it would end
// past a buffer of `total` elements: a range never leaves its buffer.
ItemPrefetch::Range clamped_range(const std::string& buffer, const Halide::Expr& first, int64_t elements,
                                  int64_t total);

// Cache lines a range of `elements` covers, whatever its alignment.
int prefetch_lines(const ItemPrefetch::Range& r);

// Sets lines_per_visit so the plan's lines spread over `visits` runs of the inner loop.
void spread_over_visits(ItemPrefetch& plan, int64_t visits);

// The lowering pass that carries out `plans` (kernel_pipeline adds it).
Halide::Internal::IRMutator* item_prefetch_pass(const std::vector<ItemPrefetch>& plans);

}  // namespace convgen
