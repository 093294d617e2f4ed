#include "runtime/train/train_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <blis.h>

#include "runtime/ops/index_util.h"
#include "runtime/ops/splitmix64.h"

namespace convgen::ops {

using detail::broadcast_strides;
using detail::for_each_index;
using detail::for_each_row;
using detail::for_each_window;
using detail::offset;
using detail::pool_window_count;

namespace {

// dx (+)= v at flat element i.
inline void put(float* dx, int64_t i, float v, bool accumulate) { dx[i] = accumulate ? dx[i] + v : v; }

void clear_unless(const View& dx, bool accumulate) {
  if (!accumulate) std::fill(dx.data, dx.data + dx.elements(), 0.0f);
}

bool same_layout(const ConstView& a, const ConstView& b) {
  return a.shape == b.shape && (a.channels_last == b.channels_last || a.rank() < 3);
}

uint64_t mix(uint64_t z) { return splitmix64(z); }

}  // namespace

namespace {

// dx (+)= g(i) for every element, the loop instantiated per accumulate mode.
template <typename G>
void store_elements(float* dx, int64_t n, bool accumulate, G g) {
  if (accumulate)
    for (int64_t i = 0; i < n; ++i) dx[i] += g(i);
  else
    for (int64_t i = 0; i < n; ++i) dx[i] = g(i);
}

}  // namespace

void unary_backward(const ConstView& x, const ConstView& y, const ConstView& dy, const View& dx, Unary op,
                    float alpha, float lo, float hi, bool accumulate, float beta) {
  const int64_t n = dy.elements();
  const float *xs = x.data, *ys = y.data, *g = dy.data;
  switch (op) {
    // g[i] is loaded before the select, so the loops vectorise (no conditional load).
    case Unary::Relu:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i];
        return ys[i] > 0.0f ? gi : 0.0f;
      });
    case Unary::LeakyRelu:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) { return xs[i] > 0.0f ? g[i] : g[i] * alpha; });
    case Unary::Clip:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], xi = xs[i];
        return (xi >= lo && xi <= hi) ? gi : 0.0f;
      });
    case Unary::Sigmoid:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] * (ys[i] * (1.0f - ys[i])); });
    case Unary::Identity: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i]; });
    case Unary::HardSigmoid:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], v = alpha * xs[i] + beta;
        return v > 0.0f && v < 1.0f ? gi * alpha : 0.0f;
      });
    case Unary::HardSwish:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], xi = xs[i], v = alpha * xi + beta;
        return v < 0.0f ? 0.0f : v <= 1.0f ? gi * (2.0f * alpha * xi + beta) : gi;
      });
    case Unary::Tanh:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] * (1.0f - ys[i] * ys[i]); });
    case Unary::Exp: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] * ys[i]; });
    case Unary::Log: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] / xs[i]; });
    case Unary::Sqrt: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] / (2.0f * ys[i]); });
    case Unary::Neg: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return -g[i]; });
    case Unary::Abs:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], xi = xs[i];
        return xi > 0.0f ? gi : xi < 0.0f ? -gi : 0.0f;
      });
    case Unary::Softplus:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] / (1.0f + std::exp(-xs[i])); });
    case Unary::Elu:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], xi = xs[i];
        return xi > 0.0f ? gi : gi * (ys[i] + alpha);
      });
    case Unary::Erf:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float xi = xs[i];
        return g[i] * (1.1283791671f * std::exp(-xi * xi));  // 2 / sqrt(pi)
      });
    case Unary::Reciprocal:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) { return -g[i] * (ys[i] * ys[i]); });
    case Unary::Selu:
      return store_elements(dx.data, n, accumulate, [=](int64_t i) {
        const float gi = g[i], xi = xs[i];
        return xi > 0.0f ? gi * beta : gi * (ys[i] + beta * alpha);
      });
    case Unary::Sin: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return g[i] * std::cos(xs[i]); });
    case Unary::Cos: return store_elements(dx.data, n, accumulate, [=](int64_t i) { return -g[i] * std::sin(xs[i]); });
    case Unary::Floor: case Unary::Ceil: return store_elements(dx.data, n, accumulate, [](int64_t) { return 0.0f; });
  }
}

namespace {

// d y / d operand at one element (float, as PyTorch's autograd formulas).
float partial(Binary op, int which, float a, float b, float y) {
  switch (op) {
    case Binary::Add: return 1.0f;
    case Binary::Sub: return which == 0 ? 1.0f : -1.0f;
    case Binary::Mul: return which == 0 ? b : a;
    case Binary::Div: return which == 0 ? 1.0f / b : -a / (b * b);
    case Binary::Pow:
      // a^(b-1) as y / a (y = a^b, computed by the forward): one division, not a pow.
      if (which == 0) return a != 0.0f ? b * (y / a) : b * std::pow(a, b - 1.0f);
      return (a == 0.0f && b >= 0.0f) ? 0.0f : y * std::log(a);
    case Binary::PRelu:  // PyTorch's: the slope's side where the input is not positive
      return which == 0 ? (a > 0.0f ? 1.0f : b) : (a > 0.0f ? 0.0f : a);
    case Binary::Max:  // PyTorch's maximum / minimum: the larger (smaller) side, ties halved
    case Binary::Min: {
      if (a == b) return 0.5f;
      const bool a_wins = op == Binary::Max ? a > b : a < b;
      return (which == 0) == a_wins ? 1.0f : 0.0f;
    }
  }
  return 0.0f;
}

}  // namespace

