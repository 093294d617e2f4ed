// convgen cache: what the kernel cache holds, and keeping it small (docs/kernel-cache.md).
#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "schedules/errors.h"

namespace convgen::cli {

namespace {

const char* kCacheUsage = R"(usage: convgen cache [info | trim | clear] [--cache-dir DIR]

The kernel cache every convgen process shares (docs/kernel-cache.md): one entry per
kernel, holding compile's static library and the shared object train, run, check, tune
and the benchmarks load.

  info                 (default) where it is, its entries, shared objects, static
                       libraries, runtimes and size, and its bound
  trim                 remove the least recently used entries down to 90% of the bound
                       ($CONVGEN_CACHE_MAX_SIZE, default 2G); entries used in the last
                       hour stay
  clear                remove every entry and runtime; a process running meanwhile
                       keeps what it loaded and builds the rest again
  --cache-dir DIR      this cache instead of $CONVGEN_CACHE_DIR, else
                       $XDG_CACHE_HOME/convgen, else ~/.cache/convgen
)";

std::string megabytes(int64_t bytes) { return fmt::format("{:.1f} MB", bytes / 1e6); }

}  // namespace

int cache(const Args& args) {
  std::string action = "info", dir;
  OptionReader r(args);
  bool have_action = false;
  while (!r.done()) {
    if (r.help_or_version(kCacheUsage)) return 0;
    if (r.value("--cache-dir", &dir)) continue;
    if (r.flag("--verbose") || r.flag("-v")) continue;
    if (have_action) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    action = r.positional();
    have_action = true;
    if (action != "info" && action != "trim" && action != "clear")
      throw Error(ExitCode::Usage, fmt::format("cache: unknown action '{}' (info, trim or clear)", action));
  }
  const std::filesystem::path cache = dir.empty() ? default_kernel_cache_dir() : std::filesystem::path(dir);
  const int64_t bound = kernel_cache_max_bytes();
  if (action == "trim") {
    const int64_t removed = trim_kernel_cache(cache, bound);
    fmt::print("{}: removed {} of least recently used entries (bound {})\n", cache.string(), megabytes(removed),
               megabytes(bound));
  } else if (action == "clear") {
    fmt::print("{}: removed {}\n", cache.string(), megabytes(clear_kernel_cache(cache)));
    return 0;
  }
  const KernelCacheUsage u = kernel_cache_usage(cache);
  fmt::print("{}: {} entries ({} shared objects, {} static libraries), {} runtimes, {} of {} bound\n",
             cache.string(), u.entries, u.shared_objects, u.static_libraries, u.runtimes, megabytes(u.bytes),
             megabytes(bound));
  return 0;
}

}  // namespace convgen::cli
