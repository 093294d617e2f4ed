// The Halide pipeline of one kernel, with the lowering passes every convgen kernel gets.
// Every place that compiles a kernel (JIT, the kernel cache, compile-layer, the Halide
// Generator) builds its pipeline here, so no kernel is compiled without them.
#pragma once

#include <vector>

#include <Halide.h>

#include "generator/conv/item_prefetch.h"

namespace convgen {

Halide::Pipeline kernel_pipeline(const Halide::Func& output);
// `prefetches`: the kernel's next-item prefetches (item_prefetch.h), when it has any.
Halide::Pipeline kernel_pipeline(const std::vector<Halide::Func>& outputs,
                                 const std::vector<ItemPrefetch>& prefetches = {});

// Adds the passes to a pipeline built elsewhere (the Halide Generator builds its own).
void add_kernel_lowering_passes(Halide::Pipeline& pipeline, const std::vector<ItemPrefetch>& prefetches = {});

}  // namespace convgen