void binary_backward(const ConstView& a, const ConstView& b, const ConstView& y, const ConstView& dy, Binary op,
                     int which, const View& d_operand, bool accumulate) {
  const ConstView& operand = which == 0 ? a : b;
  const int64_t n = dy.elements();
  const bool a_flat = same_layout(a, dy), b_flat = same_layout(b, dy);
  if (same_layout(operand, dy) && (a_flat || a.elements() == 1) && (b_flat || b.elements() == 1)) {
    // No reduction: one partial per element, the op outside the loop.
    const int64_t ia = a_flat ? 1 : 0, ib = b_flat ? 1 : 0;
    const float *pa = a.data, *pb = b.data, *py = y.data, *g = dy.data;
    auto run = [&](auto f) { store_elements(d_operand.data, n, accumulate, [=](int64_t i) { return f(i); }); };
    switch (op) {
      case Binary::Add: return run([=](int64_t i) { return g[i]; });
      case Binary::Sub: return run([=](int64_t i) { return which == 0 ? g[i] : -g[i]; });
      case Binary::Mul: return run([=](int64_t i) { return g[i] * (which == 0 ? pb[i * ib] : pa[i * ia]); });
      case Binary::Div:
        if (which == 0) return run([=](int64_t i) { return g[i] * (1.0f / pb[i * ib]); });
        return run([=](int64_t i) { return g[i] * (-pa[i * ia] / (pb[i * ib] * pb[i * ib])); });
      case Binary::Pow:
        if (which == 0) return run([=](int64_t i) { return g[i] * partial(Binary::Pow, 0, pa[i * ia], pb[i * ib], py[i]); });
        return run([=](int64_t i) { return g[i] * partial(Binary::Pow, 1, pa[i * ia], pb[i * ib], py[i]); });
      case Binary::PRelu:
      case Binary::Max:
      case Binary::Min:
        return run([=](int64_t i) { return g[i] * partial(op, which, pa[i * ia], pb[i * ib], py[i]); });
    }
    return;
  }
  // Broadcast operand: sums over y's row-major order into a double accumulator of the
  // operand's size, then stored (or added) once.
  const size_t r = dy.shape.size();
  const auto sa = broadcast_strides(a, r), sb = broadcast_strides(b, r), so = broadcast_strides(operand, r);
  const auto sy = dy.strides();
  const int64_t ty = sy.empty() ? 0 : sy.back(), ta = sa.empty() ? 0 : sa.back(), tb = sb.empty() ? 0 : sb.back(),
                to = so.empty() ? 0 : so.back();
  if (same_layout(operand, dy)) {
    // The other operand is broadcast, this one is not: one term per element, rounded as
    // the accumulator below would round it (0.0 + term, then to float).
    for_each_row<4>(dy.shape, {&sy, &sa, &sb, &so}, [&](const std::array<int64_t, 4>& o, int64_t len) {
      const float *g = dy.data + o[0], *py = y.data + o[0], *pa = a.data + o[1], *pb = b.data + o[2];
      float* pd = d_operand.data + o[3];
      for (int64_t j = 0; j < len; ++j) {
        const double term = 0.0 + double(g[j * ty]) * partial(op, which, pa[j * ta], pb[j * tb], py[j * ty]);
        put(pd, j * to, float(term), accumulate);
      }
    });
    return;
  }
  std::vector<double> acc(static_cast<size_t>(operand.elements()), 0.0);
  for_each_row<4>(dy.shape, {&sy, &sa, &sb, &so}, [&](const std::array<int64_t, 4>& o, int64_t len) {
    const float *g = dy.data + o[0], *py = y.data + o[0], *pa = a.data + o[1], *pb = b.data + o[2];
    double* pacc = acc.data() + o[3];
    for (int64_t j = 0; j < len; ++j)
      pacc[j * to] += double(g[j * ty]) * partial(op, which, pa[j * ta], pb[j * tb], py[j * ty]);
  });
  for (size_t i = 0; i < acc.size(); ++i) put(d_operand.data, int64_t(i), float(acc[i]), accumulate);
}

// ---- pooling ---------------------------------------------------------------------

void max_pool_forward_argmax_raw(const ConstView& x, const Window& w, const View& y, int32_t* argmax);

