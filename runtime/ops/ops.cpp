#include "runtime/ops/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <blis.h>

#include "runtime/ops/index_util.h"
#include "runtime/ops/pool_channels_last.h"

namespace convgen::ops {

using detail::broadcast_strides;
using detail::for_each_index;
using detail::for_each_row;
using detail::for_each_window;
using detail::offset;
using detail::pool_window_count;

// Element-wise loops and channels-last pooling split over OpenMP threads: each output
// element is computed by one thread in a fixed way, so the bits never depend on T.
namespace {

// One element-wise loop per op, the op outside the loop so that each vectorises.
template <typename F>
void map_elements(const float* x, float* y, int64_t n, F f) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) y[i] = f(x[i]);
}

}  // namespace

void unary(const ConstView& x, const View& y, Unary op, float alpha, float lo, float hi, float beta) {
  const int64_t n = x.elements();
  switch (op) {
    case Unary::Relu: return map_elements(x.data, y.data, n, [](float v) { return v > 0.0f ? v : 0.0f; });
    case Unary::LeakyRelu:
      return map_elements(x.data, y.data, n, [alpha](float v) { return v >= 0.0f ? v : alpha * v; });
    case Unary::Clip: return map_elements(x.data, y.data, n, [lo, hi](float v) { return std::min(std::max(v, lo), hi); });
    case Unary::Sigmoid: return map_elements(x.data, y.data, n, [](float v) { return 1.0f / (1.0f + std::exp(-v)); });
    case Unary::Identity: return map_elements(x.data, y.data, n, [](float v) { return v; });
    case Unary::HardSigmoid:
      return map_elements(x.data, y.data, n,
                          [alpha, beta](float v) { return std::min(std::max(alpha * v + beta, 0.0f), 1.0f); });
    case Unary::HardSwish:
      return map_elements(x.data, y.data, n,
                          [alpha, beta](float v) { return v * std::min(std::max(alpha * v + beta, 0.0f), 1.0f); });
    case Unary::Tanh: return map_elements(x.data, y.data, n, [](float v) { return std::tanh(v); });
    case Unary::Exp: return map_elements(x.data, y.data, n, [](float v) { return std::exp(v); });
    case Unary::Log: return map_elements(x.data, y.data, n, [](float v) { return std::log(v); });
    case Unary::Sqrt: return map_elements(x.data, y.data, n, [](float v) { return std::sqrt(v); });
    case Unary::Neg: return map_elements(x.data, y.data, n, [](float v) { return -v; });
    case Unary::Abs: return map_elements(x.data, y.data, n, [](float v) { return std::fabs(v); });
    case Unary::Softplus:
      return map_elements(x.data, y.data, n, [](float v) {
        return v > 0.0f ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
      });
    case Unary::Elu:
      return map_elements(x.data, y.data, n, [alpha](float v) { return v > 0.0f ? v : alpha * std::expm1(v); });
    case Unary::Erf: return map_elements(x.data, y.data, n, [](float v) { return std::erf(v); });
    case Unary::Reciprocal: return map_elements(x.data, y.data, n, [](float v) { return 1.0f / v; });
    case Unary::Selu:
      return map_elements(x.data, y.data, n,
                          [alpha, beta](float v) { return v > 0.0f ? beta * v : beta * (alpha * std::expm1(v)); });
    case Unary::Sin: return map_elements(x.data, y.data, n, [](float v) { return std::sin(v); });
    case Unary::Cos: return map_elements(x.data, y.data, n, [](float v) { return std::cos(v); });
    case Unary::Floor: return map_elements(x.data, y.data, n, [](float v) { return std::floor(v); });
    case Unary::Ceil: return map_elements(x.data, y.data, n, [](float v) { return std::ceil(v); });
  }
}

