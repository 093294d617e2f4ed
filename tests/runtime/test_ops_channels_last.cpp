// The channels-last fast paths of the element-wise and pooling operators give the bits of
// their general paths (dense layout), on 1 and 2 threads: squeeze-excitation's
// per-channel scale (binary with a [N or 1, C, 1, 1] operand, either side) and global
// pooling. Channel counts straddle the pooling's 64-channel blocks.
#include <catch2/catch.hpp>

#include <omp.h>

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
      const std::vector<float> x = normals(size_t(shape[0] * shape[1] * shape[2] * shape[3]), 3);
      const std::vector<float> x_cl = converted(x, shape, true);
      const std::vector<int64_t> y_shape = {shape[0], shape[1], 1, 1};
      for (bool max : {false, true}) {
        INFO("threads " << threads << " C " << shape[1] << " max " << max);
        std::vector<float> dense(size_t(shape[0] * shape[1])), fast(dense.size(), -1.0f);
        ops::global_pool(ConstView{x.data(), shape, false}, max, View{dense.data(), y_shape, false});
        ops::global_pool(ConstView{x_cl.data(), shape, true}, max, View{fast.data(), y_shape, true});
        CHECK(fast == dense);
      }
    }
  }
  omp_set_num_threads(1);
}
