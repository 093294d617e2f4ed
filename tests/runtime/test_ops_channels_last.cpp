// The channels-last fast paths of the element-wise and pooling operators give the bits of
// their general paths (dense layout), on 1 and 2 threads: squeeze-excitation's
// per-channel scale (binary with a [N or 1, C, 1, 1] operand, either side) and global
// pooling, and 2-D max and average pooling. Channel counts straddle the pooling's
// 64-channel blocks and 16-channel vectors.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"

using namespace convgen;

namespace {

std::vector<float> normals(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// x's values in the other layout.
std::vector<float> converted(const std::vector<float>& x, const std::vector<int64_t>& shape, bool to_channels_last) {
  std::vector<float> out(x.size());
  copy_layout(ConstView{x.data(), shape, !to_channels_last}, View{out.data(), shape, to_channels_last});
  return out;
}

}  // namespace

TEST_CASE("ops: a per-channel operand times a channels-last tensor gives the dense path's bits", "[ops]") {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 70, 9, 11}, {1, 24, 112, 112}, {3, 5, 4, 1}}) {
      const int64_t N = shape[0], C = shape[1], total = N * C * shape[2] * shape[3];
      const std::vector<float> x = normals(size_t(total), 1);
      for (bool per_image : {true, false})
        for (bool scale_first : {false, true})
          for (ops::Binary op : {ops::Binary::Mul, ops::Binary::Add, ops::Binary::Sub, ops::Binary::Div}) {
            INFO("threads " << threads << " C " << C << " per_image " << per_image << " scale_first " << scale_first);
            const std::vector<int64_t> s_shape = per_image ? std::vector<int64_t>{N, C, 1, 1} : std::vector<int64_t>{C, 1, 1};
            const std::vector<float> s = normals(size_t(per_image ? N * C : C), 2);
            std::vector<float> dense(x.size()), fast(x.size());
            const ConstView s_view{s.data(), s_shape, false};
            const ConstView x_dense{x.data(), shape, false};
            const std::vector<float> x_cl = converted(x, shape, true);
            const ConstView x_fast{x_cl.data(), shape, true};
            const View y_dense{dense.data(), shape, false}, y_fast{fast.data(), shape, true};
            if (scale_first) {
              ops::binary(s_view, x_dense, y_dense, op);
              ops::binary(s_view, x_fast, y_fast, op);
            } else {
              ops::binary(x_dense, s_view, y_dense, op);
              ops::binary(x_fast, s_view, y_fast, op);
            }
            CHECK(converted(fast, shape, false) == dense);
          }
    }
  }
  omp_set_num_threads(1);
}

TEST_CASE("ops: global pooling of a channels-last tensor gives the dense path's bits", "[ops]") {
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 130, 7, 7}, {1, 64, 56, 56}, {1, 3, 5, 2}}) {
      std::vector<float> x = normals(size_t(shape[0] * shape[1] * shape[2] * shape[3]), 3);
      // A NaN never wins the maximum: last of its channel, it would show if it replaced it.
      x[size_t(shape[2] * shape[3] - 1)] = std::numeric_limits<float>::quiet_NaN();
      x[x.size() / 2] = std::numeric_limits<float>::infinity();
      const std::vector<float> x_cl = converted(x, shape, true);
      const std::vector<int64_t> y_shape = {shape[0], shape[1], 1, 1};
      for (bool max : {false, true}) {
        INFO("threads " << threads << " C " << shape[1] << " max " << max);
        std::vector<float> dense(size_t(shape[0] * shape[1])), fast(dense.size(), -1.0f);
        ops::global_pool(ConstView{x.data(), shape, false}, max, View{dense.data(), y_shape, false});
        ops::global_pool(ConstView{x_cl.data(), shape, true}, max, View{fast.data(), y_shape, true});
        CHECK(std::memcmp(fast.data(), dense.data(), dense.size() * sizeof(float)) == 0);
      }
    }
  }
  omp_set_num_threads(1);
}

TEST_CASE("ops: 2-D max and average pooling of a channels-last tensor give the dense path's bits", "[ops]") {
  struct Case {
    std::vector<int64_t> shape;
    ops::Window window;
  };
  const std::vector<Case> cases = {
      {{1, 83, 15, 13}, {{3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}},   // 64 + 16 + 3 channels, padded
      {{2, 130, 9, 8}, {{2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}},    // two blocks and 2 left
      {{1, 5, 11, 11}, {{3, 2}, {1, 2}, {2, 1}, {2, 0}, {2, 1}}},    // dilated, asymmetric
      {{1, 64, 111, 111}, {{3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}}  // SqueezeNet's first
  };
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const Case& c : cases) {
      const auto& w = c.window;
      std::vector<int64_t> y_shape = c.shape;
      for (int d = 0; d < 2; ++d) {
        const int64_t span = w.dilations[d] * (w.kernel[d] - 1) + 1;
        y_shape[2 + d] = (c.shape[2 + d] + w.pads_begin[d] + w.pads_end[d] - span) / w.strides[d] + 1;
      }
      std::vector<float> x = normals(size_t(c.shape[0] * c.shape[1] * c.shape[2] * c.shape[3]), 4);
      // A NaN and infinities: the maximum keeps std::max's order (a NaN never wins).
      x[7] = std::numeric_limits<float>::quiet_NaN();
      x[x.size() / 2] = std::numeric_limits<float>::infinity();
      x[x.size() / 3] = -std::numeric_limits<float>::infinity();
      const std::vector<float> x_cl = converted(x, c.shape, true);
      const size_t n = size_t(y_shape[0] * y_shape[1] * y_shape[2] * y_shape[3]);
      for (bool max : {true, false}) {
        INFO("threads " << threads << " C " << c.shape[1] << " max " << max);
        std::vector<float> dense(n), fast(n, -1.0f);
        const ConstView xd{x.data(), c.shape, false}, xf{x_cl.data(), c.shape, true};
        const View yd{dense.data(), y_shape, false}, yf{fast.data(), y_shape, true};
        if (max) {
          ops::max_pool(xd, w, yd);
          ops::max_pool(xf, w, yf);
        } else {
          ops::average_pool(xd, w, false, yd);
          ops::average_pool(xf, w, false, yf);
        }
        const std::vector<float> back = converted(fast, y_shape, false);
        CHECK(std::memcmp(back.data(), dense.data(), n * sizeof(float)) == 0);
      }
    }
  }
  omp_set_num_threads(1);
}