void reduce(const ConstView& x, const std::vector<int64_t>& axes, Reduce op, const View& y) {
  const std::vector<int64_t> xs = x.strides(), ys = detail::reduced_strides(x.shape, axes, y);
  const size_t n = static_cast<size_t>(y.elements());
  // f(x element, y offset) over every element of x, in x's row-major order.
  auto walk = [&](auto f) {
    for_each_row<2>(x.shape, {&xs, &ys}, [&](const std::array<int64_t, 2>& at, int64_t len) {
      const int64_t sx = xs.empty() ? 1 : xs.back(), sy = ys.empty() ? 0 : ys.back();
      for (int64_t j = 0; j < len; ++j) f(x.data[at[0] + j * sx], at[1] + j * sy);
    });
  };
  if (op == Reduce::Max || op == Reduce::Min || op == Reduce::LogSumExp) {
    const bool max = op != Reduce::Min;
    std::fill(y.data, y.data + n, max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity());
    walk([&](float v, int64_t o) {
      float& m = y.data[o];
      if (!std::isnan(m) && !(max ? v <= m : v >= m)) m = v;
    });
    if (op != Reduce::LogSumExp) return;
  }
  std::vector<double> acc(n, op == Reduce::Prod ? 1.0 : 0.0);
  walk([&](float v, int64_t o) {
    double& a = acc[size_t(o)];
    switch (op) {
      case Reduce::Prod: a *= v; break;
      case Reduce::L2: case Reduce::SumSquare: a += double(v) * v; break;
      case Reduce::L1: a += std::fabs(double(v)); break;
      case Reduce::LogSumExp: a += std::exp(double(v) - double(y.data[o])); break;
      default: a += v; break;
    }
  });
  double count = 1.0;
  for (int64_t d : axes) count *= double(x.shape[size_t(d)]);
  for (size_t i = 0; i < n; ++i) {
    const double a = acc[i];
    switch (op) {
      case Reduce::Mean: y.data[i] = float(a / count); break;
      case Reduce::L2: y.data[i] = float(std::sqrt(a)); break;
      case Reduce::LogSum: y.data[i] = float(std::log(a)); break;
      case Reduce::LogSumExp: y.data[i] = std::isfinite(y.data[i]) ? float(double(y.data[i]) + std::log(a)) : y.data[i]; break;
      default: y.data[i] = float(a); break;
    }
  }
}

namespace {

// Calls run(f) with the element function of `op`, one instantiation per op so that each
// loop vectorises with its op inside.
template <typename Run>
void with_binary_op(Binary op, Run run) {
  switch (op) {
    case Binary::Add: return run([](float u, float v) { return u + v; });
    case Binary::Sub: return run([](float u, float v) { return u - v; });
    case Binary::Mul: return run([](float u, float v) { return u * v; });
    case Binary::Div: return run([](float u, float v) { return u / v; });
    case Binary::Pow: return run([](float u, float v) { return std::pow(u, v); });
    case Binary::PRelu: return run([](float u, float v) { return u >= 0.0f ? u : v * u; });
    case Binary::Max: return run([](float u, float v) { return u != u || u > v ? u : v; });
    case Binary::Min: return run([](float u, float v) { return u != u || u < v ? u : v; });
  }
}

// For channels-last y [N, C, spatial...]: the stride between images of an operand holding
// one value per (n, c) -- shape [N or 1, C, 1, ...] once broadcast (squeeze-excitation's
// scale) -- or -1 when it is not one.
int64_t per_channel_image_stride(const ConstView& v, const View& y) {
  const size_t rank = y.shape.size();
  if (!y.channels_last || rank < 3 || v.shape.size() > rank) return -1;
  std::vector<int64_t> s(rank - v.shape.size(), 1);
  s.insert(s.end(), v.shape.begin(), v.shape.end());
  if (s[1] != y.shape[1] || (s[0] != 1 && s[0] != y.shape[0])) return -1;
  for (size_t d = 2; d < rank; ++d)
    if (s[d] != 1) return -1;
  return s[0] == 1 ? 0 : y.shape[1];
}

}  // namespace

