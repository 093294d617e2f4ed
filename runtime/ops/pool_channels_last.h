// Channels-last pooling, the executor's and the trainer's hot paths (internal to
// runtime/ops: ops::max_pool dispatches here for rank-4 channels-last views,
// ops::global_pool for every channels-last view).
#pragma once

#include "runtime/ops/ops.h"

namespace convgen::ops::detail {

// y = the maximum of each window of x (both channels-last, rank 4), taken as
// std::max(acc, v) from -infinity in row-major tap order: a NaN never replaces a value,
// and a window wholly in the padding gives -infinity -- the general path's semantics.
// Output rows split over the OpenMP threads; the bits do not depend on them.
void max_pool_channels_last(const ConstView& x, const Window& w, const View& y);

// y[n, c] = the maximum or the mean of x's `spatial` pixels of (n, c), x channels-last:
// in double, in row-major spatial order per channel (the dense path's order and bits).
// Images and channel blocks split over the OpenMP threads.
void global_pool_channels_last(const ConstView& x, int64_t spatial, bool max, const View& y);

}  // namespace convgen::ops::detail
