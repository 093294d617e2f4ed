// Inference: a Gemm of activations by constant weights -- a classifier head,
// y = x * W' + b with x [M, K] -- runs as a 1x1 convolution of M one-pixel images, so it
// gets a generated kernel like every other layer: weights packed once at load, the bias in
// its epilogue, the layer's parallel variant. BLIS sgemm would pack the weights (5 MB for
// MobileNet v2's head) on every call.
//
// Applies to Gemm with alpha 1, A not transposed, B a float constant (either orientation)
// and C absent or a constant of N values ([N] or [1, N]) with beta 1. The Gemm becomes
// Reshape(x -> [M, K, 1, 1]) -> Conv(W as [N, K, 1, 1], b) -> Reshape(-> [M, N]) under
// the Gemm's own output name. The sums run in the kernel's order rather than BLIS's:
// the same value on integer data, within float rounding otherwise.
#pragma once

#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// `why` (optional) receives one line per Gemm lowered or left to BLIS.
void lower_gemms_to_convs(Graph& g, std::vector<std::string>* why = nullptr);

}  // namespace convgen::model
