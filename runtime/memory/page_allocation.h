// Where runtime buffers live: large ones on 2 MiB transparent huge pages.
//
// Kernels stream activations of tens of MB with little reuse (a 1x1 convolution reads
// each input pixel once per call). On 4 KiB pages such a stream misses the TLB every
// 4 KiB, and on a virtual machine every miss is a two-level (guest and host) page walk.
// Measured on an Intel Xeon VM (AVX-512, KVM), ResNet-50's 1x1 256->64 at 56x56, mb 8,
// forward: 84 -> 109 GF/s with its buffers on huge pages (oneDNN on the same buffers
// 109 -> 118); 1x1 512->128 at 28x28: 129 -> 150.
//
// Buffers of at least kHugePageBytes are mapped directly (mmap) at a 2 MiB boundary and
// advised MADV_HUGEPAGE, so the kernel backs every whole 2 MiB of them with one page even
// when transparent huge pages are in `madvise` mode (Debian's default). Smaller buffers
// come from operator new, aligned to the requested alignment. CONVGEN_HUGE_PAGES=0 in the
// environment turns the mapping off (every buffer from operator new); AddressSanitizer
// builds never map, so their buffers keep redzones.
#pragma once

#include <cstddef>
#include <string>

namespace convgen {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// A mapped buffer stays readable this far beyond either end: a margin for a kernel that
// loads a vector past an input's end or before its start and discards those lanes.
// malloc's blocks always had room for that, an exact mapping faults. The sweeps hold the
// generated kernels to reading inside their inputs (tests/common/guarded_input.h); the
// page stays for shapes they do not reach.
inline constexpr std::size_t kMappedSlackBytes = 4096;

// At least `bytes` bytes aligned to `alignment` (a power of two, at most 4 KiB). Throws
// std::bad_alloc when out of memory. Thread-safe.
void* allocate_buffer(std::size_t bytes, std::size_t alignment);

// Frees a buffer from allocate_buffer; `bytes` and `alignment` as it was asked. nullptr
// is ignored.
void release_buffer(void* p, std::size_t bytes, std::size_t alignment) noexcept;

// Whether this process maps large buffers on huge pages (decided once, at first use):
// the environment allows it, the build is not AddressSanitizer's and the kernel offers
// transparent huge pages (/sys/kernel/mm/transparent_hugepage/enabled not `never`).
bool maps_huge_pages();

// One line for reports: what the process does and why, e.g. "2 MiB transparent huge
// pages (kernel mode madvise) for buffers of 2 MiB and more".
std::string huge_page_policy();

// The decision maps_huge_pages() takes, from its inputs: the value of CONVGEN_HUGE_PAGES
// (nullptr when unset) and the contents of the kernel's THP `enabled` file (empty when it
// cannot be read). Exposed for tests.
bool huge_pages_allowed(const char* env_value, const std::string& thp_enabled_file);

}  // namespace convgen