void binary(const ConstView& a, const ConstView& b, const View& y, Binary op) {
  // Fast paths, same arithmetic: operands of y's shape and layout, or a scalar.
  const int64_t n = y.elements();
  const bool a_flat = a.shape == y.shape && a.channels_last == y.channels_last;
  const bool b_flat = b.shape == y.shape && b.channels_last == y.channels_last;
  if ((a_flat || a.elements() == 1) && (b_flat || b.elements() == 1)) {
    const int64_t ia = a_flat ? 1 : 0, ib = b_flat ? 1 : 0;
    auto run = [&](auto f) {
#pragma omp parallel for schedule(static) if (n > 65536)
      for (int64_t i = 0; i < n; ++i) y.data[i] = f(a.data[i * ia], b.data[i * ib]);
    };
    return with_binary_op(op, run);
  }
  // Channels-last y times one value per channel (squeeze-excitation's x * s[N, C, 1, 1]):
  // pixels outer, channels contiguous inside; the same f per element as below.
  const int64_t b_image = a_flat ? per_channel_image_stride(b, y) : -1;
  const int64_t a_image = b_flat ? per_channel_image_stride(a, y) : -1;
  if (n == 0) return;
  if (b_image >= 0 || a_image >= 0) {
    const int64_t N = y.shape[0], C = y.shape[1], pixels = n / (N * C);
    const bool full_first = b_image >= 0;
    const float* full = full_first ? a.data : b.data;
    const float* per_channel = full_first ? b.data : a.data;
    const int64_t image = full_first ? b_image : a_image;
    auto run = [&](auto f) {
#pragma omp parallel for collapse(2) schedule(static) if (n > 65536)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t px = 0; px < pixels; ++px) {
          const int64_t at = (i * pixels + px) * C;
          const float* v = per_channel + i * image;
          if (full_first)
            for (int64_t c = 0; c < C; ++c) y.data[at + c] = f(full[at + c], v[c]);
          else
            for (int64_t c = 0; c < C; ++c) y.data[at + c] = f(v[c], full[at + c]);
        }
    };
    return with_binary_op(op, run);
  }
  // Other broadcasting: row by row over y.
  const auto sa = broadcast_strides(a, y.shape.size()), sb = broadcast_strides(b, y.shape.size());
  const auto sy = y.strides();
  const int64_t ty = sy.empty() ? 0 : sy.back(), ta = sa.empty() ? 0 : sa.back(), tb = sb.empty() ? 0 : sb.back();
  auto run = [&](auto f) {
    for_each_row<3>(y.shape, {&sy, &sa, &sb}, [&](const std::array<int64_t, 3>& o, int64_t len) {
      float* py = y.data + o[0];
      const float *pa = a.data + o[1], *pb = b.data + o[2];
      for (int64_t j = 0; j < len; ++j) py[j * ty] = f(pa[j * ta], pb[j * tb]);
    });
  };
  with_binary_op(op, run);
}

// Channels-last 2-D average pooling: the window loops outside, channels contiguous
// inside; sums in double as the general path.
void average_pool_channels_last(const ConstView& x, const Window& w, bool count_include_pad, const View& y) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], Wd = x.shape[3];
  const int64_t P = y.shape[2], Q = y.shape[3];
#pragma omp parallel for collapse(2) schedule(static) if (N * P * Q * C > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      std::vector<double> acc(static_cast<size_t>(C));
      for (int64_t q = 0; q < Q; ++q) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const int64_t count = pool_window_count(w, p, q, H, Wd, count_include_pad);
        for (int64_t r = 0; r < w.kernel[0]; ++r) {
          const int64_t i = p * w.strides[0] + r * w.dilations[0] - w.pads_begin[0];
          for (int64_t s = 0; s < w.kernel[1]; ++s) {
            const int64_t j = q * w.strides[1] + s * w.dilations[1] - w.pads_begin[1];
            if (i < 0 || i >= H || j < 0 || j >= Wd) continue;
            const float* px = x.data + ((n * H + i) * Wd + j) * C;
            for (int64_t c = 0; c < C; ++c) acc[c] += px[c];
          }
        }
        float* py = y.data + ((n * P + p) * Q + q) * C;
        for (int64_t c = 0; c < C; ++c) py[c] = count > 0 ? static_cast<float>(acc[c] / double(count)) : 0.0f;
      }
    }
}

