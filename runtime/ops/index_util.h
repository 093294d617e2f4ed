// Index arithmetic shared by the operators (runtime/ops/ops.cpp, runtime/train/train_ops.cpp): row-major walks
// over logical shapes, strided offsets, numpy broadcasting and pooling windows.
// Internal to convgen's runtime; not an installed header.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"

namespace convgen::ops::detail {

// Calls f(logical index) for every index of `shape`, in row-major order.
template <typename F>
inline void for_each_index(const std::vector<int64_t>& shape, F f) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    f(idx);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0 && ++idx[d] == shape[d]; --d) idx[d] = 0;
  }
}

// Calls f(offsets, length) for every row of `shape`'s last dimension, rows in row-major
// order: offsets[k] is the row's first element under strides[k]; element j of the row is at
// offsets[k] + j * strides[k].back(). The same order as for_each_index, with no index
// vectors per element (a rank-0 shape is one row of one element).
template <size_t K, typename F>
inline void for_each_row(const std::vector<int64_t>& shape, const std::array<const std::vector<int64_t>*, K>& strides,
                         F f) {
  const size_t rank = shape.size();
  std::array<int64_t, K> base{};
  if (rank == 0) return f(base, int64_t(1));
  for (int64_t e : shape)
    if (e == 0) return;
  std::vector<int64_t> idx(rank - 1, 0);
  for (;;) {
    f(base, shape[rank - 1]);
    int64_t d = static_cast<int64_t>(rank) - 2;
    for (; d >= 0; --d) {
      for (size_t k = 0; k < K; ++k) base[k] += (*strides[k])[size_t(d)];
      if (++idx[size_t(d)] < shape[size_t(d)]) break;
      for (size_t k = 0; k < K; ++k) base[k] -= (*strides[k])[size_t(d)] * shape[size_t(d)];
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

// y's strides for walking x's index space when y is x reduced over `axes` (kept as
// extent 1 or removed): 0 along the reduced axes.
inline std::vector<int64_t> reduced_strides(const std::vector<int64_t>& x_shape, const std::vector<int64_t>& axes,
                                     const ConstView& y) {
  const std::vector<int64_t> ys = y.strides();
  const bool kept = y.shape.size() == x_shape.size();
  std::vector<int64_t> out(x_shape.size(), 0);
  size_t k = 0;
  for (size_t d = 0; d < x_shape.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!reduced) out[d] = ys.at(kept ? d : k);
    if (kept || !reduced) ++k;
  }
  return out;
}

// Calls f(offset in the sliced tensor, offset in the window) for every element of the
// window (runtime/ops/ops.h: slice) of `shape` that starts at `first` and steps by
// `step` per axis, over a tensor of strides `sliced` and a window of strides `window`.
template <typename F>
inline void for_each_window_element(const std::vector<int64_t>& shape, const std::vector<int64_t>& sliced,
                                    const std::vector<int64_t>& first, const std::vector<int64_t>& step,
                                    const std::vector<int64_t>& window, F f) {
  int64_t base = 0;
  std::vector<int64_t> strided(sliced.size());
  for (size_t d = 0; d < sliced.size(); ++d) {
    base += first[d] * sliced[d];
    strided[d] = step[d] * sliced[d];
  }
  for_each_row<2>(shape, {&strided, &window}, [&](const std::array<int64_t, 2>& at, int64_t len) {
    const int64_t along = strided.empty() ? 1 : strided.back(), across = window.empty() ? 1 : window.back();
    for (int64_t j = 0; j < len; ++j) f(base + at[0] + j * along, at[1] + j * across);
  });
}

inline int64_t offset(const std::vector<int64_t>& idx, const std::vector<int64_t>& strides) {
  int64_t o = 0;
  for (size_t d = 0; d < idx.size(); ++d) o += idx[d] * strides[d];
  return o;
}

// Strides of `t` for indexing with an index of out_rank dimensions under numpy
// broadcasting: right-aligned, size-1 dimensions stride 0.
inline std::vector<int64_t> broadcast_strides(const ConstView& t, size_t out_rank) {
  const auto s = t.strides();
  std::vector<int64_t> out(out_rank, 0);
  const size_t lead = out_rank - t.shape.size();
  for (size_t d = 0; d < t.shape.size(); ++d) out[lead + d] = t.shape[d] == 1 ? 0 : s[d];
  return out;
}

// Calls f(input index, inside the input, inside the explicit padding) for every tap of
// the pooling window at output index out_idx, taps in row-major order.
template <typename F>
inline void for_each_window(const ConstView& x, const Window& w, const std::vector<int64_t>& out_idx, F f) {
  const size_t spatial = x.shape.size() - 2;
  std::vector<int64_t> tap(spatial, 0);
  int64_t taps = 1;
  for (int64_t k : w.kernel) taps *= k;
  for (int64_t t = 0; t < taps; ++t) {
    bool inside = true, in_padding_extent = true;
    std::vector<int64_t> in_idx = {out_idx[0], out_idx[1]};
    for (size_t d = 0; d < spatial; ++d) {
      const int64_t i = out_idx[2 + d] * w.strides[d] + tap[d] * w.dilations[d] - w.pads_begin[d];
      inside = inside && i >= 0 && i < x.shape[2 + d];
      in_padding_extent = in_padding_extent && i < x.shape[2 + d] + w.pads_end[d];
      in_idx.push_back(i);
    }
    f(in_idx, inside, in_padding_extent);
    for (int64_t d = static_cast<int64_t>(spatial) - 1; d >= 0 && ++tap[d] == w.kernel[d]; --d) tap[d] = 0;
  }
}

// The divisor of a 2-D AveragePool at output (p, q) of an H x W input: the window's taps
// inside the input, or (count_include_pad) inside the explicitly padded input -- never
// the ceil_mode overhang past it.
inline int64_t pool_window_count(const Window& w, int64_t p, int64_t q, int64_t H, int64_t W, bool count_include_pad) {
  int64_t count = 0;
  for (int64_t r = 0; r < w.kernel[0]; ++r) {
    const int64_t i = p * w.strides[0] + r * w.dilations[0] - w.pads_begin[0];
    for (int64_t s = 0; s < w.kernel[1]; ++s) {
      const int64_t j = q * w.strides[1] + s * w.dilations[1] - w.pads_begin[1];
      const bool inside = i >= 0 && i < H && j >= 0 && j < W;
      if (count_include_pad ? (i < H + w.pads_end[0] && j < W + w.pads_end[1]) : inside) ++count;
    }
  }
  return count;
}

}  // namespace convgen::ops::detail
