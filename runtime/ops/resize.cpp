#include "runtime/ops/resize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace convgen::ops {

namespace {

// The input coordinate of output index o (ONNX's coordinate_transformation_mode).
float source_coordinate(int64_t o, int64_t in, int64_t out, float scale, ResizeCoordinates c) {
  const float x = static_cast<float>(o);
  switch (c) {
    case ResizeCoordinates::HalfPixel: return (x + 0.5f) / scale - 0.5f;
    case ResizeCoordinates::PytorchHalfPixel: return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case ResizeCoordinates::AlignCorners: {
      // The resized length is in * scale, as ONNX's reference has it: with scales that
      // give a fractional length (4 x 0.6), not the rounded-down output extent.
      const float length = static_cast<float>(in) * scale;
      return out == 1 || length == 1.0f ? 0.0f : x * static_cast<float>(in - 1) / (length - 1.0f);
    }
    case ResizeCoordinates::Asymmetric: return x / scale;
    case ResizeCoordinates::TfHalfPixelForNn: return (x + 0.5f) / scale;
  }
  return 0.0f;
}

int64_t nearest_index(float x, NearestRounding m) {
  const float f = std::floor(x);
  switch (m) {
    case NearestRounding::RoundPreferFloor: return static_cast<int64_t>(x - f == 0.5f ? f : std::round(x));
    case NearestRounding::RoundPreferCeil: return static_cast<int64_t>(x - f == 0.5f ? f + 1.0f : std::round(x));
    case NearestRounding::Floor: return static_cast<int64_t>(f);
    case NearestRounding::Ceil: return static_cast<int64_t>(std::ceil(x));
  }
  return 0;
}

// Keys' cubic convolution weights of the taps at floor(x) - 1 .. floor(x) + 2, t = x - floor(x).
void cubic_weights(float t, float a, float w[4]) {
  auto near = [a](float d) { return ((a + 2.0f) * d - (a + 3.0f)) * d * d + 1.0f; };      // |d| <= 1
  auto far = [a](float d) { return ((a * d - 5.0f * a) * d + 8.0f * a) * d - 4.0f * a; };  // 1 < |d| < 2
  w[0] = far(t + 1.0f);
  w[1] = near(t);
  w[2] = near(1.0f - t);
  w[3] = far(2.0f - t);
}

struct Geometry {
  int64_t n, c, ih, iw, oh, ow;
  int64_t xs[4], ys[4];  // strides of n, c, h, w
};

Geometry geometry(const std::vector<int64_t>& in_shape, const std::vector<int64_t>& in_strides,
                  const std::vector<int64_t>& out_shape, const std::vector<int64_t>& out_strides) {
  if (in_shape.size() != out_shape.size() || (in_shape.size() != 3 && in_shape.size() != 4))
    throw std::invalid_argument("resize: rank-3 or rank-4 tensors of equal rank");
  const bool one_d = in_shape.size() == 3;
  Geometry g{};
  g.n = in_shape[0];
  g.c = in_shape[1];
  g.ih = one_d ? 1 : in_shape[2];
  g.iw = in_shape.back();
  g.oh = one_d ? 1 : out_shape[2];
  g.ow = out_shape.back();
  g.xs[0] = in_strides[0], g.xs[1] = in_strides[1], g.xs[2] = one_d ? 0 : in_strides[2], g.xs[3] = in_strides.back();
  g.ys[0] = out_strides[0], g.ys[1] = out_strides[1], g.ys[2] = one_d ? 0 : out_strides[2], g.ys[3] = out_strides.back();
  return g;
}

// The taps of the rows and of the columns (a rank-3 tensor: one row, kept).
std::pair<AxisTaps, AxisTaps> taps_of(const Geometry& g, const ResizeSpec& r) {
  const bool one_d = r.scales.size() == 1;
  AxisTaps rows = one_d ? AxisTaps{1, {0}, {1.0f}} : resize_taps(g.ih, g.oh, r.scales.at(0), r);
  AxisTaps cols = resize_taps(g.iw, g.ow, r.scales.back(), r);
  return {rows, cols};
}

}  // namespace