void max_pool(const ConstView& x, const Window& w, const View& y) {
  if (x.channels_last && y.channels_last && x.rank() == 4) return detail::max_pool_channels_last(x, w, y);
  const auto sx = x.strides(), sy = y.strides();
  for_each_index(y.shape, [&](const std::vector<int64_t>& o) {
    float m = -std::numeric_limits<float>::infinity();
    for_each_window(x, w, o, [&](const std::vector<int64_t>& i, bool inside, bool) {
      if (inside) m = std::max(m, x.data[offset(i, sx)]);
    });
    y.data[offset(o, sy)] = m;
  });
}

void average_pool(const ConstView& x, const Window& w, bool count_include_pad, const View& y) {
  if (x.channels_last && y.channels_last && x.rank() == 4) return average_pool_channels_last(x, w, count_include_pad, y);
  const auto sx = x.strides(), sy = y.strides();
  for_each_index(y.shape, [&](const std::vector<int64_t>& o) {
    double sum = 0.0;
    int64_t count = 0;
    for_each_window(x, w, o, [&](const std::vector<int64_t>& i, bool inside, bool in_padding_extent) {
      if (inside) sum += x.data[offset(i, sx)];
      if (count_include_pad ? in_padding_extent : inside) ++count;
    });
    y.data[offset(o, sy)] = count > 0 ? static_cast<float>(sum / static_cast<double>(count)) : 0.0f;
  });
}

void global_pool(const ConstView& x, bool max, const View& y) {
  // Dense or channels-last, the spatial positions of one (n, c) are a fixed stride apart:
  // one stride loop, no index vectors (this runs on every training step). The sum is taken
  // in double in row-major spatial order, whatever the layout.
  const auto sx = x.strides(), sy = y.strides();
  int64_t spatial = 1;
  for (size_t d = 2; d < x.shape.size(); ++d) spatial *= x.shape[d];
  const int64_t step = x.channels_last ? x.shape[1] : 1;
  if (x.channels_last) return detail::global_pool_channels_last(x, spatial, max, y);
  for (int64_t n = 0; n < x.shape[0]; ++n) {
    for (int64_t c = 0; c < x.shape[1]; ++c) {
      const float* p = x.data + n * sx[0] + c * sx[1];
      double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
      for (int64_t s = 0; s < spatial; ++s) {
        const double v = p[s * step];
        acc = max ? std::max(acc, v) : acc + v;
      }
      y.data[n * sy[0] + c * sy[1]] =
          static_cast<float>(max ? acc : acc / static_cast<double>(spatial));
    }
  }
}

void gemm(const ConstView& A, const ConstView& B, const ConstView* c, float alpha, float beta, bool trans_a,
          bool trans_b, const View& y) {
  if (A.channels_last || B.channels_last) throw std::logic_error("gemm: operands must be dense");
  const int64_t m = trans_a ? A.shape[1] : A.shape[0], k = trans_a ? A.shape[0] : A.shape[1];
  const int64_t n = trans_b ? B.shape[0] : B.shape[1];
  const auto sc = c ? broadcast_strides(*c, 2) : std::vector<int64_t>{0, 0};
  // y = beta*C first, then BLIS sgemm adds alpha*A'*B' (its K loop is never split
  // across threads, so the bits do not depend on the thread count).
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y.data[i * n + j] = c ? beta * c->data[i * sc[0] + j * sc[1]] : 0.0f;
  if (m == 0 || n == 0 || k == 0) return;
  float one = 1.0f, a_scale = alpha;
  bli_sgemm(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k,
            &a_scale, const_cast<float*>(A.data), A.shape[1], 1, const_cast<float*>(B.data), B.shape[1], 1, &one,
            y.data, n, 1);
}

