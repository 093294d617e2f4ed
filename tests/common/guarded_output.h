// An output buffer for kernel tests: guard zones on both sides, every float starting as
// a sentinel NaN no kernel computes, so an element left unwritten fails its comparison
// and a write out of bounds is counted.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace convgen::test {

class GuardedOutput {
 public:
  static constexpr size_t kGuard = 64;                // floats on each side
  static constexpr uint32_t kSentinelBits = 0x7fc0dead;

  static constexpr size_t kLineFloats = 16;            // 64 bytes

  // `misalign` (< 16) floats past a 64-byte boundary: 0 is aligned for every vector store.
  explicit GuardedOutput(size_t size, size_t misalign = 0) : size_(size) {
    float sentinel;
    std::memcpy(&sentinel, &kSentinelBits, sizeof sentinel);
    storage_.assign(size + 2 * kGuard + 2 * kLineFloats, sentinel);
    const auto first = reinterpret_cast<uintptr_t>(storage_.data() + kGuard);
    start_ = kGuard + (64 - first % 64) % 64 / sizeof(float) + misalign % kLineFloats;
  }
  float* data() { return storage_.data() + start_; }
  size_t size() const { return size_; }
  float operator[](size_t i) const { return storage_[start_ + i]; }
  std::vector<float> values() const {
    return std::vector<float>(storage_.begin() + long(start_), storage_.begin() + long(start_ + size_));
  }
  // Guard floats (kGuard on each side of the output) no longer holding the sentinel.
  size_t damaged_guards() const {
    size_t damaged = 0;
    for (size_t i = 0; i < kGuard; ++i)
      damaged += !is_sentinel(storage_[start_ - kGuard + i]) + !is_sentinel(storage_[start_ + size_ + i]);
    return damaged;
  }
  // Elements of the output itself that were written.
  size_t written() const {
    size_t n = 0;
    for (size_t i = 0; i < size_; ++i) n += !is_sentinel((*this)[i]);
    return n;
  }

  static bool is_sentinel(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof bits);
    return bits == kSentinelBits;
  }

 private:
  size_t size_;
  size_t start_ = kGuard;
  std::vector<float> storage_;
};

}  // namespace convgen::test
