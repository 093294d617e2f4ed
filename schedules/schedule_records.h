// Schedule records: a ConvSchedule plus the key it is valid for, stored one JSON object
// per line (docs/schedules.md). Reading is strict: anything unexpected is an
// Error(BadRecord) naming the file, line and field, never a silently ignored record.
#pragma once

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

struct ScheduleRecord {
  ScheduleKey key;
  ConvSchedule schedule;
  std::string source;  // "analytic" | "tuned"
  double gflops = 0;   // measured; 0 = not measured
  std::string note;    // free text, may be empty

  bool operator==(const ScheduleRecord& o) const;
  bool operator!=(const ScheduleRecord& o) const { return !(*this == o); }
};

// Inverses of to_string(enum) (conv_schedule.cpp): false if `name` names no value.
bool from_string(const std::string& name, Strategy* out);
bool from_string(const std::string& name, Layout* out);
bool from_string(const std::string& name, PackInput* out);
bool from_string(const std::string& name, PackWeights* out);
bool from_string(const std::string& name, LoopOrder* out);
bool from_string(const std::string& name, Parallel* out);

// Applies "field=value" words (describe()'s form, e.g. "mr=16 nr=6 parallel=pixels";
// a bare strategy name is accepted too) over `s`. Throws Error(Usage) naming the word.
void apply_schedule_overrides(const std::string& text, ConvSchedule* s);

// One line, no trailing newline, keys in a fixed order: the same record always gives
// the same bytes. Throws Error(BadRecord) if the record cannot be written as JSON
// (gflops not finite, a string that is not UTF-8).
std::string to_json_line(const ScheduleRecord& r);

// Strict parse of one line; `where` ("file:line") prefixes every error message.
ScheduleRecord parse_record_line(const std::string& line, const std::string& where);

// All records of a file in order; blank lines are skipped. Error(Io) if unreadable.
std::vector<ScheduleRecord> read_records(const std::string& path);

// Replaces `path` atomically (temp file, fsync, rename): a crash leaves the old file or
// the new one, never a half-written one. Every record is checked to read back first.
void write_records(const std::string& path, const std::vector<ScheduleRecord>& records);

// The last record with this key (later records supersede earlier ones), or nullptr.
const ScheduleRecord* find_record(const std::vector<ScheduleRecord>& records, const ScheduleKey& key);

}  // namespace convgen