void matmul(const ConstView& a_in, const ConstView& b_in, const View& y) {
  if (a_in.channels_last || b_in.channels_last) throw std::logic_error("matmul: operands must be dense");
  ConstView a = a_in, b = b_in;
  // Promote 1-D operands: a [K] -> [1, K], b [K] -> [K, 1]; ONNX drops the extra
  // dimension from the output, whose dense data is the same.
  if (a.shape.size() == 1) a.shape.insert(a.shape.begin(), 1);
  if (b.shape.size() == 1) b.shape.push_back(1);
  const int64_t m = a.shape[a.shape.size() - 2], k = a.shape.back(), n = b.shape.back();
  std::vector<int64_t> batch;  // broadcast batch shape
  const size_t ra = a.shape.size() - 2, rb = b.shape.size() - 2, r = std::max(ra, rb);
  for (size_t d = 0; d < r; ++d) {
    const int64_t ea = d + ra >= r ? a.shape[d + ra - r] : 1, eb = d + rb >= r ? b.shape[d + rb - r] : 1;
    batch.push_back(std::max(ea, eb));
  }
  auto batch_offset = [&](const std::vector<int64_t>& idx, const ConstView& t, size_t rt) {
    int64_t off = 0, stride = t.shape[rt] * t.shape[rt + 1];
    for (int64_t d = static_cast<int64_t>(rt) - 1; d >= 0; --d) {
      const int64_t e = t.shape[d];
      const int64_t i = idx[d + (r - rt)];
      off += (e == 1 ? 0 : i) * stride;
      stride *= e;
    }
    return off;
  };
  int64_t block = 0;
  for_each_index(batch, [&](const std::vector<int64_t>& bi) {
    const float* pa = a.data + batch_offset(bi, a, ra);
    const float* pb = b.data + batch_offset(bi, b, rb);
    float* py = y.data + block * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += static_cast<double>(pa[i * k + p]) * pb[p * n + j];
        py[i * n + j] = static_cast<float>(acc);
      }
    ++block;
  });
}

void concat(const std::vector<ConstView>& xs, int64_t axis, const View& y, const std::vector<int64_t>& order) {
  // Per position along the axis of the concatenation: the input and its index there.
  std::vector<std::pair<size_t, int64_t>> joined;
  for (size_t i = 0; i < xs.size(); ++i)
    for (int64_t j = 0; j < xs[i].shape[size_t(axis)]; ++j) joined.emplace_back(i, j);
  std::vector<std::pair<size_t, int64_t>> source = joined;  // per output position
  if (!order.empty())
    for (size_t k = 0; k < order.size(); ++k) source[k] = joined[size_t(order[k])];
  bool channels_last = y.channels_last && axis == 1;
  for (const ConstView& t : xs) channels_last = channels_last && t.channels_last;
  if (channels_last) {
    // Channel concatenation in channels-last storage: per pixel, each input's channels.
    // Pixels split over the threads, each output pixel written whole.
    const int64_t pixels = y.elements() / y.shape[1], C = y.shape[1];
    if (order.empty()) {
#pragma omp parallel for schedule(static) if (pixels * C > 65536)
      for (int64_t p = 0; p < pixels; ++p) {
        float* out = y.data + p * C;
        for (const ConstView& t : xs) {
          const int64_t c = t.shape[1];
          out = std::copy(t.data + p * c, t.data + (p + 1) * c, out);
        }
      }
      return;
    }
#pragma omp parallel for schedule(static) if (pixels * C > 65536)
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t k = 0; k < C; ++k) {
        const auto [i, c] = source[size_t(k)];
        y.data[p * C + k] = xs[i].data[p * xs[i].shape[1] + c];
      }
    return;
  }
  // Any layouts: per element of each input, its place in y.
  std::vector<int64_t> place(joined.size());
  for (size_t k = 0; k < source.size(); ++k) {
    int64_t flat = source[k].second;
    for (size_t i = 0; i < source[k].first; ++i) flat += xs[i].shape[size_t(axis)];
    place[size_t(flat)] = int64_t(k);
  }
  const auto sy = y.strides();
  int64_t start = 0;
  for (const ConstView& t : xs) {
    const auto st = t.strides();
    for_each_index(t.shape, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> o = i;
      o[axis] = place[size_t(start + i[axis])];
      y.data[offset(o, sy)] = t.data[offset(i, st)];
    });
    start += t.shape[axis];
  }
}

