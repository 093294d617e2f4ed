#include "schedules/tune/timing_rule.h"

#include <algorithm>
#include <chrono>

namespace convgen {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TimingStats summarise(std::vector<double> samples) {
  TimingStats st;
  st.count = static_cast<int>(samples.size());
  if (samples.empty()) return st;
  std::sort(samples.begin(), samples.end());
  st.min_seconds = samples.front();
  const size_t n = samples.size();
  st.median_seconds = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  const double third = samples[std::min<size_t>(2, n - 1)];
  st.spread = st.min_seconds > 0 ? (third - st.min_seconds) / st.min_seconds : 0;
  return st;
}

TimingStats relative_to_reference(TimingStats candidate, double reference, double beside) {
  if (reference <= 0 || beside <= 0) return candidate;
  const double scale = reference / beside;
  candidate.min_seconds *= scale;
  candidate.median_seconds *= scale;
  return candidate;
}

TimingStats time_until_stable(const std::function<double()>& sample, const TimingRule& rule, double best_so_far) {
  std::vector<double> samples;
  while (true) {
    samples.push_back(sample());
    if (static_cast<int>(samples.size()) < rule.min_samples) continue;
    const TimingStats st = summarise(samples);
    if (st.spread <= rule.agree || st.count >= rule.max_samples) return st;
    if (best_so_far > 0 && st.min_seconds > rule.clearly_slower * best_so_far) return st;
  }
}

bool beats_beyond_noise(const TimingStats& candidate, const TimingStats& reference, double floor) {
  if (candidate.count == 0 || reference.count == 0 || reference.median_seconds <= 0) return false;
  const double gain = (reference.median_seconds - candidate.median_seconds) / reference.median_seconds;
  return gain > std::max({candidate.spread, reference.spread, floor});
}

}  // namespace convgen
