// The tuner's records file, opened for one tuning run: locked against a second tuner,
// read whole, its torn last line (a write a crash cut short) cut off, then appended one
// fsync'd line per finished trial and per tuned key. A kill -9 at any moment loses at
// most the line being written; nothing already in the file is ever rewritten.
#pragma once

#include <string>
#include <vector>

#include "schedules/schedule_records.h"

namespace convgen {

class TuneJournal {
 public:
  // Creates the file if missing. Error(Io) if it cannot be opened, Error(Busy) naming
  // the file when another process holds its lock, Error(BadRecord) for a bad line.
  explicit TuneJournal(std::string path);
  ~TuneJournal();
  TuneJournal(const TuneJournal&) = delete;
  TuneJournal& operator=(const TuneJournal&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<ScheduleRecord>& records() const { return records_; }
  const std::vector<TrainingRecord>& training_records() const { return training_; }
  // Bytes of a torn last line cut off when the file was opened (0 if none).
  int64_t repaired_bytes() const { return repaired_; }

  // A finished trial of this key and (normalised) schedule timed the same way (same
  // CPU, threads, parallel variant, micro-batch and timing method), or nullptr. The
  // last one wins.
  const ScheduleRecord* find_trial(const ScheduleKey& key, const ConvSchedule& s, const Provenance& p) const;

  // The key's last tuned schedule line, or nullptr.
  const ScheduleRecord* find_tuned(const ScheduleKey& key) const;

  // Writes one line with one write(), then fsyncs; checks first that it reads back.
  void append(const ScheduleRecord& r);
  void append(const TrainingRecord& r);

  // The training-step search's journal: a finished trial of this key and configuration
  // timed the same way (CPU, threads, timing method), or nullptr; the last one wins.
  const TrainingRecord* find_training_trial(const TrainingKey& key, int64_t micro_batch,
                                            const std::map<std::string, std::string>& modes,
                                            const Provenance& p) const;

  // A candidate that crashes the process leaves no trial line, so a resumed run would
  // propose it again and crash again. Before a candidate runs, begin_trial notes it in
  // PATH.inflight (with how often it was begun) and returns how many earlier runs began
  // it without finishing; end_trial removes the note. The tuner journals a candidate
  // begun twice before as failed instead of running it a third time.
  int begin_trial(const ScheduleKey& key, const ConvSchedule& s);
  void end_trial();

 private:
  std::string path_;
  int fd_ = -1;
  int64_t repaired_ = 0;
  std::string inflight_path_;
  std::vector<ScheduleRecord> records_;
  std::vector<TrainingRecord> training_;
  void append_line(const std::string& line);
};

}  // namespace convgen