void transpose(const ConstView& x, const std::vector<int64_t>& perm, const View& y) {
  const auto sx = x.strides(), sy = y.strides();
  for_each_index(y.shape, [&](const std::vector<int64_t>& o) {
    int64_t from = 0;
    for (size_t d = 0; d < perm.size(); ++d) from += o[d] * sx[perm[d]];
    y.data[offset(o, sy)] = x.data[from];
  });
}

void slice(const ConstView& x, const std::vector<int64_t>& first, const std::vector<int64_t>& step, const View& y) {
  detail::for_each_window_element(y.shape, x.strides(), first, step, y.strides(),
                                  [&](int64_t from, int64_t to) { y.data[to] = x.data[from]; });
}

void batch_norm(const ConstView& x, const ConstView& scale, const ConstView& bias, const ConstView& mean,
                const ConstView& var, float epsilon, const View& y) {
  if (x.channels_last != y.channels_last) throw std::logic_error("batch_norm: x and y must share a layout");
  // Per-channel scale and shift over the flat data, channel from the element's place.
  const int64_t C = x.shape[1], n = x.elements();
  int64_t inner = 1;  // dense: elements per (n, c) block
  for (size_t d = 2; d < x.shape.size(); ++d) inner *= x.shape[d];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = x.channels_last ? i % C : (i / inner) % C;
    const double z = (static_cast<double>(x.data[i]) - mean.data[c]) / std::sqrt(static_cast<double>(var.data[c]) + epsilon);
    y.data[i] = static_cast<float>(scale.data[c] * z + bias.data[c]);
  }
}

void lrn(const ConstView& x, int64_t size, float alpha, float beta, float bias, const View& y) {
  const auto sx = x.strides(), sy = y.strides();
  const int64_t channels = x.shape[1], below = (size - 1) / 2, above = size - 1 - below;
  for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> j = i;
    double sum = 0.0;
    for (int64_t c = std::max<int64_t>(0, i[1] - below); c <= std::min(channels - 1, i[1] + above); ++c) {
      j[1] = c;
      const double v = x.data[offset(j, sx)];
      sum += v * v;
    }
    const double v = x.data[offset(i, sx)];
    y.data[offset(i, sy)] = static_cast<float>(v / std::pow(bias + alpha / static_cast<double>(size) * sum, beta));
  });
}

void pad(const ConstView& x, const std::vector<int64_t>& pads, float value, const View& y) {
  const size_t r = x.shape.size();
  std::fill(y.data, y.data + y.elements(), value);
  if (x.channels_last && y.channels_last && r == 4 && pads[0] == 0 && pads[1] == 0 && pads[4] == 0 && pads[5] == 0) {
    // Spatial padding of channels-last data: each input row of pixels is one copy.
    const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3], YH = y.shape[2], YW = y.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        std::copy(x.data + ((n * H + h) * W) * C, x.data + ((n * H + h) * W + W) * C,
                  y.data + ((n * YH + h + pads[2]) * YW + pads[3]) * C);
    return;
  }
  const auto sx = x.strides(), sy = y.strides();
  for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> o = i;
    for (size_t d = 0; d < r; ++d) o[d] += pads[d];
    y.data[offset(o, sy)] = x.data[offset(i, sx)];
  });
}

RowStatistics layer_norm_row(const float* row, int64_t cols, float epsilon) {
  double sum = 0.0;
  for (int64_t j = 0; j < cols; ++j) sum += row[j];
  const double mean = sum / double(cols);
  double squares = 0.0;
  for (int64_t j = 0; j < cols; ++j) squares += (row[j] - mean) * (row[j] - mean);
  return {mean, 1.0 / std::sqrt(squares / double(cols) + double(epsilon))};
}