// The ReLU fused into MaxPool: y <- max(y, 0), a zeroed output routes no gradient
// (argmax -1). Branch-free (half the outputs go either way: a branch mispredicts), so it
// vectorises; cloned for AVX2 like max_pool_channels_last, the same bits.
__attribute__((target_clones("avx2", "default"))) static void relu_after_max_pool(float* __restrict y,
                                                                                   int32_t* __restrict argmax,
                                                                                   int64_t n) {
  for (int64_t o = 0; o < n; ++o) {
    const bool positive = y[o] > 0.0f;
    y[o] = positive ? y[o] : 0.0f;
    argmax[o] = positive ? argmax[o] : -1;
  }
}

void max_pool_forward_argmax(const ConstView& x, const Window& w, const View& y, int32_t* argmax, bool relu) {
  max_pool_forward_argmax_raw(x, w, y, argmax);
  if (relu) relu_after_max_pool(y.data, argmax, y.elements());
}

// MaxPool over channels-last [N][H][W][C] with its argmax, taps in window order: the
// first maximum wins, later taps replace it only when strictly greater (or when nothing
// was taken yet). The channel loop is branch-free over restrict pointers so it
// vectorises (compare, blend); the function is cloned for AVX2 where the CPU has it --
// the same comparisons and selects in every clone, so the same bits.
__attribute__((target_clones("avx2", "default"))) static void max_pool_channels_last(
    const float* __restrict x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t P, int64_t Q, const Window& w,
    float* __restrict y, int32_t* __restrict argmax) {
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q) {
        float* __restrict best = y + ((n * P + p) * Q + q) * C;
        int32_t* __restrict where = argmax + ((n * P + p) * Q + q) * C;
        for (int64_t c = 0; c < C; ++c) best[c] = -std::numeric_limits<float>::infinity(), where[c] = -1;
        for (int64_t r = 0; r < w.kernel[0]; ++r) {
          const int64_t i = p * w.strides[0] + r * w.dilations[0] - w.pads_begin[0];
          if (i < 0 || i >= H) continue;
          for (int64_t s = 0; s < w.kernel[1]; ++s) {
            const int64_t j = q * w.strides[1] + s * w.dilations[1] - w.pads_begin[1];
            if (j < 0 || j >= W) continue;
            const int32_t base = int32_t(((n * H + i) * W + j) * C);
            const float* __restrict px = x + base;
            for (int64_t c = 0; c < C; ++c) {
              const float v = px[c], b = best[c];
              const int32_t at = where[c];
              const bool take = (v > b) | (at < 0);
              best[c] = take ? v : b;
              where[c] = take ? base + int32_t(c) : at;
            }
          }
        }
      }
}

void max_pool_forward_argmax_raw(const ConstView& x, const Window& w, const View& y, int32_t* argmax) {
  if (x.channels_last && y.channels_last && x.rank() == 4) {
    max_pool_channels_last(x.data, x.shape[0], x.shape[1], x.shape[2], x.shape[3], y.shape[2], y.shape[3], w, y.data,
                           argmax);
    return;
  }
  const auto sx = x.strides(), sy = y.strides();
  for_each_index(y.shape, [&](const std::vector<int64_t>& o) {
    float m = -std::numeric_limits<float>::infinity();
    int64_t at = -1;
    for_each_window(x, w, o, [&](const std::vector<int64_t>& i, bool inside, bool) {
      if (!inside) return;
      const int64_t off = offset(i, sx);
      if (at < 0 || x.data[off] > m) m = x.data[off], at = off;
    });
    y.data[offset(o, sy)] = m;
    argmax[offset(o, sy)] = int32_t(at);
  });
}

void max_pool_backward_argmax(const ConstView& dy, const int32_t* argmax, const View& dx, bool accumulate) {
  clear_unless(dx, accumulate);
  // Outputs in storage order; overlapping windows add in that fixed order.
  for (int64_t o = 0, o_end = dy.elements(); o < o_end; ++o)
    if (argmax[o] >= 0) dx.data[argmax[o]] += dy.data[o];
}

void average_pool_backward(const Window& w, bool count_include_pad, const ConstView& dy, const View& dx,
                           bool accumulate) {
  clear_unless(dx, accumulate);
  if (dy.channels_last && dx.channels_last && dx.rank() == 4) {
    const int64_t N = dx.shape[0], C = dx.shape[1], H = dx.shape[2], W = dx.shape[3], P = dy.shape[2], Q = dy.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q) {
          const int64_t count = pool_window_count(w, p, q, H, W, count_include_pad);  // the forward's divisor
          if (count == 0) continue;
          const float* g = dy.data + ((n * P + p) * Q + q) * C;
          for (int64_t r = 0; r < w.kernel[0]; ++r) {
            const int64_t i = p * w.strides[0] + r * w.dilations[0] - w.pads_begin[0];
            if (i < 0 || i >= H) continue;
            for (int64_t s = 0; s < w.kernel[1]; ++s) {
              const int64_t j = q * w.strides[1] + s * w.dilations[1] - w.pads_begin[1];
              if (j < 0 || j >= W) continue;
              float* d = dx.data + ((n * H + i) * W + j) * C;
              for (int64_t c = 0; c < C; ++c) d[c] += g[c] / float(count);
            }
          }
        }
    return;
  }
  const ConstView shape_of_x{dx.data, dx.shape, dx.channels_last};
  const auto sy = dy.strides(), sdx = dx.strides();
  for_each_index(dy.shape, [&](const std::vector<int64_t>& o) {
    int64_t count = 0;
    for_each_window(shape_of_x, w, o, [&](const std::vector<int64_t>&, bool inside, bool in_padding_extent) {
      if (count_include_pad ? in_padding_extent : inside) ++count;
    });
    if (count == 0) return;
    const float g = dy.data[offset(o, sy)] / float(count);
    for_each_window(shape_of_x, w, o, [&](const std::vector<int64_t>& i, bool inside, bool) {
      if (inside) dx.data[offset(i, sdx)] += g;
    });
  });
}

