// Batch-level parallel inference: a model imported at batch B runs as B/M independent
// calls of the same model imported at a per-call batch M, spread over the threads with
// one arena each (runtime/parallel/batch_calls.h). Only where samples provably never
// meet: the two imports must be the same graph but for the batch -- the same nodes, the
// same float constants, the attributes a shape input can set (a Reshape's shape but for
// its batch dimension, Transpose's perm, axes, axis, indices, Slice and Pad) equal, every
// computed value the same shape with B samples against M -- and no node may mix samples
// in a way shapes cannot show (a softmax over the batch axis, a constant multiplied from
// the left, an operand broadcast against the batch axis, ...). Otherwise the model runs
// whole, as before.
//
// M is fixed by the model and B, never by the thread count, so every thread count runs the
// same calls of the same kernels and gives the same bits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// `whole` is the model imported at batch B, `per_call` the same file at batch M (both
// after fuse_for_inference). "" when every sample of `whole` is computed from that
// sample alone exactly as `per_call` computes it; else why not, naming the node or value.
std::string batch_split_refusal(const Graph& whole, const Graph& per_call);

// The per-call batch convgen picks for a model at its batch B (`whole.batch`): the
// smallest divisor M of B that still gives every spatial convolution (more than one
// output pixel: not a classifier head run as a 1x1 convolution) at least
// kMinPixelsPerCall output pixels per call (M x P x Q) -- fewer leave the kernels' pixel
// tiles short: resnet18 and regnet_y_400mf (7x7 layers) ran 8-14% slower at M = 1 than at
// 2 on one thread (AMD Zen 5, AVX-512) -- at most B/2 so that there are at least two calls; B itself
// (no split) for B = 1. Where no divisor up to B/2 gives that many, the largest one
// up to B/2 (a batch of 2 with 7x7 layers: two calls of 1). A model with no spatial
// convolution runs whole (M = B): its matrix products would become matrix-vector ones.
int64_t default_per_call_batch(const Graph& whole);
constexpr int64_t kMinPixelsPerCall = 64;

struct SplitModel {
  Graph graph;        // the model at the per-call batch (the whole batch when not split)
  int64_t calls = 1;  // the calls per batch: B / per-call batch
};

// import_at(b): the model imported at batch b; split_batch fuses it for inference
// (fuse_for_inference), the fusions of the graph it returns reaching `why`. `per_call_batch`:
// 0 picks default_per_call_batch; B runs the batch whole. A per-call batch that does not
// divide B is a Usage error; one asked for by the user that the model refuses is an
// Unsupported error giving batch_split_refusal's reason; the default falls back to the
// whole batch with that reason in `why`.
using ImportAt = std::function<Graph(int64_t batch)>;
SplitModel split_batch(const ImportAt& import_at, int64_t batch, int64_t per_call_batch, std::vector<std::string>* why);

// A value's shape over the whole batch: dimension 0 times `calls`.
std::vector<int64_t> whole_batch_shape(std::vector<int64_t> per_call_shape, int64_t calls);

}  // namespace convgen::model