int64_t layer_norm_row_length(const std::vector<int64_t>& shape, int64_t axis) {
  int64_t cols = 1;
  for (size_t d = size_t(axis); d < shape.size(); ++d) cols *= shape[d];
  return cols;
}

void layer_norm(const ConstView& x, const float* scale, int64_t scale_elements, const float* bias,
                int64_t bias_elements, int64_t axis, float epsilon, const View& y) {
  const int64_t cols = layer_norm_row_length(x.shape, axis);
  const int64_t rows = cols > 0 ? x.elements() / cols : 0;
  const bool one_scale = scale_elements == 1, one_bias = bias_elements == 1;
#pragma omp parallel for schedule(static) if (x.elements() > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data + r * cols;
    float* out = y.data + r * cols;
    const RowStatistics s = layer_norm_row(in, cols, epsilon);
    for (int64_t j = 0; j < cols; ++j) {
      const double z = (in[j] - s.mean) * s.inv * (scale ? scale[one_scale ? 0 : j] : 1.0f);
      out[j] = static_cast<float>(bias ? z + bias[one_bias ? 0 : j] : z);
    }
  }
}

namespace {

// Gather's blocks: outer (before axis), extent (of axis in x), inner (after axis).
std::array<int64_t, 3> gather_blocks(const std::vector<int64_t>& x_shape, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x_shape[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < x_shape.size(); ++d) inner *= x_shape[d];
  return {outer, x_shape[size_t(axis)], inner};
}

}  // namespace

void nll_loss(const ConstView& x, const std::vector<int64_t>& labels, const float* weight, bool has_ignore,
              int64_t ignore, LossReduction reduction, const View& y) {
  const int64_t N = x.shape[0], C = x.shape[1], D = x.elements() / std::max<int64_t>(1, N * C);
  double total = 0.0, weights = 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t label = labels[size_t(n * D + d)];
      const bool ignored = has_ignore && label == ignore;
      const float w = ignored ? 0.0f : weight ? weight[label] : 1.0f;
      const float loss = ignored ? 0.0f : -x.data[(n * C + label) * D + d] * w;
      if (reduction == LossReduction::None) y.data[n * D + d] = loss;
      total += loss;
      weights += w;
    }
  if (reduction == LossReduction::Sum) y.data[0] = float(total);
  if (reduction == LossReduction::Mean) y.data[0] = float(total / weights);
}

void gather(const ConstView& x, int64_t axis, const std::vector<int64_t>& indices, const View& y) {
  const int64_t k_end = static_cast<int64_t>(indices.size());
  if (x.channels_last || y.channels_last) {
    // Channels of a [N, C, spatial...] tensor by a 1-D index list, nothing else.
    if (!gather_layouts_supported(x.shape, axis, y.shape)) throw std::logic_error("gather: layout needs channels, 1-D indices");
    const auto sx = x.strides(), sy = y.strides();
    if (x.channels_last && y.channels_last) {
      const int64_t pixels = y.elements() / k_end, C = x.shape[1];
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t k = 0; k < k_end; ++k) y.data[p * k_end + k] = x.data[p * C + indices[size_t(k)]];
      return;
    }
    for_each_index(y.shape, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> i = o;
      i[1] = indices[size_t(o[1])];
      y.data[offset(o, sy)] = x.data[offset(i, sx)];
    });
    return;
  }
  const auto [outer, extent, inner] = gather_blocks(x.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < k_end; ++k)
      std::copy_n(x.data + (o * extent + indices[size_t(k)]) * inner, inner, y.data + (o * k_end + k) * inner);
}

