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

  explicit GuardedOutput(size_t size) : size_(size) {
    float sentinel;
    std::memcpy(&sentinel, &kSentinelBits, sizeof sentinel);
    storage_.assign(size + 2 * kGuard, sentinel);
  }
  float* data() { return storage_.data() + kGuard; }
  size_t size() const { return size_; }
  float operator[](size_t i) const { return storage_[kGuard + i]; }
  std::vector<float> values() const {
    return std::vector<float>(storage_.begin() + kGuard, storage_.begin() + kGuard + size_);
  }
  // Guard floats no longer holding the sentinel.
  size_t damaged_guards() const {
    size_t damaged = 0;
    for (size_t i = 0; i < kGuard; ++i) damaged += !is_sentinel(storage_[i]) + !is_sentinel(storage_[kGuard + size_ + i]);
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
  std::vector<float> storage_;
};

}  // namespace convgen::test
