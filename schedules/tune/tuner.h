// Tuning one record key (layer, pass, target, generator): the search proposes, the
// evaluator checks and times, the journal keeps every finished trial, and the finalists
// are re-timed interleaved with the default before one tuned line is written
// (docs/tuning.md). No Halide here: generator/tune/ supplies the evaluator that builds
// kernels; tests supply a stub.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "schedules/schedule_records.h"
#include "schedules/tune/search.h"
#include "schedules/tune/tune_journal.h"
#include "schedules/tune/tuning_space.h"

namespace convgen {

struct CandidateResult {
  std::string status = "ok";  // "ok", "wrong", "failed" or "refused" (TuningInfo::status)
  std::string error;          // why, for anything but ok
  TimingStats stats;          // ok only
  int64_t workspace_bytes = 0;
};

// Builds, checks and times candidates of one key.
class CandidateEvaluator {
 public:
  virtual ~CandidateEvaluator() = default;
  // Optional: build a batch ahead (e.g. in parallel); evaluate() may then reuse them.
  virtual void prepare(const std::vector<ConvSchedule>& batch) { (void)batch; }
  // Checks the candidate bit for bit against the reference, then times it (TimingRule).
  // `best_so_far` (seconds, 0 = none) lets a clearly slower candidate stop early.
  virtual CandidateResult evaluate(const ConvSchedule& s, double best_so_far) = 0;
  // Only the check (status, error, workspace; no statistics): what `--compare` needs
  // before its own interleaved timing. By default a full evaluate().
  virtual CandidateResult check(const ConvSchedule& s) { return evaluate(s, 0); }
  // `rounds` rounds, each timing every schedule once in order: statistics per schedule.
  // A schedule listed twice is built twice (two kernels of the same code): the tuner
  // lists the default twice to measure how much code placement alone moves a time.
  virtual std::vector<TimingStats> retime_interleaved(const std::vector<ConvSchedule>& schedules, int rounds) = 0;
  // Nominal flops of one call (2 N K (C/g) R S P Q).
  virtual double flops() const = 0;
};

struct TuneKeyRequest {
  ScheduleKey key;
  ConvSchedule default_schedule;  // the analytic default, with the consumer's parallel field
  Provenance provenance;          // what the timings depend on (CPU, threads, variant)
  SearchOptions search;
  int max_trials = 64;            // per key, replayed trials included
  double seconds = std::numeric_limits<double>::infinity();  // wall time allotted to this key
  int jobs = 1;                   // candidates proposed (and built) per batch
  int finalists = 3;
  int retime_rounds = 5;
  // This key's winner under an earlier generator (previous_tuned_schedule): the search's
  // first transfer seed (guided search), and re-timed beside the default whatever its
  // search timing, so a slow phase of the machine during the search cannot drop a
  // schedule that won before.
  std::optional<ConvSchedule> previous_winner;
};

struct TuneProgress {
  int trial = 0;                // index of the trial just finished
  ConvSchedule schedule;        // its schedule (normal form)
  bool replayed = false;        // its result came from the journal
  std::string status;
  double gflops = 0;            // this trial (0 unless ok)
  double best_gflops = 0, default_gflops = 0;
};

struct TuneKeyOutcome {
  ScheduleRecord chosen;        // the tuned line (written, or found when skipped)
  bool skipped = false;         // an earlier run had finished this key with these settings
  bool accepted = false;        // a schedule other than the default won beyond noise
  int trials = 0, replayed = 0, wrong = 0, failed = 0, refused = 0;
  int best_trial = 0;           // trial that found the fastest candidate
  int transferred = 0;          // transfer seeds given to the search (guided)
  bool transfer_won = false;    // the accepted winner is one of them
  double default_gflops = 0, tuned_gflops = 0;  // from the interleaved re-timing
  double seconds = 0;
  std::vector<double> best_so_far_gflops;       // after each trial, for plots
};

// The default re-timed `rounds` rounds interleaved with `others`. The default runs twice,
// as two separately built kernels: identical code at other addresses has measured up to
// 10% apart, so its statistics are the faster of the two, with a spread that covers
// their gap as well as each one's own spread.
struct Contest {
  TimingStats reference;           // the default
  std::vector<TimingStats> others;  // in the order given
};
Contest retime_against_default(const ConvSchedule& def, const std::vector<ConvSchedule>& others,
                               CandidateEvaluator& evaluator, int rounds);

// `convgen tune --compare`: each schedule (normal form) is checked bit for bit, then the
// correct ones are re-timed interleaved with the default (retime_against_default).
struct ComparedSchedule {
  ConvSchedule schedule;
  CandidateResult check;  // its status; a wrong or failed one is not re-timed
  TimingStats retimed;    // count 0 unless re-timed
};
struct Comparison {
  TimingStats default_stats;
  std::vector<ComparedSchedule> schedules;
};
Comparison compare_with_default(const TuningSpace& space, const ConvSchedule& def,
                                const std::vector<ConvSchedule>& schedules, CandidateEvaluator& evaluator, int rounds);

TuneKeyOutcome tune_key(const TuneKeyRequest& request, const TuningSpace& space, CandidateEvaluator& evaluator,
                        TuneJournal& journal, const std::function<void(const TuneProgress&)>& progress = {});

// The latest tuned schedule of `key`'s descriptor, pass and target under another
// generator hash (a re-tune after the generator changed), if it won against its default;
// a tuned line that kept the default gives none.
std::optional<ConvSchedule> previous_tuned_schedule(const std::vector<ScheduleRecord>& records,
                                                    const ScheduleKey& key);

// Schedules of tuned keys similar to `key` (same pass, target and generator, same kernel
// size, stride and grouping, channels within 2x and image within 4x), most similar
// first, at most `limit`: the search's transfer seeds.
std::vector<ConvSchedule> similar_tuned_schedules(const std::vector<ScheduleRecord>& records, const ScheduleKey& key,
                                                  size_t limit = 2);

}  // namespace convgen
