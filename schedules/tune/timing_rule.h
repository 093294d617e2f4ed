// When to stop timing a candidate, and when a tuned schedule may replace the default
// (docs/tuning.md, "Timing that survives noise"). Plain functions over samples, so the
// tuner's tests drive them with a stub timer.
#pragma once

#include <functional>
#include <vector>

#include "schedules/schedule_records.h"

namespace convgen {

struct TimingRule {
  int min_samples = 3;         // the best and the third-best are compared
  int max_samples = 12;        // cap when they never agree
  double agree = 0.03;         // stop once the third-best is within 3% of the best
  double clearly_slower = 1.3; // stop after min_samples when the best is this much slower than the best so far
};

// Seconds on a monotonic clock (steady_clock), for timing samples and budgets.
double monotonic_seconds();

// Statistics of samples (seconds per call): min, median, spread = (third-best - best) /
// best (with fewer than three samples, of the slowest), count.
TimingStats summarise(std::vector<double> samples);

// Takes samples from `sample` (seconds per call of one timed batch) until the rule
// stops; `best_so_far` (0 = none) lets a clearly slower candidate stop early.
TimingStats time_until_stable(const std::function<double()>& sample, const TimingRule& rule, double best_so_far);

// Timing method 3 (docs/tuning.md, "Timing that survives noise"): a candidate's samples
// in the units of the moment the layer's tuning started. `reference` is the default's
// best time then; `beside` the default's best of the samples taken just before and just
// after the candidate's. The machine's speed changes in phases (a VM's slow and fast
// spells, seconds long) that move every kernel alike; scaling by reference / beside
// cancels them, so candidates timed in different phases compare fairly.
TimingStats relative_to_reference(TimingStats candidate, double reference, double beside);

// True when `candidate` beats `reference` by more than the noise both showed: its
// median is lower by more than the larger of their spreads (and at least `floor`).
bool beats_beyond_noise(const TimingStats& candidate, const TimingStats& reference, double floor = 0.01);

}  // namespace convgen
