// The kernel heap: a kernel's per-call workspace comes back from the blocks earlier
// calls freed (no mmap/munmap per call), aligned, and the cache stays bounded.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/parallel/kernel_heap.h"

using namespace convgen;

namespace {

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kKernelHeapAlignment == 0; }

}  // namespace

TEST_CASE("kernel heap: a freed large block serves the next call of the same size", "[heap]") {
  const size_t bytes = 3 * 1024 * 1024 + 17;
  void* first = kernel_heap_allocate(bytes);
  REQUIRE(first != nullptr);
  CHECK(aligned(first));
  std::memset(first, 1, bytes);  // the whole block is usable
  kernel_heap_release(first);
  void* second = kernel_heap_allocate(bytes);
  CHECK(second == first);
  // A size that rounds to the same pages shares the block too; a different one does not.
  kernel_heap_release(second);
  void* same_pages = kernel_heap_allocate(bytes + 100);
  CHECK(same_pages == first);
  void* other = kernel_heap_allocate(bytes + 8192);
  CHECK(other != first);
  kernel_heap_release(same_pages);
  kernel_heap_release(other);
  kernel_heap_release(nullptr);  // ignored
}

TEST_CASE("kernel heap: small blocks are aligned and go back to malloc", "[heap]") {
  std::vector<void*> blocks;
  for (size_t bytes : {size_t(1), size_t(64), size_t(1000), kKernelHeapSmallBlock}) {
    void* p = kernel_heap_allocate(bytes);
    REQUIRE(p != nullptr);
    CHECK(aligned(p));
    std::memset(p, 2, bytes);
    blocks.push_back(p);
  }
  for (void* p : blocks) kernel_heap_release(p);
}

TEST_CASE("kernel heap: the cache drops its oldest blocks beyond its bound", "[heap]") {
  // Fill the cache past its bound with blocks of one size; the first released is gone
  // (its address may be reused by the system, so only the newest is checked to stay).
  const size_t bytes = 24 * 1024 * 1024;
  const int count = int(kKernelHeapCacheBytes / bytes) + 2;
  std::vector<void*> blocks;
  for (int i = 0; i < count; ++i) blocks.push_back(kernel_heap_allocate(bytes));
  for (void* p : blocks) kernel_heap_release(p);
  // Most recent first: the next allocation of that size is the last block released.
  void* again = kernel_heap_allocate(bytes);
  CHECK(again == blocks.back());
  kernel_heap_release(again);
  // A block beyond the whole cache's size is never kept.
  void* huge = kernel_heap_allocate(kKernelHeapCacheBytes + 4096);
  REQUIRE(huge != nullptr);
  kernel_heap_release(huge);
}