void global_average_pool_backward(const ConstView& dy, const View& dx, bool accumulate) {
  int64_t spatial = 1;
  for (size_t d = 2; d < dx.shape.size(); ++d) spatial *= dx.shape[d];
  const auto sdx = dx.strides(), sy = dy.strides();
  const int64_t step = dx.channels_last ? dx.shape[1] : 1;
  for (int64_t n = 0; n < dx.shape[0]; ++n) {
    for (int64_t c = 0; c < dx.shape[1]; ++c) {
      const float g = dy.data[n * sy[0] + c * sy[1]] / float(spatial);
      float* p = dx.data + n * sdx[0] + c * sdx[1];
      for (int64_t s = 0; s < spatial; ++s) put(p, s * step, g, accumulate);
    }
  }
}

void slice_backward(const ConstView& dy, const std::vector<int64_t>& first, const std::vector<int64_t>& step,
                    const View& dx, bool accumulate) {
  clear_unless(dx, accumulate);
  detail::for_each_window_element(dy.shape, dx.strides(), first, step, dy.strides(),
                                  [&](int64_t to, int64_t from) { dx.data[to] += dy.data[from]; });
}

void transpose_backward(const ConstView& dy, const std::vector<int64_t>& perm, const View& dx, bool accumulate) {
  const auto sd = dx.strides(), sy = dy.strides();
  for_each_index(dy.shape, [&](const std::vector<int64_t>& o) {
    int64_t to = 0;
    for (size_t d = 0; d < perm.size(); ++d) to += o[d] * sd[perm[d]];
    put(dx.data, to, dy.data[offset(o, sy)], accumulate);
  });
}

void reduce_backward(const ConstView& x, const ConstView& y, const ConstView& dy, const std::vector<int64_t>& axes,
                     Reduce op, const View& dx, bool accumulate) {
  const std::vector<int64_t> xs = x.strides(), ys = detail::reduced_strides(x.shape, axes, y);
  const std::vector<int64_t> gs = detail::reduced_strides(x.shape, axes, dy), dxs = dx.strides();
  float count = 1.0f;
  for (int64_t a : axes) count *= float(x.shape[size_t(a)]);
  std::vector<char> taken(op == Reduce::Max || op == Reduce::Min ? size_t(y.elements()) : 0, 0);
  for_each_row<4>(x.shape, {&xs, &ys, &gs, &dxs}, [&](const std::array<int64_t, 4>& at, int64_t len) {
    const int64_t sx = xs.empty() ? 1 : xs.back(), sy = ys.empty() ? 0 : ys.back();
    const int64_t sg = gs.empty() ? 0 : gs.back(), sd = dxs.empty() ? 1 : dxs.back();
    for (int64_t j = 0; j < len; ++j) {
      const float g = dy.data[at[2] + j * sg], xv = x.data[at[0] + j * sx];
      const int64_t yi = at[1] + j * sy;
      float v = g;
      switch (op) {
        case Reduce::Mean: v = g / count; break;
        case Reduce::Sum: break;
        case Reduce::L2: v = y.data[yi] != 0.0f ? g * xv / y.data[yi] : 0.0f; break;
        case Reduce::Max: case Reduce::Min: {
          const bool first = !taken[size_t(yi)] && (xv == y.data[yi] || (std::isnan(xv) && std::isnan(y.data[yi])));
          if (first) taken[size_t(yi)] = 1;
          v = first ? g : 0.0f;
          break;
        }
        case Reduce::SumSquare: v = 2.0f * xv * g; break;
        case Reduce::L1: v = xv > 0.0f ? g : xv < 0.0f ? -g : 0.0f; break;
        case Reduce::LogSum: v = g / std::exp(y.data[yi]); break;
        case Reduce::LogSumExp: v = g * std::exp(xv - y.data[yi]); break;
        case Reduce::Prod: throw std::logic_error("reduce_backward: no ReduceProd gradient");
      }
      put(dx.data, at[3] + j * sd, v, accumulate);
    }
  });
}

// ---- GEMM ------------------------------------------------------------------------

