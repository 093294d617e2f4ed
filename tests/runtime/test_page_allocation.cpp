// Where buffers live: large ones mapped at a 2 MiB boundary and advised onto huge pages
// (when the kernel offers them and CONVGEN_HUGE_PAGES is not 0), small ones aligned from
// operator new; both usable end to end and freed with the size they were asked.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/memory/aligned_buffer.h"
#include "runtime/memory/page_allocation.h"

using namespace convgen;

namespace {

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// The VmFlags line of the mapping that holds `p` in /proc/self/smaps ("" if none).
std::string vm_flags_of(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = address(p) >= lo && address(p) < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

}  // namespace

TEST_CASE("huge pages: the policy follows the environment and the kernel's THP mode", "[memory]") {
  CHECK(huge_pages_allowed(nullptr, "always [madvise] never\n"));
  CHECK(huge_pages_allowed(nullptr, "[always] madvise never\n"));
  CHECK(huge_pages_allowed("1", "always [madvise] never\n"));
  CHECK_FALSE(huge_pages_allowed(nullptr, "always madvise [never]\n"));
  CHECK_FALSE(huge_pages_allowed(nullptr, ""));  // no THP in this kernel
  CHECK_FALSE(huge_pages_allowed("0", "[always] madvise never\n"));
  CHECK_FALSE(huge_page_policy().empty());
}

TEST_CASE("huge pages: a large buffer is mapped at a huge-page boundary and advised", "[memory]") {
  const size_t bytes = 3 * kHugePageBytes + 12345;
  void* p = allocate_buffer(bytes, 64);
  REQUIRE(p != nullptr);
  CHECK(address(p) % 64 == 0);
  std::memset(p, 0x5a, bytes);  // every byte asked for is usable
  CHECK(static_cast<unsigned char*>(p)[bytes - 1] == 0x5a);
  if (maps_huge_pages()) {
    INFO(huge_page_policy());
    CHECK(address(p) % kHugePageBytes == 0);
    const std::string flags = vm_flags_of(p);
    INFO(flags);
    CHECK(flags.find(" hg") != std::string::npos);  // MADV_HUGEPAGE
    // The slack on either side is readable (a kernel's vector load past an end).
    const volatile unsigned char* bytes_at = static_cast<unsigned char*>(p);
    CHECK(bytes_at[-static_cast<std::ptrdiff_t>(kMappedSlackBytes)] == 0);
    CHECK(bytes_at[(bytes + 4095) / 4096 * 4096 + kMappedSlackBytes - 1] == 0);
  }
  release_buffer(p, bytes, 64);
  if (maps_huge_pages()) CHECK(vm_flags_of(p).find(" hg") == std::string::npos);  // unmapped
}

TEST_CASE("huge pages: a small buffer keeps its alignment and is not mapped", "[memory]") {
  for (size_t alignment : {size_t{64}, size_t{128}, size_t{4096}}) {
    void* p = allocate_buffer(1000, alignment);
    CHECK(address(p) % alignment == 0);
    std::memset(p, 1, 1000);
    release_buffer(p, 1000, alignment);
  }
  void* empty = allocate_buffer(0, 64);
  CHECK(empty != nullptr);
  release_buffer(empty, 0, 64);
  release_buffer(nullptr, kHugePageBytes, 64);  // ignored
}

TEST_CASE("huge pages: FloatBuffers across the threshold keep their values as they grow", "[memory]") {
  const size_t small = kHugePageBytes / sizeof(float) / 2, large = 3 * kHugePageBytes / sizeof(float);
  FloatBuffer v(small, 2.0f);
  CHECK(address(v.data()) % kCacheLineBytes == 0);
  v.resize(large, 3.0f);  // from operator new to a mapping
  CHECK(v[small - 1] == 2.0f);
  CHECK(v[small] == 3.0f);
  CHECK(v[large - 1] == 3.0f);
  if (maps_huge_pages()) CHECK(address(v.data()) % kHugePageBytes == 0);
  FloatBuffer copy = v;
  CHECK(copy == v);
  v.resize(small);
  v.shrink_to_fit();  // back to operator new
  CHECK(v[small - 1] == 2.0f);
}
