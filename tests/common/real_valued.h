// Real-valued test data and bitwise comparison: for checks that two computations take
// the same order of summation (any difference in rounding shows), where the sweeps'
// integer-valued data would hide it.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace convgen::test {

// n floats uniform in [-1, 1), a fixed function of the seed.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  // (memcmp must not see the null data() of empty vectors)
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace convgen::test
