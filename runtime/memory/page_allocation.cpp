#include "runtime/memory/page_allocation.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>

namespace convgen {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

constexpr std::size_t kSmallPage = 4096;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

std::string read_thp_enabled() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::stringstream text;
  text << f.rdbuf();
  return f ? text.str() : std::string();
}

// The mode the kernel file marks with brackets ("always [madvise] never" -> "madvise").
std::string selected_mode(const std::string& file) {
  const size_t open = file.find('['), close = file.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return std::string();
  return file.substr(open + 1, close - open - 1);
}

bool turned_off(const char* env_value) { return env_value != nullptr && std::strcmp(env_value, "0") == 0; }

// Decided once, at first use, with the reason reports give.
struct Policy {
  bool maps = false;
  std::string description;
};

const Policy& policy() {
  static const Policy p = [] {
    const char* env = std::getenv("CONVGEN_HUGE_PAGES");
    const std::string thp_file = read_thp_enabled(), mode = selected_mode(thp_file);
    Policy out;
    out.maps = !kAddressSanitizer && huge_pages_allowed(env, thp_file);
    if (out.maps)
      out.description = "2 MiB transparent huge pages (kernel mode " + mode + ") for buffers of 2 MiB and more";
    else if (kAddressSanitizer)
      out.description = "small pages (AddressSanitizer build)";
    else if (turned_off(env))
      out.description = "small pages (CONVGEN_HUGE_PAGES=0)";
    else
      out.description =
          "small pages (transparent huge pages " + (mode.empty() ? std::string("unavailable") : "mode " + mode) + ")";
    return out;
  }();
  return p;
}

bool mapped(std::size_t bytes) { return bytes >= kHugePageBytes && policy().maps; }

// Whole small pages at a huge-page boundary, with one readable small page on either
// side as a margin against reads just outside a buffer (kMappedSlackBytes in the
// header). Map a huge page more than asked, then give back the rest.
void* map_huge(std::size_t bytes) {
  const std::size_t size = round_up(bytes, kSmallPage);
  const std::size_t span = kMappedSlackBytes + size + kMappedSlackBytes + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = round_up(start + kMappedSlackBytes, kHugePageBytes);
  const std::uintptr_t keep_begin = aligned - kMappedSlackBytes, keep_end = aligned + size + kMappedSlackBytes;
  if (keep_begin > start) munmap(raw, keep_begin - start);
  const std::uintptr_t end = start + span;
  if (end > keep_end) munmap(reinterpret_cast<void*>(keep_end), end - keep_end);
  // Advice only: without it the buffer still works, on small pages.
  madvise(reinterpret_cast<void*>(aligned), size, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

bool huge_pages_allowed(const char* env_value, const std::string& thp_enabled_file) {
  if (turned_off(env_value)) return false;
  const std::string mode = selected_mode(thp_enabled_file);
  return mode == "always" || mode == "madvise";
}

bool maps_huge_pages() { return policy().maps; }

std::string huge_page_policy() { return policy().description; }

void* allocate_buffer(std::size_t bytes, std::size_t alignment) {
  if (mapped(bytes)) return map_huge(bytes);
  return ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(alignment));
}

void release_buffer(void* p, std::size_t bytes, std::size_t alignment) noexcept {
  if (p == nullptr) return;
  if (mapped(bytes)) {
    munmap(static_cast<char*>(p) - kMappedSlackBytes, round_up(bytes, kSmallPage) + 2 * kMappedSlackBytes);
    return;
  }
  ::operator delete(p, std::align_val_t(alignment));
}

}  // namespace convgen
