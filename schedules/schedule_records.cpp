// Schedule records as versioned JSON lines. Writing is done by hand with fmt so the key
// order and number formatting are fixed; reading uses nlohmann::json and rejects
// anything that is not exactly a record of a version it knows (1 to 5).
#include "schedules/schedule_records.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>

#include "schedules/durable_file.h"
#include "schedules/errors.h"

namespace convgen {
namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "convgen-schedule";
// Written: version 5 (the schedule's "output_stores"; training lines, kinds "training"
// and "training_trial", came with it). Still read: version 4 (no "output_stores":
// cached), version 3 (no "timing_method": method 1), version 2 (no "kind", no "tuning")
// and version 1 (no "partitions" either).
constexpr int kRecordVersion = 5;
constexpr int kTrainingRecordVersion = 5;
constexpr int kNewestReadableVersion = 5;
constexpr int kOldestReadableVersion = 1;
const std::vector<std::string> kPasses = {"fwd", "bwd_data", "bwd_weights"};
const std::vector<std::string> kSources = {"analytic", "tuned"};
const std::vector<std::string> kKinds = {"schedule", "trial"};
const std::vector<std::string> kTrainingKinds = {"training", "training_trial"};
const std::vector<std::string> kParallelModes = {"micro-batch", "whole-batch"};
const std::vector<std::string> kStatuses = {"ok", "wrong", "failed", "refused"};
const std::vector<std::string> kSearches = {"guided", "random"};
const std::vector<std::string> kVariants = {"none", "images", "pixels"};

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw Error(ExitCode::BadRecord, where + ": " + what);
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  for (const auto& n : names) {
    if (n == name) return true;
  }
  return false;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// ---- writing ---------------------------------------------------------------------

// A JSON string literal. Strict UTF-8: a record must read back exactly as written.
std::string quote(const std::string& s, const char* field) {
  try {
    return json(s).dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::type_error&) {
    throw Error(ExitCode::BadRecord, fmt::format("record: {}: not valid UTF-8", field));
  }
}

// Shortest text that parses back to the same double: reproducible and lossless.
std::string number(double v, const char* field = "gflops") {
  if (!std::isfinite(v)) {
    throw Error(ExitCode::BadRecord, fmt::format("record: {}: {} is not a finite number", field, v));
  }
  return fmt::format("{}", v);
}

std::string tuning_json(const TuningInfo& t) {
  const Provenance& p = t.provenance;
  const TimingStats& st = t.stats;
  return fmt::format(
      R"({{"trial":{},"status":{},"seed":{},"search":{},"trials":{},"default_gflops":{},"workspace_bytes":{},)"
      R"("stats":{{"min_seconds":{},"median_seconds":{},"spread":{},"count":{}}},)"
      R"("provenance":{{"cpu":{},"l1_bytes":{},"l2_bytes":{},"l3_bytes":{},"halide":{},"threads":{},)"
      R"("micro_batch":{},"variant":{},"timing_method":{}}}}})",
      t.trial, quote(t.status, "tuning.status"), t.seed, quote(t.search, "tuning.search"), t.trials,
      number(t.default_gflops, "tuning.default_gflops"), t.workspace_bytes,
      number(st.min_seconds, "tuning.stats.min_seconds"), number(st.median_seconds, "tuning.stats.median_seconds"),
      number(st.spread, "tuning.stats.spread"), st.count, quote(p.cpu, "tuning.provenance.cpu"), p.l1_bytes,
      p.l2_bytes, p.l3_bytes, quote(p.halide, "tuning.provenance.halide"), p.threads, p.micro_batch,
      quote(p.variant, "tuning.provenance.variant"), p.timing_method);
}

std::string key_json(const ScheduleKey& k) {
  return fmt::format(R"({{"descriptor":{},"pass":{},"target":{},"generator_hash":{}}})",
                     quote(k.descriptor, "key.descriptor"), quote(k.pass, "key.pass"),
                     quote(k.target, "key.target"), quote(k.generator_hash, "key.generator_hash"));
}

std::string schedule_json(const ConvSchedule& s) {
  return fmt::format(
      R"({{"strategy":"{}","mr":{},"nr":{},"kc":{},"mc":{},"nc":{},"layout":"{}",)"
      R"("pack_input":"{}","pack_weights":"{}","loop_order":"{}","parallel":"{}","partitions":{},)"
      R"("output_stores":"{}"}})",
      to_string(s.strategy), s.mr, s.nr, s.kc, s.mc, s.nc, to_string(s.layout),
      to_string(s.pack_input), to_string(s.pack_weights), to_string(s.loop_order),
      to_string(s.parallel), s.partitions, to_string(s.output_stores));
}

// ---- reading ---------------------------------------------------------------------

// "string \"x\"", "number 2.5", "array": what was found where something else was expected.
std::string what_is(const json& v) {
  if (v.is_structured()) return v.type_name();
  return fmt::format("{} {}", v.type_name(), v.dump());
}

// Parses one line, rejecting duplicate keys (nlohmann would keep the last silently).
json parse_json(const std::string& line, const std::string& where) {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;
  auto track_keys = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && duplicate.empty() &&
               !open_objects.back().insert(parsed.get<std::string>()).second) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(line, track_keys);
  } catch (const json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " prefix.
    std::string msg = e.what();
    const auto bracket = msg.find("] ");
    fail(where, "not JSON: " + (bracket == std::string::npos ? msg : msg.substr(bracket + 2)));
  }
  if (!duplicate.empty()) fail(where, fmt::format("duplicate field \"{}\"", duplicate));
  return j;
}

