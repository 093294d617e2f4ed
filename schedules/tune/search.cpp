#include "schedules/tune/search.h"

#include <algorithm>
#include <limits>

#include "schedules/errors.h"

namespace convgen {

Search::Search(const TuningSpace& space, const ConvSchedule& default_schedule, SearchOptions options)
    : space_(space), default_(space.normalise(default_schedule)), options_(std::move(options)) {
  if (options_.method != "guided" && options_.method != "random")
    throw Error(ExitCode::Usage, "tune: --search " + options_.method + ": expected guided or random");
  rng_ = options_.seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  queue_.push_back(default_);
  if (options_.method == "guided")
    for (const ConvSchedule& s : options_.transfer) queue_.push_back(space_.normalise(s));
}

// SplitMix64: a small, well-mixed generator whose whole state is one integer.
uint64_t Search::random() {
  uint64_t z = (rng_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::optional<ConvSchedule> Search::take(const ConvSchedule& s) {
  if (!visited_.insert(describe(s)).second) return std::nullopt;
  ++proposed_;
  return s;
}

std::optional<ConvSchedule> Search::next() {
  while (!queue_.empty()) {
    const ConvSchedule s = queue_.front();
    queue_.erase(queue_.begin());
    if (auto c = take(s)) return c;
  }
  if (options_.method == "random") return explore(false);
  // Every fourth proposal explores; the rest walk the best schedules' neighbourhoods.
  const bool exploring = proposed_ % 4 == 3;
  if (exploring) {
    if (auto c = explore(true)) return c;
  }
  if (auto c = exploit()) return c;
  return explore(false);
}

std::optional<ConvSchedule> Search::exploit() {
  std::vector<const Measured*> order;
  for (const Measured& m : measured_) order.push_back(&m);
  // Fastest first; failed candidates last, in the order measured (stable).
  std::stable_sort(order.begin(), order.end(), [](const Measured* a, const Measured* b) {
    const double ta = a->seconds < 0 ? std::numeric_limits<double>::infinity() : a->seconds;
    const double tb = b->seconds < 0 ? std::numeric_limits<double>::infinity() : b->seconds;
    return ta < tb;
  });
  for (const Measured* m : order) {
    if (m->seconds < 0) break;
    const ConvSchedule* pick = nullptr;
    double best = std::numeric_limits<double>::infinity();
    const auto around = space_.neighbours(m->schedule);
    for (const ConvSchedule& c : around) {
      if (visited_.count(describe(c))) continue;
      // Jitter of up to 10% so seeds differ where the prior cannot tell candidates apart.
      const double score = space_.prior(c, default_) * (1.0 + 0.1 * uniform());
      if (score < best) best = score, pick = &c;
    }
    if (pick) return take(*pick);
  }
  return std::nullopt;
}

std::optional<ConvSchedule> Search::explore(bool prior_weighted) {
  std::vector<const ConvSchedule*> open;
  for (const ConvSchedule& c : space_.all())
    if (!visited_.count(describe(c))) open.push_back(&c);
  if (open.empty()) return std::nullopt;
  if (prior_weighted) {
    // The unmeasured schedules in the prior's best eighth (at least 8 of them).
    std::vector<std::pair<double, const ConvSchedule*>> ranked;
    for (const ConvSchedule* c : open) ranked.emplace_back(space_.prior(*c, default_), c);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t keep = std::min(ranked.size(), std::max<size_t>(8, ranked.size() / 8));
    open.clear();
    for (size_t i = 0; i < keep; ++i) open.push_back(ranked[i].second);
  }
  return take(*open[random() % open.size()]);
}

void Search::report(const ConvSchedule& s, double seconds) {
  measured_.push_back({space_.normalise(s), seconds});
}

}  // namespace convgen
