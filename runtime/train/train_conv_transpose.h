// A ConvTranspose layer's three passes on the kernels of its convolution
// (runtime/graph/model_graph.h: conv_transpose_descriptor): the ConvTranspose's forward
// is that convolution's backward-data, its backward-data the convolution's forward, and
// its backward-weights the convolution's backward-weights with X and dY exchanged. The
// bias (per output channel of the ConvTranspose, the convolution's input channels) is
// added after the forward kernel, and its gradient summed over images and pixels in a
// fixed order. The trainer sees a TrainConv in the node's own terms (x its input, y its
// output), so every parallel mode, crop and packing path serves both layer kinds.
#pragma once

#include <memory>

#include "runtime/train/train_conv.h"

namespace convgen::model {

// The request for the convolution's kernels that a ConvTranspose layer's request needs:
// the ConvTranspose's forward reads the convolution's backward-data kernel, its
// backward-data the convolution's forward kernel.
TrainConvRequest convolution_request_of_transposed(const TrainConvRequest& transposed);

// conv: the convolution's kernels, built from convolution_request_of_transposed(r) for a
// layer whose descriptor is `d` (the convolution's, no epilogue).
std::unique_ptr<TrainConv> transposed_conv(std::unique_ptr<TrainConv> conv, const ConvDescriptor& d);

}  // namespace convgen::model