// One JSON object of a record, read field by field with type checks. `path` ("key",
// "schedule", or "" at top level) qualifies field names in messages.
class ObjectReader {
 public:
  ObjectReader(const json& j, std::string path, const std::string& where)
      : j_(j), path_(std::move(path)), where_(where) {
    if (!j_.is_object()) {
      fail(where_, fmt::format("{}: expected an object, got {}", path_.empty() ? "record" : path_, what_is(j_)));
    }
  }

  std::string name(const std::string& field) const { return path_.empty() ? field : path_ + "." + field; }

  // Newer versions may add fields, so callers check "version" before calling this.
  void reject_unknown(std::initializer_list<const char*> known) const {
    for (const auto& item : j_.items()) {
      bool ok = false;
      for (const char* k : known) ok = ok || item.key() == k;
      if (!ok) fail(where_, fmt::format("unknown field \"{}\"", name(item.key())));
    }
  }

  const json& field(const std::string& field) const {
    const auto it = j_.find(field);
    if (it == j_.end()) fail(where_, fmt::format("missing field \"{}\"", name(field)));
    return *it;
  }

  std::string str(const std::string& f) const {
    const json& v = field(f);
    if (!v.is_string()) fail(where_, fmt::format("{}: expected a string, got {}", name(f), what_is(v)));
    return v.get<std::string>();
  }

  std::string non_empty_string(const std::string& f) const {
    std::string s = str(f);
    if (s.empty()) fail(where_, fmt::format("{}: must not be empty", name(f)));
    return s;
  }

  std::string one_of(const std::string& f, const std::vector<std::string>& allowed) const {
    std::string s = str(f);
    if (!contains(allowed, s)) {
      fail(where_, fmt::format("{}: unknown value \"{}\" (expected one of {})", name(f), s, join(allowed)));
    }
    return s;
  }

  int integer(const std::string& f) const {
    const json& v = field(f);
    if (!v.is_number_integer()) fail(where_, fmt::format("{}: expected an integer, got {}", name(f), what_is(v)));
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t{INT_MAX}
                                             : v.get<int64_t>() >= INT_MIN && v.get<int64_t>() <= INT_MAX;
    if (!fits) fail(where_, fmt::format("{}: {} is out of range", name(f), v.dump()));
    return static_cast<int>(v.get<int64_t>());
  }

  int64_t non_negative_int64(const std::string& f) const {
    const json& v = field(f);
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
        (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
      fail(where_, fmt::format("{}: expected an integer >= 0, got {}", name(f), what_is(v)));
    return v.get<int64_t>();
  }

  uint64_t unsigned_integer(const std::string& f) const {
    const json& v = field(f);
    if (!v.is_number_unsigned()) fail(where_, fmt::format("{}: expected an integer >= 0, got {}", name(f), what_is(v)));
    return v.get<uint64_t>();
  }

  double non_negative_number(const std::string& f) const {
    const json& v = field(f);
    if (!v.is_number()) fail(where_, fmt::format("{}: expected a number, got {}", name(f), what_is(v)));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0) fail(where_, fmt::format("{}: {} must be a finite number >= 0", name(f), v.dump()));
    return d;
  }

