// The activations fused into BatchNormalization give the bits of the two separate nodes:
// BN's kernels with Fused::Relu / Fused::Clip against Fused::None followed by ops::unary,
// and in backward against ops::unary_backward's mask applied to dy first.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/batch_norm_kernels.h"
#include "runtime/train/train_ops.h"

namespace convgen {
namespace {

using model::bn::Fused;
using model::bn::FusedActivation;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

struct Case {
  // Channels not a multiple of any vector width; pixels a few rows.
  static constexpr int64_t pixels = 13, channels = 19;
  std::vector<float> x, dy, alpha, beta, invstd;
  std::vector<double> mean, a, m1, m2;
  float lo = 0.0f, hi = 6.0f;

  explicit Case(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-8.0f, 8.0f), pos(0.5f, 2.0f);
    const size_t n = size_t(pixels * channels), c = size_t(channels);
    x.resize(n), dy.resize(n);
    for (float& v : x) v = u(rng);
    for (float& v : dy) v = u(rng);
    alpha.resize(c), beta.resize(c), invstd.resize(c), mean.resize(c), a.resize(c), m1.resize(c), m2.resize(c);
    for (size_t k = 0; k < c; ++k) {
      alpha[k] = pos(rng), beta[k] = u(rng), invstd[k] = pos(rng);
      mean[k] = double(u(rng)), a[k] = double(pos(rng)), m1[k] = double(u(rng)) / 8, m2[k] = double(u(rng)) / 8;
    }
    // Values landing exactly on the bounds (the Clip's backward passes them): channel 0 is
    // y = x, so x = lo and x = hi give y = lo and y = hi.
    alpha[0] = 1.0f, beta[0] = 0.0f;
    x[0] = lo, x[size_t(channels)] = hi, x[2 * size_t(channels)] = -0.0f;
  }
  ConstView view(const std::vector<float>& v) const { return {v.data(), {1, channels, 1, pixels}, false}; }
  View view(std::vector<float>& v) const { return {v.data(), {1, channels, 1, pixels}, false}; }
};

// The separate nodes: BN's plain output, then the activation (forward); dy masked by the
// activation's backward, then BN's plain backward.
void check_fused(Fused kind, ops::Unary unary, uint32_t seed) {
  Case k(seed);
  const size_t n = k.x.size();
  std::vector<float> z(n), separate(n), fused(n);
  FusedActivation none;
  model::bn::scale_shift(k.x.data(), k.pixels, k.channels, k.alpha.data(), k.beta.data(), none, z.data());
  ops::unary(k.view(z), k.view(separate), unary, 0.0f, k.lo, k.hi);
  FusedActivation act;
  act.kind = kind, act.lo = k.lo, act.hi = k.hi;
  model::bn::scale_shift(k.x.data(), k.pixels, k.channels, k.alpha.data(), k.beta.data(), act, fused.data());
  CHECK(same_bits(separate, fused));

  std::vector<float> masked_dy(n);
  ops::unary_backward(k.view(z), k.view(separate), k.view(k.dy), k.view(masked_dy), unary, 0.0f, k.lo, k.hi, false);
  act.y = fused.data(), act.alpha = k.alpha.data(), act.beta = k.beta.data();
  const size_t c = size_t(k.channels);
  std::vector<double> s1(c, 0.5), s2(c, -0.25), f1 = s1, f2 = s2;
  model::bn::add_gradient_sums(k.x.data(), masked_dy.data(), none, k.pixels, k.channels, k.mean.data(),
                               k.invstd.data(), s1.data(), s2.data());
  model::bn::add_gradient_sums(k.x.data(), k.dy.data(), act, k.pixels, k.channels, k.mean.data(), k.invstd.data(),
                               f1.data(), f2.data());
  CHECK(same_bits(s1, f1));
  CHECK(same_bits(s2, f2));
  for (bool accumulate : {false, true}) {
    std::vector<float> dx(n, 0.75f), fdx(n, 0.75f);
    model::bn::input_gradient(k.x.data(), masked_dy.data(), none, k.pixels, k.channels, k.mean.data(),
                              k.invstd.data(), k.a.data(), k.m1.data(), k.m2.data(), accumulate, dx.data());
    model::bn::input_gradient(k.x.data(), k.dy.data(), act, k.pixels, k.channels, k.mean.data(), k.invstd.data(),
                              k.a.data(), k.m1.data(), k.m2.data(), accumulate, fdx.data());
    CHECK(same_bits(dx, fdx));
  }
  // The test can fail: the mask matters on this data (some dy are zeroed, some pass).
  size_t zeroed = 0;
  for (size_t i = 0; i < n; ++i) zeroed += masked_dy[i] == 0.0f && k.dy[i] != 0.0f;
  CHECK(zeroed > 0);
  CHECK(zeroed < n);
}

}  // namespace

TEST_CASE("BatchNormalization + Relu in one node: the bits of the two nodes, forward and backward",
          "[trainer][batchnorm]") {
  for (uint32_t seed : {1u, 2u, 3u}) check_fused(Fused::Relu, ops::Unary::Relu, seed);
}

TEST_CASE("BatchNormalization + Clip in one node: the bits of the two nodes, bounds included",
          "[trainer][batchnorm]") {
  for (uint32_t seed : {1u, 2u, 3u}) check_fused(Fused::Clip, ops::Unary::Clip, seed);
}

}  // namespace convgen
