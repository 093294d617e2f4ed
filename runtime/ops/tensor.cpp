#include "runtime/ops/tensor.h"

#include <algorithm>
#include <stdexcept>

namespace convgen {

Tensor::Tensor(std::vector<int64_t> logical_shape, bool channels_last_storage)
    : shape(std::move(logical_shape)), channels_last(channels_last_storage) {
  if (channels_last && shape.size() != 3 && shape.size() != 4)
    throw std::logic_error("channels-last storage needs a rank-3 or rank-4 tensor");
  data.assign(static_cast<size_t>(elements()), 0.0f);
}

namespace {

int64_t product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

std::vector<int64_t> dense_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

}  // namespace

int64_t Tensor::elements() const { return product(shape); }
int64_t ConstView::elements() const { return product(shape); }
int64_t View::elements() const { return product(shape); }

std::vector<int64_t> layout_strides(const std::vector<int64_t>& shape, bool channels_last) {
  if (!channels_last) return dense_strides(shape);
  // Storage order N, spatial..., C.
  const size_t r = shape.size();
  std::vector<int64_t> s(r);
  int64_t step = 1;
  s[1] = step;
  step *= shape[1];
  for (size_t i = r - 1; i >= 2; --i) {
    s[i] = step;
    step *= shape[i];
  }
  s[0] = step;
  return s;
}

std::vector<int64_t> ConstView::strides() const { return layout_strides(shape, channels_last); }
std::vector<int64_t> View::strides() const { return layout_strides(shape, channels_last); }

void copy_layout(const ConstView& x, const View& y) {
  if (x.channels_last == y.channels_last) {
    std::copy(x.data, x.data + x.elements(), y.data);
    return;
  }
  if (x.rank() == 4) {  // the common case: blocks of pixels, every channel of a block
    // A block's pixels of one channel and its channels of one pixel both stay within a few
    // cache lines; the blocks are split over the threads (a copy: any split, same bits).
    constexpr int64_t kBlock = 64;
    const int64_t N = x.shape[0], C = x.shape[1], HW = x.shape[2] * x.shape[3];
    const int64_t blocks = (HW + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static) if (N * C * HW > 65536)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t p0 = b * kBlock, p1 = std::min(HW, p0 + kBlock);
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = p0; p < p1; ++p) {
            const int64_t dense = (n * C + c) * HW + p, last = (n * HW + p) * C + c;
            if (x.channels_last) y.data[dense] = x.data[last];
            else y.data[last] = x.data[dense];
          }
      }
    return;
  }
  const auto from = x.strides(), to = y.strides();
  const int64_t r = x.rank(), n = x.elements();
  std::vector<int64_t> idx(r, 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t a = 0, b = 0;
    for (int64_t d = 0; d < r; ++d) a += idx[d] * from[d], b += idx[d] * to[d];
    y.data[b] = x.data[a];
    for (int64_t d = r - 1; d >= 0 && ++idx[d] == x.shape[d]; --d) idx[d] = 0;
  }
}

Tensor with_layout(const Tensor& t, bool channels_last) {
  if (t.channels_last == channels_last) return t;
  Tensor out(t.shape, channels_last);
  copy_layout(view_of(t), view_of(out));
  return out;
}

}  // namespace convgen
