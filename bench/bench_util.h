// Small measurement helpers for convgen-bench: a monotonic timer, robust statistics,
// the process's peak resident set size and the CPU model string.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace convgen::bench {

// Seconds on the monotonic clock (steady_clock), for differences only.
double now_seconds();

// Monotonic stopwatch: starts at construction, restart() resets it.
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double millis() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Median of the values (mean of the two middle ones for an even count); NaN if empty.
double median(std::vector<double> values);

// Geometric mean of the strictly positive values; values <= 0 or NaN are skipped.
// NaN if none is left.
double geomean(const std::vector<double>& values);

// Peak resident set size of this process (VmHWM in /proc/self/status), in bytes;
// -1 if it cannot be read.
int64_t peak_rss_bytes();

// MemAvailable from /proc/meminfo in bytes; -1 if it cannot be read.
int64_t available_memory_bytes();


// Deterministic pseudo-random floats uniform in [lo, hi), from a 64-bit seed
// (splitmix64), identical on every run and machine.
void fill_uniform(float* data, int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace convgen::bench