void sgemm_1t(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  // One thread whatever BLIS_NUM_THREADS says: the caller's threads own the cores, and
  // a fixed decomposition keeps the bits independent of the environment.
  rntm_t rntm = BLIS_RNTM_INITIALIZER;
  bli_rntm_set_num_threads(1, &rntm);
  bli_sgemm_ex(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, m, n, k,
               &alpha, const_cast<float*>(a), lda, 1, const_cast<float*>(b), ldb, 1, &beta, c, ldc, 1, nullptr, &rntm);
}

void gemm_1t(const ConstView& A, const ConstView& B, const ConstView* c, float alpha, float beta, bool trans_a,
             bool trans_b, const View& y) {
  if (A.rank() != 2 || B.rank() != 2) throw std::logic_error("gemm_1t: 2-D operands expected");
  const int64_t m = trans_a ? A.shape[1] : A.shape[0], k = trans_a ? A.shape[0] : A.shape[1];
  const int64_t n = trans_b ? B.shape[0] : B.shape[1];
  const auto sc = c ? broadcast_strides(*c, 2) : std::vector<int64_t>{0, 0};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y.data[i * n + j] = c ? beta * c->data[i * sc[0] + j * sc[1]] : 0.0f;
  sgemm_1t(trans_a, trans_b, m, n, k, alpha, A.data, A.shape[1], B.data, B.shape[1], 1.0f, y.data, n);
}

void gemm_backward(const ConstView& A, const ConstView& B, const ConstView& dy, float alpha, float beta,
                   bool trans_a, bool trans_b, const View* da, bool accumulate_a, const View* db, bool accumulate_b,
                   const View* dc, bool accumulate_c) {
  const int64_t m = trans_a ? A.shape[1] : A.shape[0], k = trans_a ? A.shape[0] : A.shape[1];
  const int64_t n = trans_b ? B.shape[0] : B.shape[1];
  const int64_t lda = A.shape[1], ldb = B.shape[1];
  if (da) {
    // d op(A) = alpha * dY * op(B)^T; stored transposed when A is.
    if (!trans_a)
      sgemm_1t(false, !trans_b, m, k, n, alpha, dy.data, n, B.data, ldb, accumulate_a ? 1.0f : 0.0f, da->data, k);
    else
      sgemm_1t(trans_b, true, k, m, n, alpha, B.data, ldb, dy.data, n, accumulate_a ? 1.0f : 0.0f, da->data, m);
  }
  if (db) {
    // d op(B) = alpha * op(A)^T * dY.
    if (!trans_b)
      sgemm_1t(!trans_a, false, k, n, m, alpha, A.data, lda, dy.data, n, accumulate_b ? 1.0f : 0.0f, db->data, n);
    else
      sgemm_1t(true, trans_a, n, k, m, alpha, dy.data, n, A.data, lda, accumulate_b ? 1.0f : 0.0f, db->data, k);
  }
  if (dc) {
    const auto sc = broadcast_strides(ConstView{dc->data, dc->shape, false}, 2);
    std::vector<double> acc(static_cast<size_t>(dc->elements()), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) acc[i * sc[0] + j * sc[1]] += double(dy.data[i * n + j]);
    for (size_t i = 0; i < acc.size(); ++i) put(dc->data, int64_t(i), float(beta * acc[i]), accumulate_c);
  }
}

// ---- shape operators ---------------------------------------------------------------

void concat_backward(const ConstView& dy, int64_t axis, const std::vector<std::vector<int64_t>>& input_shapes,
                     int index, const View& dx, bool accumulate) {
  int64_t start = 0;
  for (int i = 0; i < index; ++i) start += input_shapes[i][axis];
  if (axis == 1 && (dx.rank() < 3 || (dy.channels_last && dx.channels_last))) {
    // Channel concatenation, channels innermost: per pixel, a contiguous run of dy's
    // channels (the forward's mirror; DenseNet's every layer).
    const int64_t c = dx.shape[1], C = dy.shape[1], pixels = dx.elements() / c;
    for (int64_t p = 0; p < pixels; ++p) {
      const float* from = dy.data + p * C + start;
      float* to = dx.data + p * c;
      if (accumulate)
        for (int64_t j = 0; j < c; ++j) to[j] += from[j];
      else
        std::copy(from, from + c, to);
    }
    return;
  }
  const auto sy = dy.strides(), sx = dx.strides();
  for_each_index(dx.shape, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> o = i;
    o[axis] += start;
    put(dx.data, offset(i, sx), dy.data[offset(o, sy)], accumulate);
  });
}

