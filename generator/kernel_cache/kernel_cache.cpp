#include "generator/kernel_cache/kernel_cache.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "generator/kernel_cache/kernel_cache_stats.h"
#include "schedules/build_info.h"
#include "schedules/errors.h"
#include "schedules/sha256.h"

namespace convgen {

namespace fs = std::filesystem;

namespace {

struct Settings {
  std::mutex mutex;
  bool configured = false;  // by the CLI; otherwise the environment decides
  std::optional<fs::path> dir;
  KernelCacheStats stats;
};

Settings& settings() {
  static Settings s;
  return s;
}

bool environment_turns_cache_off() {
  const char* v = std::getenv("CONVGEN_CACHE");
  if (!v) return false;
  const std::string s(v);
  return s == "off" || s == "0" || s == "no";
}

}  // namespace

fs::path default_kernel_cache_dir() {
  if (const char* d = std::getenv("CONVGEN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "convgen";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "convgen";
  return fs::temp_directory_path() / ("convgen-cache-" + std::to_string(::geteuid()));
}

std::optional<fs::path> kernel_cache_dir() {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.configured) return s.dir;
  if (environment_turns_cache_off()) return std::nullopt;
  return default_kernel_cache_dir();
}

void set_kernel_cache_dir(const fs::path& dir) {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.configured = true;
  s.dir = dir;
}

void disable_kernel_cache() {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.configured = true;
  s.dir.reset();
}

std::string kernel_cache_key(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                             const std::string& target) {
  ConvDescriptor unnamed = d;
  unnamed.name.clear();
  return fmt::format("{}|{}|{}|{}|{}", unnamed.normalised(), pass, describe(s), target, CONVGEN_GENERATOR_HASH);
}

std::string kernel_function_name(const std::string& pass, const std::string& key) {
  return fmt::format("convgen_{}_{}", pass, sha256_hex(key).substr(0, 16));
}

fs::path kernel_cache_entry(const fs::path& cache, const std::string& key) {
  return cache / "kernels" /
         sha256_hex(key + "|Halide " + CONVGEN_HALIDE_VERSION + "|" + kKernelCacheFormat).substr(0, 32);
}

namespace {

// Bytes and count of regular files under `dir` whose name ends in `suffix` ("" for all).
std::pair<int64_t, int64_t> files_under(const fs::path& dir, const std::string& suffix) {
  int64_t bytes = 0, count = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code stat_ec;
    if (!it->is_regular_file(stat_ec)) continue;
    const std::string name = it->path().filename().string();
    if (!suffix.empty() && (name.size() < suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0))
      continue;
    const auto size = it->file_size(stat_ec);
    if (!stat_ec) bytes += static_cast<int64_t>(size);
    ++count;
  }
  return {bytes, count};
}

// Removes scratch directories under tmp/ last touched before `age` ago (a killed build's,
// or kept out of the way of builds under way); returns their bytes.
int64_t remove_stale_scratch(const fs::path& cache, std::chrono::hours age) {
  const auto before = fs::file_time_type::clock::now() - age;
  int64_t removed = 0;
  std::error_code ec;
  for (fs::directory_iterator it(cache / "tmp", ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code stat_ec;
    if (fs::last_write_time(it->path(), stat_ec) > before || stat_ec) continue;
    const int64_t bytes = files_under(it->path(), "").first;
    std::error_code remove_ec;
    fs::remove_all(it->path(), remove_ec);
    if (!remove_ec) removed += bytes;
  }
  return removed;
}

}  // namespace

int64_t kernel_cache_max_bytes() {
  const char* v = std::getenv("CONVGEN_CACHE_MAX_SIZE");
  if (!v || !*v) return int64_t(2) << 30;
  const std::string text(v);
  size_t used = 0;
  double number = -1;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  const std::string suffix = text.substr(used);
  const double scale = suffix.empty() ? 1 : suffix == "K" ? 1024.0 : suffix == "M" ? 1024.0 * 1024
                     : suffix == "G" ? 1024.0 * 1024 * 1024 : -1;
  if (!(number >= 0) || scale < 0 || number * scale > 9e18)
    throw Error(ExitCode::Usage, fmt::format("CONVGEN_CACHE_MAX_SIZE={}: expected a size such as 500M or 4G", text));
  return static_cast<int64_t>(number * scale);
}

namespace {

int64_t record_trimmed(int64_t bytes) {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.stats.trimmed_bytes += bytes;
  return bytes;
}

}  // namespace

int64_t trim_kernel_cache(const fs::path& cache, int64_t max_bytes) {
  struct Entry {
    fs::file_time_type last_used;
    int64_t bytes = 0;
    fs::path dir;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (fs::directory_iterator it(cache / "kernels", ec), end; !ec && it != end; it.increment(ec)) {
    Entry e;
    e.dir = it->path();
    // The directory's own time counts too: an entry being filled has no files yet.
    std::error_code dir_ec;
    e.last_used = fs::last_write_time(e.dir, dir_ec);
    if (dir_ec) e.last_used = fs::file_time_type::min();
    std::error_code file_ec;
    for (fs::directory_iterator f(e.dir, file_ec), fend; !file_ec && f != fend; f.increment(file_ec)) {
      std::error_code stat_ec;
      const auto size = f->file_size(stat_ec);
      if (!stat_ec) e.bytes += static_cast<int64_t>(size);
      const auto t = f->last_write_time(stat_ec);
      if (!stat_ec && t > e.last_used) e.last_used = t;
    }
    total += e.bytes;
    entries.push_back(std::move(e));
  }
  int64_t removed = remove_stale_scratch(cache, std::chrono::hours(24));
  if (total <= max_bytes) return record_trimmed(removed);
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.last_used < b.last_used; });
  const auto recent = fs::file_time_type::clock::now() - std::chrono::hours(1);
  const int64_t goal = max_bytes / 10 * 9;
  int64_t entries_removed = 0;
  for (const Entry& e : entries) {
    if (total - entries_removed <= goal || e.last_used > recent) break;
    std::error_code remove_ec;
    fs::remove_all(e.dir, remove_ec);
    if (!remove_ec) entries_removed += e.bytes;
  }
  return record_trimmed(removed + entries_removed);
}


KernelCacheUsage kernel_cache_usage(const fs::path& cache) {
  KernelCacheUsage u;
  std::error_code ec;
  for (fs::directory_iterator it(cache / "kernels", ec), end; !ec && it != end; it.increment(ec)) ++u.entries;
  u.shared_objects = files_under(cache / "kernels", ".so").second;
  u.static_libraries = files_under(cache / "kernels", ".a").second;
  u.runtimes = files_under(cache / "runtime", ".so").second;
  for (const char* sub : {"kernels", "runtime", "tmp"}) u.bytes += files_under(cache / sub, "").first;
  return u;
}

int64_t clear_kernel_cache(const fs::path& cache) {
  int64_t removed = remove_stale_scratch(cache, std::chrono::hours(1));
  for (const char* sub : {"kernels", "runtime"}) {
    const int64_t bytes = files_under(cache / sub, "").first;
    std::error_code ec;
    fs::remove_all(cache / sub, ec);
    if (ec) throw Error(ExitCode::Io, fmt::format("{}: cannot remove: {}", (cache / sub).string(), ec.message()));
    removed += bytes;
  }
  return removed;
}

void record_kernel_cache_event(KernelCacheEvent event, const std::string& fallback_reason) {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  switch (event) {
    case KernelCacheEvent::Loaded: ++s.stats.loaded; break;
    case KernelCacheEvent::Built: ++s.stats.built; break;
    case KernelCacheEvent::Jit: ++s.stats.jit; break;
    case KernelCacheEvent::Rebuilt: ++s.stats.rebuilt; break;
  }
  if (!fallback_reason.empty() && s.stats.fallback.empty()) s.stats.fallback = fallback_reason;
}

KernelCacheStats kernel_cache_stats() {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.stats;
}

std::string kernel_cache_summary() {
  const KernelCacheStats st = kernel_cache_stats();
  const auto dir = kernel_cache_dir();
  std::string line = dir ? fmt::format("kernel cache {}: {} kernels loaded, {} built and stored", dir->string(),
                                       st.loaded, st.built)
                         : std::string("kernel cache off (--no-cache or CONVGEN_CACHE=off)");
  if (st.rebuilt) line += fmt::format(", {} damaged entries replaced", st.rebuilt);
  if (st.trimmed_bytes)
    line += fmt::format(", {:.1f} MB of least recently used entries removed (CONVGEN_CACHE_MAX_SIZE)",
                        st.trimmed_bytes / 1e6);
  if (st.jit) line += fmt::format(", {} JIT-compiled in-process", st.jit);
  if (!st.fallback.empty()) line += " (" + st.fallback + ")";
  return line;
}

}  // namespace convgen