void gather_backward(const ConstView& dy, int64_t axis, const std::vector<int64_t>& indices, const View& dx,
                     bool accumulate) {
  if (!accumulate) std::fill(dx.data, dx.data + dx.elements(), 0.0f);
  const int64_t k_end = static_cast<int64_t>(indices.size());
  if (dy.channels_last || dx.channels_last) {
    if (!gather_layouts_supported(dx.shape, axis, dy.shape))
      throw std::logic_error("gather_backward: layout needs channels, 1-D indices");
    const auto sdy = dy.strides(), sdx = dx.strides();
    if (dy.channels_last && dx.channels_last) {
      const int64_t pixels = dy.elements() / k_end, C = dx.shape[1];
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t k = 0; k < k_end; ++k) dx.data[p * C + indices[size_t(k)]] += dy.data[p * k_end + k];
      return;
    }
    for_each_index(dy.shape, [&](const std::vector<int64_t>& o) {
      std::vector<int64_t> i = o;
      i[1] = indices[size_t(o[1])];
      dx.data[offset(i, sdx)] += dy.data[offset(o, sdy)];
    });
    return;
  }
  const auto [outer, extent, inner] = gather_blocks(dx.shape, axis);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < k_end; ++k) {
      const float* from = dy.data + (o * k_end + k) * inner;
      float* to = dx.data + (o * extent + indices[size_t(k)]) * inner;
      for (int64_t e = 0; e < inner; ++e) to[e] += from[e];
    }
}

bool gather_layouts_supported(const std::vector<int64_t>& x_shape, int64_t axis, const std::vector<int64_t>& y_shape) {
  return axis == 1 && x_shape.size() == y_shape.size() && (x_shape.size() == 3 || x_shape.size() == 4);
}

void depth_space(const ConstView& from, const View& to, int64_t block, bool crd, bool from_deep, bool accumulate) {
  const ConstView deep = from_deep ? from : ConstView(to);
  const ConstView wide = from_deep ? ConstView(to) : from;
  const std::vector<int64_t> sd = deep.strides(), sw = wide.strides();
  const int64_t N = wide.shape[0], C = wide.shape[1], H = deep.shape[2], W = deep.shape[3];
  float* out = to.data;
  const float* in = from.data;
#pragma omp parallel for collapse(2) schedule(static) if (from.elements() > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < block; ++i)
        for (int64_t j = 0; j < block; ++j) {
          const int64_t dc = crd ? c * block * block + i * block + j : (i * block + j) * C + c;
          for (int64_t h = 0; h < H; ++h)
            for (int64_t w = 0; w < W; ++w) {
              const int64_t d = n * sd[0] + dc * sd[1] + h * sd[2] + w * sd[3];
              const int64_t v = n * sw[0] + c * sw[1] + (h * block + i) * sw[2] + (w * block + j) * sw[3];
              const int64_t src = from_deep ? d : v, dst = from_deep ? v : d;
              out[dst] = accumulate ? out[dst] + in[src] : in[src];
            }
        }
}

void add_channel_bias(float* y, int64_t rows, int64_t channels, const float* bias) {
#pragma omp parallel for schedule(static) if (rows * channels > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * channels;
    for (int64_t c = 0; c < channels; ++c) row[c] += bias[c];
  }
}

void softmax(const ConstView& x, int64_t axis, bool coerce_2d, bool log, const View& y) {
  if (x.channels_last || y.channels_last) throw std::logic_error("softmax: operands must be dense");
  const int64_t total = x.elements();
  std::copy(x.data, x.data + total, y.data);
  int64_t outer = 1, inner = 1, n = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= y.shape[d];
  if (coerce_2d) {
    for (size_t d = axis; d < y.shape.size(); ++d) n *= y.shape[d];
  } else {
    n = y.shape[axis];
    for (size_t d = axis + 1; d < y.shape.size(); ++d) inner *= y.shape[d];
  }
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      float* p = y.data + o * n * inner + in;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i * inner]);
      double sum = 0.0;
      for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(p[i * inner]) - m);
      for (int64_t i = 0; i < n; ++i) {
        const double z = static_cast<double>(p[i * inner]) - m;
        p[i * inner] = static_cast<float>(log ? z - std::log(sum) : std::exp(z) / sum);
      }
    }
  }
}

}  // namespace convgen::ops