  template <typename E>
  E enumeration(const std::string& f, const std::vector<E>& all) const {
    const std::string s = str(f);
    E value{};
    if (from_string(s, &value)) return value;
    std::vector<std::string> names;
    for (E v : all) names.push_back(to_string(v));
    fail(where_, fmt::format("{}: unknown value \"{}\" (expected one of {})", name(f), s, join(names)));
  }

 private:
  const json& j_;
  std::string path_;
  const std::string& where_;
};

// "format" and "version" are read first: a record of another version may have other
// fields, and saying "version 2" is more useful than "unknown field".
int check_format_and_version(const ObjectReader& top, const std::string& where, int newest) {
  const std::string format = top.str("format");
  if (format != kFormat) fail(where, fmt::format("format: expected \"{}\", got \"{}\"", kFormat, format));
  const int version = top.integer("version");
  if (version < kOldestReadableVersion || version > newest) {
    fail(where, fmt::format("version {} is not supported; this convgen reads versions {} to {}", version,
                            kOldestReadableVersion, newest));
  }
  return version;
}

ScheduleKey read_key(const json& j, const std::string& where) {
  ObjectReader in(j, "key", where);
  in.reject_unknown({"descriptor", "pass", "target", "generator_hash"});
  ScheduleKey k;
  k.descriptor = in.non_empty_string("descriptor");
  k.pass = in.one_of("pass", kPasses);
  k.target = in.non_empty_string("target");
  k.generator_hash = in.non_empty_string("generator_hash");
  return k;
}

ConvSchedule read_schedule(const json& j, const ScheduleSpace& space, int version, const std::string& where) {
  ObjectReader in(j, "schedule", where);
  if (version == 1) {
    in.reject_unknown({"strategy", "mr", "nr", "kc", "mc", "nc", "layout", "pack_input", "pack_weights",
                       "loop_order", "parallel"});
  } else if (version < 5) {
    in.reject_unknown({"strategy", "mr", "nr", "kc", "mc", "nc", "layout", "pack_input", "pack_weights",
                       "loop_order", "parallel", "partitions"});
  } else {
    in.reject_unknown({"strategy", "mr", "nr", "kc", "mc", "nc", "layout", "pack_input", "pack_weights",
                       "loop_order", "parallel", "partitions", "output_stores"});
  }
  ConvSchedule s;
  s.strategy = in.enumeration("strategy", space.strategy);
  s.mr = in.integer("mr");
  s.nr = in.integer("nr");
  s.kc = in.integer("kc");
  s.mc = in.integer("mc");
  s.nc = in.integer("nc");
  s.layout = in.enumeration("layout", space.layout);
  s.pack_input = in.enumeration("pack_input", space.pack_input);
  s.pack_weights = in.enumeration("pack_weights", space.pack_weights);
  s.loop_order = in.enumeration("loop_order", space.loop_order);
  s.parallel = in.enumeration("parallel", space.parallel);
  if (version >= 2) s.partitions = in.integer("partitions");  // version 1 had none: 1
  if (version >= 5) s.output_stores = in.enumeration("output_stores", space.output_stores);  // before: cached
  return s;
}

