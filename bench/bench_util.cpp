#include "bench/bench_util.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace convgen::bench {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> values) {
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double hi = values[mid];
  if (values.size() % 2 == 1) return hi;
  const double lo = *std::max_element(values.begin(), values.begin() + mid);
  return 0.5 * (lo + hi);
}

double geomean(const std::vector<double>& values) {
  double log_sum = 0.0;
  int64_t n = 0;
  for (double v : values) {
    if (!(v > 0.0) || !std::isfinite(v)) continue;
    log_sum += std::log(v);
    ++n;
  }
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  return std::exp(log_sum / static_cast<double>(n));
}

int64_t peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    int64_t value = -1;
    std::string unit;
    fields >> value >> unit;
    if (value < 0) return -1;
    if (unit == "kB" || unit == "KB") return value * 1024;
    if (unit == "mB" || unit == "MB") return value * 1024 * 1024;
    return value;
  }
  return -1;
}

int64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    int64_t kib = -1;
    fields >> kib;
    return kib < 0 ? -1 : kib * 1024;
  }
  return -1;
}

void fill_uniform(float* data, int64_t n, uint64_t seed, float lo, float hi) {
  uint64_t state = seed;
  const double scale = (static_cast<double>(hi) - lo) / 16777216.0;  // 2^24
  for (int64_t i = 0; i < n; ++i) {
    // splitmix64
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    data[i] = static_cast<float>(lo + static_cast<double>(z >> 40) * scale);
  }
}

}  // namespace convgen::bench