void pad_backward(const ConstView& dy, const std::vector<int64_t>& pads, const View& dx, bool accumulate) {
  if (dx.rank() == 4 && dy.channels_last && dx.channels_last && pads.size() == 8 && pads[0] == 0 && pads[1] == 0 &&
      pads[4] == 0 && pads[5] == 0) {
    // Spatial padding in channels-last storage: each pixel's channels are one contiguous run.
    const int64_t N = dx.shape[0], C = dx.shape[1], H = dx.shape[2], W = dx.shape[3];
    const int64_t HY = dy.shape[2], WY = dy.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          const float* from = dy.data + ((n * HY + h + pads[2]) * WY + w + pads[3]) * C;
          float* to = dx.data + ((n * H + h) * W + w) * C;
          if (accumulate)
            for (int64_t c = 0; c < C; ++c) to[c] += from[c];
          else
            std::copy(from, from + C, to);
        }
    return;
  }
  const auto sy = dy.strides(), sx = dx.strides();
  for_each_index(dx.shape, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> o = i;
    for (size_t d = 0; d < o.size(); ++d) o[d] += pads[d];
    put(dx.data, offset(i, sx), dy.data[offset(o, sy)], accumulate);
  });
}

void relabel_backward(const ConstView& dy, const View& dx, bool accumulate) {
  if (dy.channels_last == dx.channels_last || dx.rank() < 3) {
    for (int64_t i = 0, i_end = dx.elements(); i < i_end; ++i) put(dx.data, i, dy.data[i], accumulate);
    return;
  }
  if (dx.rank() == 4 && dx.channels_last && !dy.channels_last) {
    // Dense NCHW gradient into channels-last storage (Flatten's backward).
    const int64_t N = dx.shape[0], C = dx.shape[1], HW = dx.shape[2] * dx.shape[3];
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t c = 0; c < C; ++c) put(dx.data, (n * HW + p) * C + c, dy.data[(n * C + c) * HW + p], accumulate);
    return;
  }
  const auto sy = dy.strides(), sx = dx.strides();
  for_each_index(dx.shape, [&](const std::vector<int64_t>& i) {
    put(dx.data, offset(i, sx), dy.data[offset(i, sy)], accumulate);
  });
}

void lrn_backward(const ConstView& x, const ConstView& dy, int64_t size, float alpha, float beta, float bias,
                  const View& dx, bool accumulate) {
  // y_c = x_c * s_c^-beta, s_c = bias + alpha/size * sum over c's window of x^2, so
  // dx_c = dy_c * s_c^-beta - 2 alpha beta / size * x_c * sum over windows containing c
  //        of dy_j * x_j * s_j^(-beta-1).
  const auto sx = x.strides(), sy = dy.strides(), sdx = dx.strides();
  const int64_t channels = x.shape[1], below = (size - 1) / 2, above = size - 1 - below;
  const double k = double(alpha) / double(size);
  auto window_sum = [&](std::vector<int64_t> j) {
    const int64_t c0 = j[1];
    double sum = 0.0;
    for (int64_t c = std::max<int64_t>(0, c0 - below); c <= std::min(channels - 1, c0 + above); ++c) {
      j[1] = c;
      const double v = x.data[offset(j, sx)];
      sum += v * v;
    }
    return double(bias) + k * sum;
  };
  for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
    const double xi = x.data[offset(i, sx)];
    double g = double(dy.data[offset(i, sy)]) * std::pow(window_sum(i), -double(beta));
    std::vector<int64_t> j = i;
    double cross = 0.0;
    for (int64_t c = std::max<int64_t>(0, i[1] - above); c <= std::min(channels - 1, i[1] + below); ++c) {
      j[1] = c;
      cross += double(dy.data[offset(j, sy)]) * double(x.data[offset(j, sx)]) *
               std::pow(window_sum(j), -double(beta) - 1.0);
    }
    g -= 2.0 * k * double(beta) * xi * cross;
    put(dx.data, offset(i, sdx), float(g), accumulate);
  });
}

// ---- within-channel LRN ------------------------------------------------------------

namespace {

// out[p][c] = sum of in[j][c] over the k x k window around pixel p (zero outside), one
// image of channels-last data [H][W][C]; the taps in row-major order.
void box_sum(const float* in, int64_t H, int64_t W, int64_t C, int64_t k, float* out) {
  const int64_t half = (k - 1) / 2;
  for (int64_t h = 0; h < H; ++h)
    for (int64_t w = 0; w < W; ++w) {
      float* o = out + (h * W + w) * C;
      std::fill(o, o + C, 0.0f);
      for (int64_t i = std::max<int64_t>(0, h - half); i <= std::min(H - 1, h + half); ++i)
        for (int64_t j = std::max<int64_t>(0, w - half); j <= std::min(W - 1, w + half); ++j) {
          const float* p = in + (i * W + j) * C;
          for (int64_t c = 0; c < C; ++c) o[c] += p[c];
        }
    }
}

}  // namespace

namespace {

// q = s^exponent for n elements, the one formula forward and backward both use.
void lrn_power(const float* s, int64_t n, float exponent, float* q) {
  if (exponent == -0.75f) {
    // Caffe's default beta: s^-3/4 = 1 / (sqrt(s) sqrt(sqrt(s))), square roots that
    // vectorise (within 2 ulp of powf), instead of a powf call per element.
    for (int64_t e = 0; e < n; ++e) {
      const float r = std::sqrt(s[e]);
      q[e] = 1.0f / (r * std::sqrt(r));
    }
  } else {
    for (int64_t e = 0; e < n; ++e) q[e] = std::pow(s[e], exponent);
  }
}

}  // namespace

