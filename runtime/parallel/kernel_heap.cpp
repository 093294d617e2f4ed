#include "runtime/parallel/kernel_heap.h"

#include <cstdint>
#include <deque>
#include <mutex>
#include <new>

#include "runtime/memory/page_allocation.h"

namespace convgen {

namespace {

// Each block starts with a header of one alignment unit holding its size; the caller
// gets the bytes after it.
struct Header {
  std::size_t bytes;  // payload capacity
};
static_assert(sizeof(Header) <= kKernelHeapAlignment, "header does not fit");

struct Cache {
  std::mutex mutex;
  std::deque<Header*> blocks;  // oldest first
  std::size_t bytes = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: kernels may run during static destruction
  return *c;
}

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void* payload(Header* h) { return reinterpret_cast<char*>(h) + kKernelHeapAlignment; }

void free_block(Header* h) { release_buffer(h, h->bytes + kKernelHeapAlignment, kKernelHeapAlignment); }

}  // namespace

void* kernel_heap_allocate(std::size_t bytes) {
  // Large blocks in whole pages, so sizes that differ by a few bytes share blocks.
  const std::size_t capacity = bytes <= kKernelHeapSmallBlock ? round_up(bytes, kKernelHeapAlignment)
                                                               : round_up(bytes, 4096);
  if (capacity > kKernelHeapSmallBlock) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mutex);
    for (auto it = c.blocks.rbegin(); it != c.blocks.rend(); ++it) {  // most recent first: warmest
      if ((*it)->bytes != capacity) continue;
      Header* h = *it;
      c.blocks.erase(std::next(it).base());
      c.bytes -= capacity;
      return payload(h);
    }
  }
  void* raw = nullptr;
  try {
    raw = allocate_buffer(capacity + kKernelHeapAlignment, kKernelHeapAlignment);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  auto* h = static_cast<Header*>(raw);
  h->bytes = capacity;
  return payload(h);
}

void kernel_heap_release(void* block) {
  if (!block) return;
  auto* h = reinterpret_cast<Header*>(static_cast<char*>(block) - kKernelHeapAlignment);
  if (h->bytes <= kKernelHeapSmallBlock || h->bytes > kKernelHeapCacheBytes) {
    free_block(h);
    return;
  }
  Cache& c = cache();
  std::deque<Header*> dropped;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.blocks.push_back(h);
    c.bytes += h->bytes;
    while (c.bytes > kKernelHeapCacheBytes) {
      dropped.push_back(c.blocks.front());
      c.bytes -= c.blocks.front()->bytes;
      c.blocks.pop_front();
    }
  }
  for (Header* d : dropped) free_block(d);
}

}  // namespace convgen
