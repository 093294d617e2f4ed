// The kernels' heap: the workspace a Halide kernel allocates per call (packed panels,
// padded slabs, staged classes) comes back from a cache of the blocks earlier calls
// freed, instead of from malloc. Blocks of a few hundred KiB and more are mmap'd and
// unmapped by glibc on every call, so each call pays a page fault per 4 KiB touched;
// on a virtual machine whose faults cost ~17 us, a depthwise backward-data kernel that
// stages 10 MB per call ran at 0.1 GF/s instead of 5 (AMD EPYC Zen 5 VM). Kernels ask
// the same sizes call after call, so blocks are reused by exact size.
#pragma once

#include <cstddef>

namespace convgen {

// A block of at least `bytes`, aligned to kKernelHeapAlignment; nullptr when out of
// memory. Thread-safe.
void* kernel_heap_allocate(std::size_t bytes);
// Returns a block from kernel_heap_allocate to the cache (or to the system when the
// cache is full). nullptr is ignored.
void kernel_heap_release(void* block);

// Halide's runtime asks 64 bytes; 128 covers two cache lines (adjacent-line prefetch).
constexpr std::size_t kKernelHeapAlignment = 128;
// Blocks at most this size bypass the cache (malloc serves them from its arenas).
constexpr std::size_t kKernelHeapSmallBlock = 64 * 1024;
// The cache keeps at most this many bytes of freed blocks, oldest dropped first: enough
// for a layer's workspace to be reused call after call (micro-batches, steps), bounded
// so that the memory a run holds grows by at most this much.
constexpr std::size_t kKernelHeapCacheBytes = 64u * 1024 * 1024;

}  // namespace convgen
