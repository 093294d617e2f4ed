// The tuner's search over a TuningSpace: which candidate to measure next. Every proposal
// is a deterministic function of the seed and the results reported so far, so a resumed
// run that replays the journal's results proposes the same sequence (docs/tuning.md,
// "The search").
//
// guided: trial 0 is the analytic default, then schedules of similar layers already
//   tuned (transfer: first this layer's winner under an earlier generator, if any),
//   then best-first neighbourhood moves: the best measured schedule's unmeasured
//   neighbours in order of the analytic prior (TuningSpace::prior) with a seeded
//   jitter, falling back to the next-best schedule when a neighbourhood is spent;
//   every fourth proposal explores instead, a seeded pick among the unmeasured schedules
//   the prior ranks in its best eighth.
// random: trial 0 is the default, then uniform picks among the unmeasured schedules
//   (the baseline the guided search is measured against).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "schedules/tune/tuning_space.h"

namespace convgen {

struct SearchOptions {
  std::string method = "guided";           // "guided" or "random"
  uint64_t seed = 1;
  std::vector<ConvSchedule> transfer;      // schedules of similar tuned layers, most similar first
};

class Search {
 public:
  Search(const TuningSpace& space, const ConvSchedule& default_schedule, SearchOptions options);

  // The next candidate (normalised, never proposed before), or nullopt when the space is spent.
  std::optional<ConvSchedule> next();

  // The result of the last proposal: seconds per call, or a negative value for a
  // candidate that was wrong, failed or refused (never a centre of neighbourhood moves).
  void report(const ConvSchedule& s, double seconds);

  int proposed() const { return proposed_; }

 private:
  struct Measured {
    ConvSchedule schedule;
    double seconds;
  };
  const TuningSpace& space_;
  ConvSchedule default_;
  SearchOptions options_;
  uint64_t rng_;
  int proposed_ = 0;
  std::vector<ConvSchedule> queue_;  // default and transfer schedules, in order
  std::set<std::string> visited_;
  std::vector<Measured> measured_;

  uint64_t random();
  double uniform() { return double(random() >> 11) * (1.0 / 9007199254740992.0); }
  std::optional<ConvSchedule> exploit();
  std::optional<ConvSchedule> explore(bool prior_weighted);
  std::optional<ConvSchedule> take(const ConvSchedule& s);
};

}  // namespace convgen
