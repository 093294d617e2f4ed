// Reductions, Slice and Transpose, forward against a plain reference and backward as the
// adjoint of the forward (linear ops: <dy, f(x)> = <f'(dy), x>, in double) or against
// central differences (Max, L2), in both layouts and with the reduced axes kept or removed.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_ops.h"

namespace convgen {
namespace {

const std::vector<int64_t> kShape = {2, 3, 4, 5};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// x's element at a logical NCHW index, whatever its layout.
float at(const ConstView& x, const std::vector<int64_t>& index) {
  const auto s = x.strides();
  int64_t o = 0;
  for (size_t d = 0; d < index.size(); ++d) o += index[d] * s[d];
  return x.data[o];
}

std::vector<int64_t> reduced_shape(const std::vector<int64_t>& axes, bool keep) {
  std::vector<int64_t> out;
  for (size_t d = 0; d < kShape.size(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    if (!reduced) out.push_back(kShape[d]);
    else if (keep) out.push_back(1);
  }
  return out;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

}  // namespace

TEST_CASE("reduce: every op over axis sets, both layouts, kept or removed; backward checked", "[ops][train]") {
  using ops::Reduce;
  const std::vector<std::vector<int64_t>> axis_sets = {{1}, {2, 3}, {3}, {1, 2, 3}};
  for (bool channels_last : {false, true})
    for (const auto& axes : axis_sets)
      for (bool keep : {true, false})
        for (Reduce op : {Reduce::Mean, Reduce::Sum, Reduce::Max, Reduce::L2, Reduce::Min, Reduce::Prod,
                          Reduce::SumSquare, Reduce::L1, Reduce::LogSum, Reduce::LogSumExp}) {
          INFO("channels_last " << channels_last << " axes " << axes.size() << " first " << axes[0] << " keep "
                                << keep << " op " << int(op));
          std::vector<float> xs = random_values(120, 1), ys(120), dys, dxs(120, 0.0f);
          if (op == Reduce::LogSum)
            for (float& v : xs) v = std::fabs(v) + 0.1f;  // a positive sum
          const ConstView x{xs.data(), kShape, channels_last};
          const std::vector<int64_t> yshape = reduced_shape(axes, keep);
          const View y{ys.data(), yshape, false};
          ops::reduce(x, axes, op, y);
          // Forward: the plain definition at every output element.
          const int64_t ny = y.elements();
          ys.resize(size_t(ny));
          for (int64_t o = 0; o < ny; ++o) {
            // Output index -> the kept coordinates.
            std::vector<int64_t> fixed(kShape.size(), -1);
            int64_t rest = o;
            for (size_t d = kShape.size(); d-- > 0;) {
              const bool reduced = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
              if (reduced) continue;
              fixed[d] = rest % kShape[d];
              rest /= kShape[d];
            }
            double sum = 0.0, sq = 0.0, count = 0.0, prod = 1.0, l1 = 0.0, sum_exp = 0.0;
            float max = -INFINITY, min = INFINITY;
            for (int64_t n = 0; n < 2; ++n) for (int64_t c = 0; c < 3; ++c) for (int64_t h = 0; h < 4; ++h)
              for (int64_t w = 0; w < 5; ++w) {
                const std::vector<int64_t> i = {n, c, h, w};
                bool inside = true;
                for (size_t d = 0; d < 4; ++d) inside = inside && (fixed[d] < 0 || fixed[d] == i[d]);
                if (!inside) continue;
                const float v = at(x, i);
                sum += v, sq += double(v) * v, count += 1.0, max = std::max(max, v), min = std::min(min, v);
                prod *= v, l1 += std::fabs(v), sum_exp += std::exp(double(v));
              }
            double want = 0.0;
            switch (op) {
              case Reduce::Mean: want = sum / count; break;
              case Reduce::Sum: want = sum; break;
              case Reduce::Max: want = max; break;
              case Reduce::Min: want = min; break;
              case Reduce::L2: want = std::sqrt(sq); break;
              case Reduce::Prod: want = prod; break;
              case Reduce::SumSquare: want = sq; break;
              case Reduce::L1: want = l1; break;
              case Reduce::LogSum: want = std::log(sum); break;
              case Reduce::LogSumExp: want = std::log(sum_exp); break;
            }
            CHECK(ys[size_t(o)] == Approx(want).epsilon(1e-6));
          }
          // Backward: adjoint for the linear ops, central differences for the others.
          if (op == Reduce::Prod) continue;  // inference only
          dys = random_values(size_t(ny), 2);
          ops::reduce_backward(x, ConstView{ys.data(), yshape, false}, ConstView{dys.data(), yshape, false}, axes, op,
                               View{dxs.data(), kShape, channels_last}, false);
          auto loss = [&](const std::vector<float>& at_x) {
            std::vector<float> out(static_cast<size_t>(ny));
            ops::reduce(ConstView{at_x.data(), kShape, channels_last}, axes, op, View{out.data(), yshape, false});
            return dot(dys, out);
          };
          if (op == Reduce::Mean || op == Reduce::Sum) {
            CHECK(dot(dxs, xs) == Approx(loss(xs)).epsilon(1e-5));
            continue;
          }
          // A step small enough not to swap Max's or Min's extreme with a neighbour, large
          // enough elsewhere that float32 rounding of a loss of ~100 stays below 1e-3.
          const float h = op == Reduce::Max || op == Reduce::Min ? 1e-3f : 1e-2f;
          for (size_t e = 0; e < xs.size(); e += 7) {
            if (op == Reduce::L1 && std::fabs(xs[e]) < 2.0f * h) continue;  // the kink at 0
            std::vector<float> up = xs, down = xs;
            up[e] += h, down[e] -= h;
            CHECK(dxs[e] == Approx((loss(up) - loss(down)) / double(up[e] - down[e])).margin(2e-3));
          }
        }
}

TEST_CASE("slice and transpose: backward is the forward's adjoint, both layouts", "[ops][train]") {
  for (bool channels_last : {false, true}) {
    const std::vector<float> xs = random_values(120, 3);
    const ConstView x{xs.data(), kShape, channels_last};
    // Channels 1..2, rows 3, 1 (backwards by 2), columns 0, 3.
    const std::vector<int64_t> first = {0, 1, 3, 0}, step = {1, 1, -2, 3}, yshape = {2, 2, 2, 2};
    std::vector<float> ys(16), dys = random_values(16, 4), dxs(120, 7.0f);
    ops::slice(x, first, step, View{ys.data(), yshape, false});
    CHECK(ys[0] == at(x, {0, 1, 3, 0}));
    CHECK(ys[3] == at(x, {0, 1, 1, 3}));
    CHECK(ys[15] == at(x, {1, 2, 1, 3}));
    ops::slice_backward(ConstView{dys.data(), yshape, false}, first, step, View{dxs.data(), kShape, channels_last},
                        false);
    CHECK(dot(dxs, xs) == Approx(dot(dys, ys)).epsilon(1e-6));
    int64_t nonzero = 0;
    for (float v : dxs) nonzero += v != 0.0f;
    CHECK(nonzero == 16);  // zeros outside the window, not the 7s it held

    const std::vector<int64_t> perm = {0, 2, 3, 1}, tshape = {2, 4, 5, 3};
    std::vector<float> ts(120), dts = random_values(120, 5), dxt(120, 0.0f);
    ops::transpose(x, perm, View{ts.data(), tshape, false});
    CHECK(ts[1] == at(x, {0, 1, 0, 0}));
    ops::transpose_backward(ConstView{dts.data(), tshape, false}, perm, View{dxt.data(), kShape, channels_last}, false);
    CHECK(dot(dxt, xs) == Approx(dot(dts, ts)).epsilon(1e-6));
  }
}

}  // namespace convgen
