// Float storage aligned to a cache line. The generated kernels load and store whole
// vectors along channels; from a plain std::vector (whose large blocks start 16 bytes
// into a page) every AVX-512 access straddles two cache lines. Measured on AMD Zen 5,
// MobileNet's 3x3 depthwise stride 2 on 56x56x96 (mb 8): 62 GF/s aligned, 38 GF/s at a
// 16-byte offset. Buffers of 2 MiB and more lie on transparent huge pages
// (runtime/memory/page_allocation.h says why).
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/memory/page_allocation.h"

namespace convgen {

inline constexpr std::size_t kCacheLineBytes = 64;

template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_buffer(n * sizeof(T), kCacheLineBytes)); }
  void deallocate(T* p, std::size_t n) noexcept { release_buffer(p, n * sizeof(T), kCacheLineBytes); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const CacheLineAllocator<U>&) const noexcept { return false; }
};

// What tensors, activations and gradients are stored in.
using FloatBuffer = std::vector<float, CacheLineAllocator<float>>;

}  // namespace convgen
