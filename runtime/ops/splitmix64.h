// splitmix64's output function: the counter-based generator behind the synthetic data
// set, the epoch shuffles (runtime/data/train_data.h) and dropout masks (runtime/train/train_ops.h).
// scripts/torch-train-reference reimplements it.
#pragma once

#include <cstdint>

namespace convgen {

inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace convgen
