// Integer-valued test data: small integers as floats, so every sum of their products is
// exact in any order and two computations must agree bit for bit.
#pragma once

#include <random>
#include <vector>

namespace convgen::test {

// n floats, integers uniform in [lo, hi], a fixed function of the seed.
inline std::vector<float> integer_floats(size_t n, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = static_cast<float>(pick(rng));
  return v;
}

}  // namespace convgen::test
