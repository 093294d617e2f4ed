// Schedule records: a ConvSchedule plus the key it is valid for, stored one JSON object
// per line (docs/schedules.md). Reading is strict: anything unexpected is an
// Error(BadRecord) naming the file, line and field, never a silently ignored record.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schedules/conv_schedule.h"

namespace convgen {

// What a schedule was chosen or measured for. A record is reused only when all four
// match: other layer, pass, CPU features or generator code may want another schedule.
struct ScheduleKey {
  std::string descriptor;      // ConvDescriptor::normalised()
  std::string pass;            // "fwd" | "bwd_data" | "bwd_weights"
  std::string target;          // Halide target string
  std::string generator_hash;  // CONVGEN_GENERATOR_HASH of the code that built it

  bool operator==(const ScheduleKey& o) const;
  bool operator!=(const ScheduleKey& o) const { return !(*this == o); }
};

// What a measurement depended on besides the key: a record measured on another CPU
// still applies (the key decides correctness, not speed); `--verbose` notes the difference.
// The tuner's timing method: 1 = tensors at a plain vector's 16-byte offset (records of
// version 3 and older), 2 = cache-line aligned tensors, as the runtime stores them, 3 =
// the same, each candidate's times scaled by the default timed beside it
// (relative_to_reference, schedules/tune/timing_rule.h).
inline constexpr int kTimingMethod = 3;

struct Provenance {
  std::string cpu;            // CPU model name, as /proc/cpuinfo gives it
  int64_t l1_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // data caches the timing ran with
  std::string halide;         // Halide version of the generator
  int threads = 1;            // threads the candidates were timed on
  int64_t micro_batch = 0;    // the trainer's micro-batch for --train tunings, else 0
  std::string variant;        // parallel variant timed: "none", "images" or "pixels"
  // How candidates were timed (kTimingMethod); trials of another method are not replayed.
  int timing_method = kTimingMethod;

  bool operator==(const Provenance& o) const;
  bool operator!=(const Provenance& o) const { return !(*this == o); }
};

// Repeated timings of one kernel (seconds per call).
struct TimingStats {
  double min_seconds = 0;
  double median_seconds = 0;
  double spread = 0;  // (third-best - best) / best of the samples: how far apart the best runs are
  int count = 0;      // samples taken

  bool operator==(const TimingStats& o) const;
  bool operator!=(const TimingStats& o) const { return !(*this == o); }
};

// How a record was measured by `convgen tune` (docs/tuning.md). Present on trial lines
// and on tuned schedule lines written by the tuner; absent on hand-written records.
struct TuningInfo {
  bool present = false;
  int trial = -1;              // trial lines: index in the search; schedule lines: -1
  // trial lines: "ok", "wrong" (bits differ from the reference), "failed" (did not build
  // or run), "refused" (heap workspace over the layer's budget)
  std::string status = "ok";
  uint64_t seed = 0;           // the search's seed
  std::string search;          // "guided" or "random"
  int trials = 0;              // schedule lines: trials the search had run when it chose
  double default_gflops = 0;   // schedule lines: the analytic default, re-timed beside the winner
  int64_t workspace_bytes = 0; // heap the kernel allocated per call
  TimingStats stats;
  Provenance provenance;

  bool operator==(const TuningInfo& o) const;
  bool operator!=(const TuningInfo& o) const { return !(*this == o); }
};

// A schedule line is used to build kernels; a trial line is the tuner's journal of one
// measured candidate and is never applied.
enum class RecordKind { Schedule, Trial };

struct ScheduleRecord {
  ScheduleKey key;
  ConvSchedule schedule;
  std::string source;  // "analytic" | "tuned"
  double gflops = 0;   // measured; 0 = not measured
  std::string note;    // free text, may be empty
  RecordKind kind = RecordKind::Schedule;
  TuningInfo tuning;

  bool operator==(const ScheduleRecord& o) const;
  bool operator!=(const ScheduleRecord& o) const { return !(*this == o); }
};

// What a training configuration was chosen for: one model file (its bytes' SHA-256), one
// mini-batch size, one target. Never the thread count: a training record fixes what
// shapes the bits, so every T computes the same weights with it.
struct TrainingKey {
  std::string model_sha256;  // 64 lowercase hex digits
  int64_t batch = 0;         // mini-batch B
  std::string target;        // Halide target string