void within_channel_lrn_forward(const ConstView& x, int64_t k, float alpha, float bias, float exponent,
                                const View& y, float* s) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3], image = H * W * C;
  const float scale = alpha / float(k * k);
  std::vector<float> squares(static_cast<size_t>(image));
  for (int64_t n = 0; n < N; ++n) {
    const float* xi = x.data + n * image;
    for (int64_t e = 0; e < image; ++e) squares[e] = xi[e] * xi[e];
    float* si = s + n * image;
    box_sum(squares.data(), H, W, C, k, si);
    for (int64_t e = 0; e < image; ++e) si[e] = bias + scale * si[e];
    lrn_power(si, image, exponent, squares.data());  // q, in the squares' buffer
    for (int64_t e = 0; e < image; ++e) y.data[n * image + e] = xi[e] * squares[e];
  }
}

void within_channel_lrn_backward(const ConstView& x, const float* s, const ConstView& dy, int64_t k, float alpha,
                                 float exponent, const View& dx, bool accumulate, float* scratch) {
  // dx_p = dy_p q_p + 2 x_p (alpha exponent / k^2) sum over the window around p of
  // dy_j x_j q_j / s_j (the window is symmetric: "same" padding, stride 1).
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3], image = H * W * C;
  const float factor = 2.0f * alpha * exponent / float(k * k);
  std::vector<float> t(static_cast<size_t>(image)), q(static_cast<size_t>(image));
  for (int64_t n = 0; n < N; ++n) {
    const int64_t o = n * image;
    lrn_power(s + o, image, exponent, q.data());  // recomputed: the forward keeps s only
    for (int64_t e = 0; e < image; ++e) t[e] = dy.data[o + e] * x.data[o + e] * q[e] / s[o + e];
    box_sum(t.data(), H, W, C, k, scratch);
    store_elements(dx.data + o, image, accumulate, [&](int64_t e) {
      return dy.data[o + e] * q[e] + factor * x.data[o + e] * scratch[e];
    });
  }
}

// ---- dropout -----------------------------------------------------------------------

void dropout_forward(const ConstView& x, float ratio, uint64_t seed, uint64_t stream, int64_t step, int64_t first_sample,
                     const View& y, float* mask) {
  const int64_t n = x.elements(), per_sample = n / std::max<int64_t>(1, x.shape[0]);
  const float scale = ratio < 1.0f ? 1.0f / (1.0f - ratio) : 0.0f;
  const uint64_t key = mix(mix(mix(seed) + stream) + uint64_t(step));
  for (int64_t s = 0; s < x.shape[0]; ++s) {
    const uint64_t sample_key = mix(key + uint64_t(first_sample + s));
    for (int64_t e = 0; e < per_sample; ++e) {
      // 24 random bits: a uniform draw in [0, 1) exact in float.
      const float u = float(mix(sample_key + uint64_t(e)) >> 40) * (1.0f / 16777216.0f);
      const int64_t i = s * per_sample + e;
      mask[i] = u >= ratio ? scale : 0.0f;
      y.data[i] = x.data[i] * mask[i];
    }
  }
}

uint64_t dropout_stream(const std::string& output_name) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : output_name) h = (h ^ c) * 1099511628211ull;
  return h;
}

void dropout_backward(const ConstView& dy, const float* mask, const View& dx, bool accumulate) {
  for (int64_t i = 0, i_end = dy.elements(); i < i_end; ++i) put(dx.data, i, dy.data[i] * mask[i], accumulate);
}

// ---- LayerNormalization ------------------------------------------------------------

void layer_norm_backward_input(const ConstView& x, const float* scale, int64_t scale_elements, const ConstView& dy,
                               int64_t axis, float epsilon, const View& dx, bool accumulate) {
  const int64_t cols = layer_norm_row_length(x.shape, axis), rows = cols > 0 ? x.elements() / cols : 0;
  const bool one = scale_elements == 1;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data + r * cols;
    const float* d = dy.data + r * cols;
    const RowStatistics s = layer_norm_row(in, cols, epsilon);
    double g_sum = 0.0, gx_sum = 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double g = double(d[j]) * (scale ? scale[one ? 0 : j] : 1.0f);
      g_sum += g;
      gx_sum += g * (in[j] - s.mean) * s.inv;
    }
    const double g_mean = g_sum / double(cols), gx_mean = gx_sum / double(cols);
    for (int64_t j = 0; j < cols; ++j) {
      const double g = double(d[j]) * (scale ? scale[one ? 0 : j] : 1.0f);
      const double xhat = (in[j] - s.mean) * s.inv;
      put(dx.data, r * cols + j, static_cast<float>(s.inv * (g - g_mean - xhat * gx_mean)), accumulate);
    }
  }
}