TuningInfo read_tuning(const json& j, RecordKind kind, int version, const std::string& where) {
  ObjectReader in(j, "tuning", where);
  in.reject_unknown({"trial", "status", "seed", "search", "trials", "default_gflops", "workspace_bytes", "stats",
                     "provenance"});
  TuningInfo t;
  t.present = true;
  t.trial = in.integer("trial");
  if (kind == RecordKind::Trial ? t.trial < 0 : t.trial != -1)
    fail(where, fmt::format("tuning.trial: {} {}", t.trial,
                            kind == RecordKind::Trial ? "must be >= 0 on a trial line" : "must be -1 on a schedule line"));
  t.status = in.one_of("status", kStatuses);
  t.seed = in.unsigned_integer("seed");
  t.search = in.one_of("search", kSearches);
  t.trials = in.integer("trials");
  if (t.trials < 0) fail(where, fmt::format("tuning.trials: {} must be >= 0", t.trials));
  t.default_gflops = in.non_negative_number("default_gflops");
  t.workspace_bytes = in.non_negative_int64("workspace_bytes");
  {
    ObjectReader st(in.field("stats"), "tuning.stats", where);
    st.reject_unknown({"min_seconds", "median_seconds", "spread", "count"});
    t.stats.min_seconds = st.non_negative_number("min_seconds");
    t.stats.median_seconds = st.non_negative_number("median_seconds");
    t.stats.spread = st.non_negative_number("spread");
    t.stats.count = st.integer("count");
    if (t.stats.count < 0) fail(where, fmt::format("tuning.stats.count: {} must be >= 0", t.stats.count));
  }
  {
    ObjectReader p(in.field("provenance"), "tuning.provenance", where);
    if (version >= 4)
      p.reject_unknown({"cpu", "l1_bytes", "l2_bytes", "l3_bytes", "halide", "threads", "micro_batch", "variant",
                        "timing_method"});
    else
      p.reject_unknown({"cpu", "l1_bytes", "l2_bytes", "l3_bytes", "halide", "threads", "micro_batch", "variant"});
    t.provenance.cpu = p.str("cpu");
    t.provenance.l1_bytes = p.non_negative_int64("l1_bytes");
    t.provenance.l2_bytes = p.non_negative_int64("l2_bytes");
    t.provenance.l3_bytes = p.non_negative_int64("l3_bytes");
    t.provenance.halide = p.str("halide");
    t.provenance.threads = p.integer("threads");
    if (t.provenance.threads < 1) fail(where, fmt::format("tuning.provenance.threads: {} must be >= 1", t.provenance.threads));
    t.provenance.micro_batch = p.non_negative_int64("micro_batch");
    t.provenance.variant = p.one_of("variant", kVariants);
    t.provenance.timing_method = version >= 4 ? p.integer("timing_method") : 1;
    if (t.provenance.timing_method < 1)
      fail(where, fmt::format("tuning.provenance.timing_method: {} must be >= 1", t.provenance.timing_method));
  }
  return t;
}

// The record's own target decides what is legal (e.g. MR=64 on AVX-512 only).
TargetInfo record_target(const ScheduleKey& k, const std::string& where) {
  try {
    return target_info(k.target);
  } catch (const Error& e) {
    fail(where, std::string("key.") + e.what());
  }
}

// ---- files -----------------------------------------------------------------------

bool blank(const std::string& line) {
  return line.find_first_not_of(" \t\r") == std::string::npos;
}

}  // namespace

bool ScheduleKey::operator==(const ScheduleKey& o) const {
  return descriptor == o.descriptor && pass == o.pass && target == o.target &&
         generator_hash == o.generator_hash;
}

bool TrainingKey::operator==(const TrainingKey& o) const {
  return model_sha256 == o.model_sha256 && batch == o.batch && target == o.target;
}

bool TrainingRecord::operator==(const TrainingRecord& o) const {
  return key == o.key && micro_batch == o.micro_batch && parallel_modes == o.parallel_modes && gflops == o.gflops &&
         note == o.note && kind == o.kind && tuning == o.tuning;
}

bool Provenance::operator==(const Provenance& o) const {
  return cpu == o.cpu && l1_bytes == o.l1_bytes && l2_bytes == o.l2_bytes && l3_bytes == o.l3_bytes &&
         halide == o.halide && threads == o.threads && micro_batch == o.micro_batch && variant == o.variant &&
         timing_method == o.timing_method;
}

bool TimingStats::operator==(const TimingStats& o) const {
  return min_seconds == o.min_seconds && median_seconds == o.median_seconds && spread == o.spread && count == o.count;
}

bool TuningInfo::operator==(const TuningInfo& o) const {
  return present == o.present && trial == o.trial && status == o.status && seed == o.seed && search == o.search &&
         trials == o.trials && default_gflops == o.default_gflops && workspace_bytes == o.workspace_bytes &&
         stats == o.stats && provenance == o.provenance;
}

bool ScheduleRecord::operator==(const ScheduleRecord& o) const {
  return key == o.key && schedule == o.schedule && source == o.source && gflops == o.gflops &&
         note == o.note && kind == o.kind && tuning == o.tuning;
}

