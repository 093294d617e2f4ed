// The training-step search of `convgen tune --train` (docs/tuning.md, "Training steps"):
// whole training steps timed to choose the trainer's micro-batch size and its Conv
// layers' parallel modes, written as one "training" record (schedules/schedule_records.h)
// that `convgen train` and `compile --train` apply. The choice fixes what shapes the
// bits, and is used identically at every thread count.
//
// Candidates: the trainer's default (trial 0); then each micro-batch m dividing the batch
// (at most 16 micro-batches, or 4 per timing thread) with the default cost model; then, at the fastest m, the
// cost model's threshold at 0, 16, 256 flop/byte and infinity (all micro-batch ... all
// whole-batch). A threshold that gives modes already timed is not timed again. Each is
// built, its first step's loss checked against the default's (same weights, same data:
// the sums differ only in order), then timed step by step until the best and third-best
// agree (TimingRule). The two fastest are re-timed interleaved with the default; one
// wins only if it beats the default by more than the spread they showed.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "schedules/conv_schedule.h"
#include "schedules/schedule_records.h"
#include "schedules/tune/tune_journal.h"

namespace convgen {

struct StepSearchRequest {
  std::string model;           // MODEL.onnx
  int64_t batch = 64;
  int64_t micro_batch = 0;     // fixed by --micro-batch; 0: searched
  std::string records;         // the kernels' schedules come from here (the journal's file)
  int threads = 1;             // steps are timed on this many threads
  uint64_t seed = 1;           // the synthetic data
  double seconds = std::numeric_limits<double>::infinity();  // wall time for proposing candidates
  int finalists = 2;
  int retime_rounds = 5;
  Provenance provenance;       // CPU, caches, Halide, threads
};

// One configuration the search timed (or found in the journal).
struct StepTrial {
  int64_t micro_batch = 0;
  double threshold = 0;        // the cost model's flop/byte threshold that gave these modes
  std::map<std::string, std::string> modes;  // Conv node -> mode
  int whole_batch_layers = 0;
  std::string status = "ok";   // ok, wrong (first loss differs), failed (threw)
  std::string error;
  TimingStats stats;           // seconds per step
  bool replayed = false;
};

struct StepSearchOutcome {
  TrainingRecord chosen;       // written (or found, when skipped)
  bool skipped = false;        // the records file already had a training record for the key
  bool accepted = false;       // a configuration other than the default won beyond noise
  std::vector<StepTrial> trials;
  double default_gflops = 0, tuned_gflops = 0;  // interleaved re-timing
  double seconds = 0;
};

// Runs the search, journaling every trial and the chosen record in `journal`. `say`
// gets one line per trial and decision (for stderr).
StepSearchOutcome search_training_step(const StepSearchRequest& request, const TargetInfo& t, TuneJournal& journal,
                                       const std::function<void(const std::string&)>& say);

}  // namespace convgen