void layer_norm_backward_parameter(const ConstView& x, const ConstView& dy, int64_t axis, float epsilon, int which,
                                   float* param, int64_t param_elements, bool accumulate) {
  const int64_t cols = layer_norm_row_length(x.shape, axis), rows = cols > 0 ? x.elements() / cols : 0;
  std::vector<double> sums(static_cast<size_t>(param_elements == 1 ? 1 : cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data + r * cols;
    const float* d = dy.data + r * cols;
    const RowStatistics s = which == 1 ? layer_norm_row(in, cols, epsilon) : RowStatistics{0.0, 0.0};
    for (int64_t j = 0; j < cols; ++j) {
      const double v = which == 1 ? double(d[j]) * ((in[j] - s.mean) * s.inv) : double(d[j]);
      sums[param_elements == 1 ? 0 : size_t(j)] += v;
    }
  }
  for (size_t j = 0; j < sums.size(); ++j) put(param, int64_t(j), static_cast<float>(sums[j]), accumulate);
}

// ---- loss --------------------------------------------------------------------------

namespace {

template <bool Gradient>
double cross_entropy(const ConstView& logits, const int32_t* labels, int32_t ignore, double scale, float* dlogits,
                     LossCounts* counts) {
  if (logits.rank() != 2 && logits.rank() != 4)
    throw std::logic_error("softmax_cross_entropy: logits must be [n, classes] or [n, classes, H, W]");
  const int64_t n = logits.shape[0], classes = logits.shape[1];
  const int64_t h = logits.rank() == 4 ? logits.shape[2] : 1, w = logits.rank() == 4 ? logits.shape[3] : 1;
  const std::vector<int64_t> st = logits.strides();
  const int64_t sc = st[1], sh = logits.rank() == 4 ? st[2] : 0, sw = logits.rank() == 4 ? st[3] : 0;
  std::vector<double> e(static_cast<size_t>(classes));
  double total = 0.0;
  LossCounts local;
  if (counts && !counts->per_class.empty()) local.per_class.assign(static_cast<size_t>(3 * classes), 0);
  for (int64_t s = 0; s < n; ++s)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) {
        const int64_t at = s * st[0] + i * sh + j * sw;
        const int32_t label = labels[(s * h + i) * w + j];
        const float* z = logits.data + at;
        if (label == ignore) {
          if (Gradient)
            for (int64_t c = 0; c < classes; ++c) dlogits[at + c * sc] = 0.0f;
          continue;
        }
        int64_t arg = 0;
        for (int64_t c = 1; c < classes; ++c)
          if (z[c * sc] > z[arg * sc]) arg = c;
        const double top = z[arg * sc];
        double sum = 0.0;
        for (int64_t c = 0; c < classes; ++c) sum += (e[size_t(c)] = std::exp(double(z[c * sc]) - top));
        total += top + std::log(sum) - double(z[label * sc]);
        local.correct += arg == label ? 1 : 0;
        ++local.labelled;
        if (!local.per_class.empty()) {
          local.per_class[size_t(arg)] += arg == label ? 1 : 0;
          ++local.per_class[size_t(classes + arg)];
          ++local.per_class[size_t(2 * classes + label)];
        }
        if (Gradient)
          for (int64_t c = 0; c < classes; ++c)
            dlogits[at + c * sc] = float((e[size_t(c)] / sum - (c == label ? 1.0 : 0.0)) * scale);
      }
  if (counts) *counts = std::move(local);
  return total;
}

}  // namespace

double softmax_cross_entropy(const ConstView& logits, const int32_t* labels, int32_t ignore, double scale,
                             float* dlogits, LossCounts* counts) {
  return cross_entropy<true>(logits, labels, ignore, scale, dlogits, counts);
}

double softmax_cross_entropy_loss(const ConstView& logits, const int32_t* labels, int32_t ignore, LossCounts* counts) {
  return cross_entropy<false>(logits, labels, ignore, 0.0, nullptr, counts);
}

// ---- reduction and optimizer -------------------------------------------------------

void tree_sum(float* const* slots, int64_t count, int64_t begin, int64_t end) {
  for (int64_t stride = 1; stride < count; stride *= 2)
    for (int64_t i = 0; i + stride < count; i += 2 * stride) {
      float* to = slots[i];
      const float* from = slots[i + stride];
      for (int64_t e = begin; e < end; ++e) to[e] += from[e];
    }
}

void sgd_update(float* w, float* v, const float* g, int64_t begin, int64_t end, float lr, float momentum,
                float weight_decay, bool first_step) {
  for (int64_t e = begin; e < end; ++e) {
    const float d = weight_decay != 0.0f ? g[e] + weight_decay * w[e] : g[e];
    v[e] = first_step ? d : momentum * v[e] + d;
    w[e] = w[e] - lr * v[e];
  }
}

}  // namespace convgen::ops