AxisTaps resize_taps(int64_t in, int64_t out, float scale, const ResizeSpec& r) {
  AxisTaps a;
  a.taps = r.mode == ResizeMode::Nearest ? 1 : r.mode == ResizeMode::Linear ? 2 : 4;
  a.index.resize(static_cast<size_t>(out * a.taps));
  a.weight.resize(static_cast<size_t>(out * a.taps));
  auto clamp = [in](int64_t i) { return std::min(std::max<int64_t>(i, 0), in - 1); };
  for (int64_t o = 0; o < out; ++o) {
    const float x = source_coordinate(o, in, out, scale, r.coordinates);
    int64_t* index = a.index.data() + o * a.taps;
    float* weight = a.weight.data() + o * a.taps;
    if (r.mode == ResizeMode::Nearest) {
      index[0] = clamp(nearest_index(x, r.nearest));
      weight[0] = 1.0f;
      continue;
    }
    const float f = std::floor(x);
    const float t = x - f;
    const int64_t base = static_cast<int64_t>(f);
    if (r.mode == ResizeMode::Linear) {
      index[0] = clamp(base), index[1] = clamp(base + 1);
      weight[0] = 1.0f - t, weight[1] = t;
      continue;
    }
    float w[4];
    cubic_weights(t, r.cubic_a, w);
    float kept = 0.0f;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = base - 1 + k;
      if (r.exclude_outside && (i < 0 || i >= in)) w[k] = 0.0f;
      kept += w[k];
      index[k] = clamp(i);
    }
    for (int k = 0; k < 4; ++k) weight[k] = r.exclude_outside ? w[k] / kept : w[k];
  }
  return a;
}

void resize(const ConstView& x, const ResizeSpec& r, const View& y) {
  const Geometry g = geometry(x.shape, x.strides(), y.shape, y.strides());
  const std::pair<AxisTaps, AxisTaps> taps = taps_of(g, r);
  const AxisTaps& rows = taps.first;
  const AxisTaps& cols = taps.second;
  // Every output element by one thread, its taps summed rows-major: the bits never depend on T.
#pragma omp parallel for collapse(2) schedule(static) if (y.elements() > 65536)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oi = 0; oi < g.oh; ++oi)
      for (int64_t oj = 0; oj < g.ow; ++oj)
        for (int64_t c = 0; c < g.c; ++c) {
          const float* xc = x.data + n * g.xs[0] + c * g.xs[1];
          float sum = 0.0f;
          for (int i = 0; i < rows.taps; ++i) {
            const int64_t h = rows.index[size_t(oi * rows.taps + i)];
            const float wh = rows.weight[size_t(oi * rows.taps + i)];
            for (int j = 0; j < cols.taps; ++j) {
              const int64_t w = cols.index[size_t(oj * cols.taps + j)];
              sum += wh * cols.weight[size_t(oj * cols.taps + j)] * xc[h * g.xs[2] + w * g.xs[3]];
            }
          }
          y.data[n * g.ys[0] + c * g.ys[1] + oi * g.ys[2] + oj * g.ys[3]] = sum;
        }
}

void resize_backward(const ConstView& dy, const ResizeSpec& r, const View& dx, bool accumulate) {
  const Geometry g = geometry(dx.shape, dx.strides(), dy.shape, dy.strides());
  const std::pair<AxisTaps, AxisTaps> taps = taps_of(g, r);
  const AxisTaps& rows = taps.first;
  const AxisTaps& cols = taps.second;
  if (!accumulate) std::fill(dx.data, dx.data + dx.elements(), 0.0f);
  // One image per thread, its output pixels scattered in order: the bits never depend on T.
#pragma omp parallel for schedule(static) if (dy.elements() > 65536)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t oi = 0; oi < g.oh; ++oi)
      for (int64_t oj = 0; oj < g.ow; ++oj)
        for (int i = 0; i < rows.taps; ++i) {
          const int64_t h = rows.index[size_t(oi * rows.taps + i)];
          const float wh = rows.weight[size_t(oi * rows.taps + i)];
          for (int j = 0; j < cols.taps; ++j) {
            const int64_t w = cols.index[size_t(oj * cols.taps + j)];
            const float weight = wh * cols.weight[size_t(oj * cols.taps + j)];
            const float* from = dy.data + n * g.ys[0] + oi * g.ys[2] + oj * g.ys[3];
            float* to = dx.data + n * g.xs[0] + h * g.xs[2] + w * g.xs[3];
            for (int64_t c = 0; c < g.c; ++c) to[c * g.xs[1]] += weight * from[c * g.ys[1]];
          }
        }
}

}  // namespace convgen::ops