  bool operator==(const TrainingKey& o) const;
  bool operator!=(const TrainingKey& o) const { return !(*this == o); }
};

// The trainer's choices that `convgen tune --train` measures on whole training steps
// (docs/tuning.md, "Training steps"): the micro-batch size and every Conv layer's
// parallel mode. Written as kind "training" (the choice) or "training_trial" (one timed
// configuration, the journal), record version 5. `train --schedules` and
// `compile --train --schedules` apply the last "training" line of their key.
struct TrainingRecord {
  TrainingKey key;
  int64_t micro_batch = 0;     // the trainer's m, 1..batch
  // Every Conv layer's mode by node name: "micro-batch" or "whole-batch" (written in name
  // order, so the same record always gives the same bytes).
  std::map<std::string, std::string> parallel_modes;
  double gflops = 0;           // the step's nominal flops per second, measured
  std::string note;            // free text, may be empty
  RecordKind kind = RecordKind::Schedule;  // Schedule: "training"; Trial: "training_trial"
  TuningInfo tuning;           // required: how it was measured (default_gflops: the untuned trainer's)

  bool operator==(const TrainingRecord& o) const;
  bool operator!=(const TrainingRecord& o) const { return !(*this == o); }
};

// Inverses of to_string(enum) (conv_schedule.cpp): false if `name` names no value.
bool from_string(const std::string& name, Strategy* out);
bool from_string(const std::string& name, Layout* out);
bool from_string(const std::string& name, PackInput* out);
bool from_string(const std::string& name, PackWeights* out);
bool from_string(const std::string& name, LoopOrder* out);
bool from_string(const std::string& name, Parallel* out);
bool from_string(const std::string& name, OutputStores* out);

// Applies "field=value" words (describe()'s form, e.g. "mr=16 nr=6 parallel=pixels";
// a bare strategy name is accepted too) over `s`. Throws Error(Usage) naming the word.
void apply_schedule_overrides(const std::string& text, ConvSchedule* s);

// One line, no trailing newline, keys in a fixed order: the same record always gives
// the same bytes. Throws Error(BadRecord) if the record cannot be written as JSON
// (gflops not finite, a string that is not UTF-8).
std::string to_json_line(const ScheduleRecord& r);

// Strict parse of one line; `where` ("file:line") prefixes every error message. A
// training line is an Error(BadRecord) here: parse_training_record_line reads those.
ScheduleRecord parse_record_line(const std::string& line, const std::string& where);

// The same for training records: same bytes for the same record; strict parse (a
// schedule line is an error here).
std::string to_json_line(const TrainingRecord& r);
TrainingRecord parse_training_record_line(const std::string& line, const std::string& where);

// All records of a file in order; blank lines are skipped. Error(Io) if unreadable.
// A last line without its newline that is not even JSON is a write a crash cut short
// (the tuner appends one line per trial): with `torn_tail` non-null it is left out and
// *torn_tail set to its byte offset (else -1), so the tuner can cut it off before
// appending; without, it is an Error(BadRecord) that says so. Training lines are checked
// as strictly and go to `training` (skipped when it is null).
std::vector<ScheduleRecord> read_records(const std::string& path, int64_t* torn_tail = nullptr,
                                         std::vector<TrainingRecord>* training = nullptr);

// Replaces `path` atomically (temp file, fsync, rename): a crash leaves the old file or
// the new one, never a half-written one. Every record is checked to read back first.
// Training records follow the schedule records.
void write_records(const std::string& path, const std::vector<ScheduleRecord>& records,
                   const std::vector<TrainingRecord>& training = {});

// The last schedule record (never a trial line) with this key -- later records supersede
// earlier ones -- or nullptr.
const ScheduleRecord* find_record(const std::vector<ScheduleRecord>& records, const ScheduleKey& key);

// The last training record (never a trial line) with this key, or nullptr.
const TrainingRecord* find_training_record(const std::vector<TrainingRecord>& records, const TrainingKey& key);

}  // namespace convgen
