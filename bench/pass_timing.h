// How a whole-model inference benchmark times passes and measures memory, shared by
// convgen-model-bench (the executor) and bench/driver_bench (a generated driver, built
// against the installed package): R timed runs, each at least 50 ms of repeated passes
// after a warm-up pass; the median run's ms per pass; latency percentiles over every
// pass; the RSS after loading and the peak above it (the high-water mark reset after
// loading). Standard C++ and Linux /proc only, so the installed-package project can use it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace convgen::bench {

// VmRSS or VmHWM of /proc/self/status in MiB (NaN where absent).
inline double proc_status_mib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return std::nan("");
  char line[256];
  double mib = std::nan("");
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') mib = std::strtod(line + n + 1, nullptr) / 1024.0;
  std::fclose(f);
  return mib;
}

// Resets the peak-RSS mark (Linux >= 4.0); without it the peak includes loading.
inline void reset_peak_rss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

inline double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<int64_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size()))) - 1;
  return sorted[static_cast<size_t>(std::clamp<int64_t>(rank, 0, static_cast<int64_t>(sorted.size()) - 1))];
}

struct PassTiming {
  double ms = 0;                     // median over the runs of ms per pass
  double p50_ms = 0, p99_ms = 0;     // over every timed pass
  double load_rss_mib = 0, peak_rss_mib = 0;
};

// Call it right after loading: the warm-up pass (first touch) counts towards the peak.
inline PassTiming time_passes(int64_t runs, const std::function<void()>& pass) {
  PassTiming t;
  t.load_rss_mib = proc_status_mib("VmRSS");
  reset_peak_rss();
  pass();  // warm-up
  std::vector<double> ms, passes;
  using Clock = std::chrono::steady_clock;
  for (int64_t r = 0; r < runs; ++r) {
    int reps = 0;
    const auto start = Clock::now();
    double elapsed = 0;
    do {
      const auto t0 = Clock::now();
      pass();
      const auto t1 = Clock::now();
      passes.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      ++reps;
      elapsed = std::chrono::duration<double, std::milli>(t1 - start).count();
    } while (elapsed < 50.0);
    ms.push_back(elapsed / reps);
  }
  std::sort(ms.begin(), ms.end());
  std::sort(passes.begin(), passes.end());
  t.ms = ms[ms.size() / 2];
  t.p50_ms = percentile(passes, 50);
  t.p99_ms = percentile(passes, 99);
  t.peak_rss_mib = std::max(proc_status_mib("VmHWM"), t.load_rss_mib);
  return t;
}

}  // namespace convgen::bench
