// Halide 14's code generator loads a vector of stride 2, 3 or 4 as a dense vector and a
// shuffle, and so that neighbouring strided loads share that dense load it starts it up
// to stride - 1 elements before the first element asked for. Inside Halide's own
// allocations that is padding; in a caller's buffer it reads before the buffer's start,
// which faults when the buffer begins a mapping (backward-data's weight packing of 1x3,
// 3x1 and 2x2 kernels read up to 8 bytes before the weights; tests/common/guarded_input.h
// found them). The pass below runs after lowering and rewrites such loads from the
// kernel's arguments as a dense load of exactly the span they touch, sliced: never an
// element outside the buffer. Neighbouring strided loads (w[3i], w[3i+1], w[3i+2]) no
// longer share one dense load, up to `stride` times the loads; they occur in per-call
// weight packing, not in micro-kernels. Halide 16 moved the rewrite into lowering with
// the bounds in view; this is its effect for Halide 14.
#include "generator/conv/kernel_pipeline.h"

namespace convgen {

namespace {

using namespace Halide;
using namespace Halide::Internal;

class ExactStridedLoads : public IRMutator {
  using IRMutator::visit;

  Expr visit(const Load* op) override {
    Expr index = mutate(op->index);
    Expr predicate = mutate(op->predicate);
    const Ramp* ramp = index.as<Ramp>();
    const int64_t* stride = ramp ? as_const_int(ramp->stride) : nullptr;
    const bool argument = op->param.defined() || op->image.defined();
    if (!argument || !stride || *stride < 2 || *stride > 4 || !ramp->base.type().is_scalar() ||
        !is_const_one(predicate)) {
      if (index.same_as(op->index) && predicate.same_as(op->predicate)) return op;
      return Load::make(op->type, op->name, index, op->image, op->param, predicate, op->alignment);
    }
    const int lanes = ramp->lanes, step = static_cast<int>(*stride);
    const int span = (lanes - 1) * step + 1;
    Expr dense_index = Ramp::make(ramp->base, make_one(ramp->base.type()), span);
    Expr dense = Load::make(op->type.with_lanes(span), op->name, dense_index, op->image, op->param, const_true(span),
                            op->alignment);
    return Shuffle::make_slice(dense, 0, step, lanes);
  }
};

}  // namespace

void add_kernel_lowering_passes(Pipeline& pipeline, const std::vector<ItemPrefetch>& prefetches) {
  pipeline.add_custom_lowering_pass(new ExactStridedLoads);
  if (!prefetches.empty()) pipeline.add_custom_lowering_pass(item_prefetch_pass(prefetches));
}

Pipeline kernel_pipeline(const Func& output) {
  Pipeline pipeline(output);
  add_kernel_lowering_passes(pipeline);
  return pipeline;
}

Pipeline kernel_pipeline(const std::vector<Func>& outputs, const std::vector<ItemPrefetch>& prefetches) {
  Pipeline pipeline(outputs);
  add_kernel_lowering_passes(pipeline, prefetches);
  return pipeline;
}

}  // namespace convgen