std::string to_json_line(const ScheduleRecord& r) {
  if (r.kind == RecordKind::Trial && !r.tuning.present)
    throw Error(ExitCode::BadRecord, "record: a trial line needs its tuning object");
  return fmt::format(
      R"({{"format":"{}","version":{},"kind":"{}","key":{},"schedule":{},"source":{},"gflops":{},"note":{}{}}})",
      kFormat, kRecordVersion, r.kind == RecordKind::Trial ? "trial" : "schedule", key_json(r.key),
      schedule_json(r.schedule), quote(r.source, "source"), number(r.gflops), quote(r.note, "note"),
      r.tuning.present ? R"(,"tuning":)" + tuning_json(r.tuning) : std::string());
}

namespace {

bool is_training_line(const json& j) {
  if (!j.is_object()) return false;
  const auto kind = j.find("kind");
  return kind != j.end() && kind->is_string() && contains(kTrainingKinds, kind->get<std::string>());
}

ScheduleRecord schedule_from_json(const json& j, const std::string& where) {
  if (is_training_line(j))
    fail(where, fmt::format("a \"{}\" line where a schedule record was expected", j["kind"].get<std::string>()));
  const ObjectReader top(j, "", where);
  const int version = check_format_and_version(top, where, kRecordVersion);
  if (version >= 3) {
    top.reject_unknown({"format", "version", "kind", "key", "schedule", "source", "gflops", "note", "tuning"});
  } else {
    top.reject_unknown({"format", "version", "key", "schedule", "source", "gflops", "note"});
  }

  ScheduleRecord r;
  if (version >= 3) r.kind = top.one_of("kind", kKinds) == "trial" ? RecordKind::Trial : RecordKind::Schedule;
  r.key = read_key(top.field("key"), where);
  const TargetInfo target = record_target(r.key, where);
  r.schedule = read_schedule(top.field("schedule"), schedule_space(target), version, where);
  r.source = top.one_of("source", kSources);
  r.gflops = top.non_negative_number("gflops");
  r.note = top.str("note");
  if (version >= 3 && (r.kind == RecordKind::Trial || j.contains("tuning")))
    r.tuning = read_tuning(top.field("tuning"), r.kind, version, where);
  try {
    validate(r.schedule, target);
    if (r.key.pass != "bwd_weights") validate_forward_strategy(r.schedule);
  } catch (const Error& e) {
    fail(where, e.what());
  }
  return r;
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

TrainingRecord training_from_json(const json& j, const std::string& where) {
  const ObjectReader top(j, "", where);
  const int version = check_format_and_version(top, where, kNewestReadableVersion);
  const std::string kind = top.str("kind");
  if (!contains(kTrainingKinds, kind))
    fail(where, fmt::format("kind: \"{}\" where a training record (training, training_trial) was expected", kind));
  if (version < kTrainingRecordVersion)
    fail(where, fmt::format("kind \"{}\" needs version {} or later, the line says {}", kind, kTrainingRecordVersion,
                            version));
  top.reject_unknown({"format", "version", "kind", "key", "config", "gflops", "note", "tuning"});
  TrainingRecord r;
  r.kind = kind == "training_trial" ? RecordKind::Trial : RecordKind::Schedule;
  {
    ObjectReader k(top.field("key"), "key", where);
    k.reject_unknown({"model_sha256", "batch", "target"});
    r.key.model_sha256 = k.str("model_sha256");
    if (!is_sha256_hex(r.key.model_sha256))
      fail(where, fmt::format("key.model_sha256: \"{}\" is not 64 lowercase hex digits", r.key.model_sha256));
    r.key.batch = k.non_negative_int64("batch");
    if (r.key.batch < 1) fail(where, "key.batch: must be >= 1");
    r.key.target = k.non_empty_string("target");
    try {
      target_info(r.key.target);
    } catch (const Error& e) {
      fail(where, std::string("key.") + e.what());
    }
  }
  {
    ObjectReader c(top.field("config"), "config", where);
    c.reject_unknown({"micro_batch", "parallel_modes"});
    r.micro_batch = c.non_negative_int64("micro_batch");
    if (r.micro_batch < 1 || r.micro_batch > r.key.batch)
      fail(where, fmt::format("config.micro_batch: {} is not in 1..{} (the key's batch)", r.micro_batch, r.key.batch));
    const json& modes = c.field("parallel_modes");
    if (!modes.is_object())
      fail(where, fmt::format("config.parallel_modes: expected an object, got {}", what_is(modes)));
    ObjectReader m(modes, "config.parallel_modes", where);
    for (const auto& item : modes.items()) {
      if (item.key().empty()) fail(where, "config.parallel_modes: a node name must not be empty");
      r.parallel_modes[item.key()] = m.one_of(item.key(), kParallelModes);
    }
  }
  r.gflops = top.non_negative_number("gflops");
  r.note = top.str("note");
  r.tuning = read_tuning(top.field("tuning"), r.kind, version, where);
  return r;
}

}  // namespace

ScheduleRecord parse_record_line(const std::string& line, const std::string& where) {
  return schedule_from_json(parse_json(line, where), where);
}

TrainingRecord parse_training_record_line(const std::string& line, const std::string& where) {
  return training_from_json(parse_json(line, where), where);
}

std::string to_json_line(const TrainingRecord& r) {
  if (!r.tuning.present) throw Error(ExitCode::BadRecord, "record: a training line needs its tuning object");
  std::string modes;
  for (const auto& [node, mode] : r.parallel_modes)
    modes += fmt::format("{}{}:{}", modes.empty() ? "" : ",", quote(node, "config.parallel_modes"),
                         quote(mode, "config.parallel_modes"));
  return fmt::format(
      R"({{"format":"{}","version":{},"kind":"{}","key":{{"model_sha256":{},"batch":{},"target":{}}},)"
      R"("config":{{"micro_batch":{},"parallel_modes":{{{}}}}},"gflops":{},"note":{},"tuning":{}}})",
      kFormat, kTrainingRecordVersion, r.kind == RecordKind::Trial ? "training_trial" : "training",
      quote(r.key.model_sha256, "key.model_sha256"), r.key.batch, quote(r.key.target, "key.target"), r.micro_batch,
      modes, number(r.gflops), quote(r.note, "note"), tuning_json(r.tuning));
}

std::vector<ScheduleRecord> read_records(const std::string& path, int64_t* torn_tail,
                                         std::vector<TrainingRecord>* training) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error(path, "cannot read", errno);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw io_error(path, "read error", errno);
  if (torn_tail) *torn_tail = -1;
  std::vector<ScheduleRecord> records;
  // Every line is checked, whichever list it goes to.
  auto take = [&](const std::string& line, const std::string& where) {
    const json j = parse_json(line, where);
    if (!is_training_line(j)) {
      records.push_back(schedule_from_json(j, where));
      return;
    }
    TrainingRecord t = training_from_json(j, where);
    if (training) training->push_back(std::move(t));
  };
  size_t begin = 0;
  for (int n = 1; begin < text.size(); ++n) {
    const size_t end = text.find('\n', begin);
    const std::string line = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
    const std::string where = fmt::format("{}:{}", path, n);
    if (end == std::string::npos && !blank(line)) {
      // The last line has no newline: whole if it parses, else a write cut short.
      try {
        take(line, where);
      } catch (const Error& e) {
        // Whole JSON that convgen refuses is a bad record, never a torn write.
        if (json::accept(line)) throw;
        if (!torn_tail) {
          throw Error(ExitCode::BadRecord,
                      fmt::format("{} (the last line has no newline: a write cut short? `convgen tune` on this file "
                                  "removes it, or delete the line)",
                                  e.what()));
        }
        *torn_tail = static_cast<int64_t>(begin);
      }
      break;
    }
    if (!blank(line)) take(line, where);
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return records;
}

void write_records(const std::string& path, const std::vector<ScheduleRecord>& records,
                   const std::vector<TrainingRecord>& training) {
  // Build and re-read every line before touching the disk: never write a file that
  // read_records would reject.
  std::string text;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string line = to_json_line(records[i]);
    parse_record_line(line, fmt::format("{}: record {}", path, i + 1));
    text += line;
    text += '\n';
  }
  for (std::size_t i = 0; i < training.size(); ++i) {
    const std::string line = to_json_line(training[i]);
    parse_training_record_line(line, fmt::format("{}: training record {}", path, i + 1));
    text += line;
    text += '\n';
  }
  write_file_durably(path, text);
}

const ScheduleRecord* find_record(const std::vector<ScheduleRecord>& records, const ScheduleKey& key) {
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->kind == RecordKind::Schedule && it->key == key) return &*it;
  }
  return nullptr;
}

const TrainingRecord* find_training_record(const std::vector<TrainingRecord>& records, const TrainingKey& key) {
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    if (it->kind == RecordKind::Schedule && it->key == key) return &*it;
  }
  return nullptr;
}

}  // namespace convgen
