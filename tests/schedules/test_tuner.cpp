// The tuner without the compiler (schedules/tune/): its space, search, timing rule,
// journal and per-key loop, driven by a stub evaluator whose "timings" are a fixed
// function of the schedule, so every run is reproducible.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "schedules/build_info.h"
#include "schedules/conv_descriptor.h"
#include "schedules/errors.h"
#include "schedules/schedule_records.h"
#include "schedules/schedule_selection.h"
#include "schedules/tune/search.h"
#include "schedules/tune/timing_rule.h"
#include "schedules/tune/tune_journal.h"
#include "schedules/tune/tuner.h"
#include "schedules/tune/tuning_space.h"
#include "tests/common/temp_dir.h"

using namespace convgen;
using convgen::test::TempDir;

namespace {

const char* kLayer = "mb8ic64ih28oc128oh28kh3ph1";

TargetInfo avx512() { return target_info("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41"); }

// A synthetic landscape, independent of the search's prior: a smooth bowl over the
// fields (best at 48x6, no reduction blocks, the image slab, no channel blocks) times a
// hashed ripple of +-5%, so there is structure to find and repeats are noise-free.
double landscape(const TuningSpace& space, const ConvSchedule& raw, const ConvSchedule&) {
  const ConvSchedule s = space.normalise(raw);
  const std::string id = describe(s);
  uint64_t h = 1469598103934665603ull;
  for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  const double bowl = 1.0 + 0.15 * std::abs(s.mr / 16 - 3) + 0.06 * std::abs(s.nr - 6) + 0.2 * (s.kc != 0) +
                      0.1 * (s.pack_input != PackInput::Image) + 0.1 * (s.mc != 0) + 0.05 * (s.nc != 0);
  return 1e-3 * bowl * (0.95 + 0.1 * double(h % 1000) / 1000.0);
}

class StubEvaluator : public CandidateEvaluator {
 public:
  StubEvaluator(const TuningSpace& space, ConvSchedule def) : space_(space), def_(space.normalise(def)) {}
  std::vector<std::string> evaluated;
  std::string wrong;        // describe() of a candidate the check finds wrong
  int kill_at = -1;         // SIGKILL this process at that evaluation (after the ones before it were journaled)
  bool retime_equal = false;  // every finalist re-times as the default
  std::string slow_in_search;  // describe() of a candidate whose search timing met a slow phase (2x)

  std::vector<std::string> checked_only;  // check() calls: never timed
  CandidateResult check(const ConvSchedule& s) override {
    checked_only.push_back(describe(s));
    return verdict(s);
  }
  CandidateResult evaluate(const ConvSchedule& s, double) override {
    if (static_cast<int>(evaluated.size()) == kill_at) ::kill(::getpid(), SIGKILL);
    evaluated.push_back(describe(s));
    CandidateResult r = verdict(s);
    const double t = seconds(s) * (describe(s) == slow_in_search ? 2.0 : 1.0);
    if (r.status == "ok") r.stats = summarise({t, t * 1.001, t * 1.002});
    return r;
  }
  // The bit-exact check's outcome: wrong for `wrong`, ok otherwise.
  CandidateResult verdict(const ConvSchedule& s) const {
    CandidateResult r;
    if (describe(s) == wrong) {
      r.status = "wrong";
      r.error = "output element 3 is 1 where the reference gives 2";
    }
    return r;
  }
  std::vector<TimingStats> retime_interleaved(const std::vector<ConvSchedule>& schedules, int rounds) override {
    std::vector<TimingStats> out;
    for (const ConvSchedule& s : schedules) {
      const double t = retime_equal ? seconds(def_) : seconds(s);
      out.push_back(summarise(std::vector<double>(static_cast<size_t>(rounds), t)));
    }
    return out;
  }
  double flops() const override { return 1e9; }
  double seconds(const ConvSchedule& s) const { return landscape(space_, s, def_); }

 private:
  const TuningSpace& space_;
  ConvSchedule def_;
};

struct Setup {
  ConvDescriptor d = parse_descriptor(kLayer);
  TargetInfo t = avx512();
  TuningSpace space{d, "fwd", t, Parallel::None};
  ConvSchedule def = space.normalise(analytic_schedule(d, t));
  TuneKeyRequest request(int trials, uint64_t seed = 1) const {
    TuneKeyRequest rq;
    rq.key = {d.normalised(), "fwd", t.target, CONVGEN_GENERATOR_HASH};
    rq.default_schedule = def;
    rq.provenance.cpu = "test CPU";
    rq.provenance.halide = "14.0.0";
    rq.provenance.variant = "none";
    rq.search.seed = seed;
    rq.max_trials = trials;
    return rq;
  }
};

std::vector<std::string> trial_schedules(const std::string& path) {
  std::vector<std::string> out;
  for (const ScheduleRecord& r : read_records(path))
    if (r.kind == RecordKind::Trial) out.push_back(describe(r.schedule));
  return out;
}

ScheduleRecord sample_trial() {
  ScheduleRecord r;
  r.kind = RecordKind::Trial;
  r.key = {"mb1ic64ih56oc64oh56kh3ph1", "bwd_weights", avx512().target, "abc123"};
  r.schedule.mr = 48;
  r.schedule.nr = 8;
  r.schedule.partitions = 4;
  r.source = "tuned";
  r.gflops = 201.5;
  r.note = "";
  r.tuning.present = true;
  r.tuning.trial = 7;
  r.tuning.status = "ok";
  r.tuning.seed = 42;
  r.tuning.search = "guided";
  r.tuning.workspace_bytes = 123456;
  r.tuning.stats = {0.0012, 0.00125, 0.02, 5};
  r.tuning.provenance = {"AMD EPYC 9R45", 49152, 1048576, 33554432, "14.0.0", 1, 0, "none"};
  return r;
}

}  // namespace

TEST_CASE("records version 5: trial and tuned lines read back as written, byte for byte", "[tune][records]") {
  const ScheduleRecord trial = sample_trial();
  const std::string line = to_json_line(trial);
  CHECK(line.find(R"("version":5,"kind":"trial")") != std::string::npos);
  CHECK(line.find(R"("variant":"none","timing_method":3})") != std::string::npos);
  const ScheduleRecord back = parse_record_line(line, "t:1");
  CHECK(back == trial);
  CHECK(to_json_line(back) == line);

  ScheduleRecord tuned = trial;
  tuned.kind = RecordKind::Schedule;
  tuned.tuning.trial = -1;
  tuned.tuning.trials = 64;
  tuned.tuning.default_gflops = 180.25;
  CHECK(parse_record_line(to_json_line(tuned), "t:2") == tuned);

  // Strict: the kind/trial pairing, statuses and provenance fields are checked.
  auto bad = [](std::string text, const std::string& from, const std::string& to, const std::string& fragment) {
    text.replace(text.find(from), from.size(), to);
    try {
      parse_record_line(text, "f.jsonl:3");
      FAIL("accepted: " << text);
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::BadRecord);
      CHECK_THAT(e.what(), Catch::Contains("f.jsonl:3") && Catch::Contains(fragment));
    }
  };
  bad(line, R"("trial":7)", R"("trial":-1)", "tuning.trial");
  bad(line, R"("status":"ok")", R"("status":"fast")", "tuning.status");
  bad(line, R"("threads":1)", R"("threads":0)", "tuning.provenance.threads");
  bad(line, R"("kind":"trial")", R"("kind":"guess")", "kind");
  bad(line, R"(,"tuning":{)", R"(,"tuned":{)", "unknown field \"tuned\"");
}

TEST_CASE("a version-3 trial reads as timing method 1 and is never replayed by today's tuner", "[tune][records]") {
  // Version 3 journals were timed on tensors at a 16-byte offset: their times are not
  // comparable with today's aligned ones, so a resumed run measures those schedules again.
  // (Version 3 had no output_stores either: ordinary stores.)
  const std::string stores = R"(,"output_stores":"cached")";
  std::string v3 = to_json_line(sample_trial());
  v3.replace(v3.find(R"("version":5)"), 11, R"("version":3)");
  v3.replace(v3.find(R"(,"timing_method":3)"), 18, "");
  v3.replace(v3.find(stores), stores.size(), "");
  const ScheduleRecord old = parse_record_line(v3, "old.jsonl:1");
  CHECK(old.tuning.provenance.timing_method == 1);
  CHECK(old.schedule == sample_trial().schedule);
  TempDir dir;
  const std::string path = (dir.path / "old.jsonl").string();
  std::ofstream(path) << v3 << "\n";
  TuneJournal journal(path);
  Provenance now = sample_trial().tuning.provenance;
  CHECK(now.timing_method == kTimingMethod);
  CHECK(journal.find_trial(old.key, old.schedule, now) == nullptr);
  now.timing_method = 1;
  CHECK(journal.find_trial(old.key, old.schedule, now) != nullptr);
  // A version-3 line that names a timing method is malformed.
  std::string bad = to_json_line(sample_trial());
  bad.replace(bad.find(R"("version":5)"), 11, R"("version":3)");
  bad.replace(bad.find(stores), stores.size(), "");
  CHECK_THROWS_WITH(parse_record_line(bad, "old.jsonl:2"), Catch::Contains("timing_method"));
}

TEST_CASE("a trial line is never applied; a record of another target or generator is refused, and said",
          "[tune][records]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  const ConvDescriptor d = parse_descriptor(kLayer);
  const TargetInfo t = avx512();
  ScheduleRecord trial = sample_trial();
  trial.key = {d.normalised(), "fwd", t.target, CONVGEN_GENERATOR_HASH};
  trial.schedule.partitions = 1;
  write_records(path, {trial});
  std::vector<std::string> why;
  CHECK(select_schedule(d, "fwd", t, path, &why).source == "analytic default");

  ScheduleRecord other = trial;
  other.kind = RecordKind::Schedule;
  other.tuning.trial = -1;
  other.key.target = "x86-64-linux-avx512_skylake-avx2-fma";
  ScheduleRecord stale = other;
  stale.key.target = t.target;
  stale.key.generator_hash = "0123456789abcdef";
  write_records(path, {other, stale});
  why.clear();
  CHECK(select_schedule(d, "fwd", t, path, &why).source == "analytic default");
  std::string all;
  for (const auto& w : why) all += w + "\n";
  CHECK_THAT(all, Catch::Contains("measured for target") && Catch::Contains("measured for generator 0123456789ab"));

  // Matching key, measured elsewhere: applied, and --verbose says where it was measured.
  ScheduleRecord good = stale;
  good.key.generator_hash = CONVGEN_GENERATOR_HASH;
  write_records(path, {good});
  why.clear();
  CHECK(select_schedule(d, "fwd", t, path, &why).schedule == good.schedule);
  all.clear();
  for (const auto& w : why) all += w + "\n";
  CHECK_THAT(all, Catch::Contains("measured on AMD EPYC 9R45"));
}

TEST_CASE("a torn last line: consumers refuse it by name, the journal cuts it off", "[tune][journal]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  const std::string whole = to_json_line(sample_trial());
  {
    std::ofstream out(path, std::ios::binary);
    out << whole << "\n" << whole.substr(0, whole.size() / 2);
  }
  try {
    read_records(path);
    FAIL("a torn line was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::BadRecord);
    CHECK_THAT(e.what(), Catch::Contains("r.jsonl:2") && Catch::Contains("no newline"));
  }
  {
    TuneJournal journal(path);
    CHECK(journal.records().size() == 1);
    CHECK(journal.repaired_bytes() == static_cast<int64_t>(whole.size() / 2));
  }
  CHECK(read_records(path).size() == 1);
  CHECK(std::filesystem::file_size(path) == whole.size() + 1);
}

TEST_CASE("a second tuner on the same records file is locked out", "[tune][journal]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  TuneJournal first(path);
  try {
    TuneJournal second(path);
    FAIL("two journals on one file");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::Busy);
    CHECK_THAT(e.what(), Catch::Contains("r.jsonl") && Catch::Contains("another convgen tune"));
  }
}

TEST_CASE("the space: normal forms are fixed points, distinct, legal; neighbours are one move away", "[tune][space]") {
  const TargetInfo t = avx512();
  for (const char* text : {kLayer, "mb8ic256ih14oc256oh14kh3ph1", "g32mb8ic32ih56oc32oh56kh3ph1",
                           "mb8ic1024ih14oc256oh14kh1", "mb8ic64ih56oc128oh28kh3sh2ph1"}) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
      CAPTURE(text, pass);
      const TuningSpace space(d, pass, t, Parallel::None);
      const auto& all = space.all();
      REQUIRE(all.size() > 10);
      std::set<std::string> ids;
      for (const ConvSchedule& s : all) {
        CHECK(space.normalise(s) == s);
        ids.insert(describe(s));
        CHECK_NOTHROW(validate(s, t));
      }
      const ConvSchedule def = space.normalise(analytic_schedule_for_pass(d, pass, t));
      CHECK(ids.count(describe(def)) == 1);  // the default is in the space
      for (const ConvSchedule& n : space.neighbours(def)) {
        CHECK(n != def);
        CHECK(ids.count(describe(n)) == 1);
      }
    }
  }
}

TEST_CASE("the space: the reduction's block and partitions reach every value in one move", "[tune][space]") {
  // 1x1 512->128 backward-weights: items of 1, 2, 4, 8 rows or 1, 2, 4, 8 images, and the
  // default's 5 rows; the default is at 5 rows, so adjacency alone would reach 4 and 8 only.
  const TuningSpace space(parse_descriptor("mb8ic512ih28oc128oh28kh1"), "bwd_weights", avx512(), Parallel::None);
  const ConvSchedule def = space.normalise(analytic_schedule_for_pass(parse_descriptor("mb8ic512ih28oc128oh28kh1"),
                                                                      "bwd_weights", avx512()));
  // The values of the default's strategy (gemm); gemm_input_lanes, also in this layer's
  // space, counts items across images and is one strategy move away (below).
  std::set<int> kcs, partitions;
  for (const ConvSchedule& s : space.all())
    if (s.strategy == def.strategy) kcs.insert(s.kc), partitions.insert(s.partitions);
  REQUIRE(kcs.size() >= 8);
  const std::vector<ConvSchedule> moves = space.neighbours(def);
  CHECK(std::any_of(moves.begin(), moves.end(), [](const ConvSchedule& n) { return n.strategy == Strategy::GemmInputLanes; }));
  std::set<int> kc_moves = {def.kc}, partition_moves = {def.partitions};
  for (const ConvSchedule& n : space.neighbours(def)) {
    ConvSchedule back = n;
    back.kc = def.kc;
    if (space.normalise(back) == def) kc_moves.insert(n.kc);
    back = n;
    back.partitions = def.partitions;
    if (space.normalise(back) == def) partition_moves.insert(n.partitions);
  }
  CHECK(kc_moves == kcs);
  CHECK(partition_moves == partitions);
}

TEST_CASE("the space: a register tile reshapes to the listed NR nearest its accumulator count", "[tune][space]") {
  // 2 x 14 (28 accumulators) on 32 registers: 1 x 16 (the widest listed), 3 x 10 (9.33:
  // 10 is the nearest listed, 9 is not listed for forward passes), 4 x 7.
  const ConvDescriptor d = parse_descriptor("mb8ic256ih56oc256oh56kh3ph1");
  const TuningSpace space(d, "fwd", avx512(), Parallel::None);
  ConvSchedule from = space.normalise(analytic_schedule_for_pass(d, "fwd", avx512()));
  REQUIRE(from.mr == 32);
  REQUIRE(from.nr == 14);
  // Tiles of another MR one move away (only MR moves, which keep NR 14, and reshapes
  // change MR).
  std::set<std::string> tiles;
  for (const ConvSchedule& n : space.neighbours(from))
    if (n.mr != from.mr) tiles.insert(std::to_string(n.mr) + "x" + std::to_string(n.nr));
  CHECK(tiles == std::set<std::string>{"16x14", "16x16", "48x14", "48x10", "64x7"});
  // 16 registers: NR stays within 1..8.
  const TargetInfo avx2 = target_info("x86-64-linux-avx-avx2-f16c-fma-sse41");
  const TuningSpace narrow(d, "fwd", avx2, Parallel::None);
  for (const ConvSchedule& n : narrow.neighbours(narrow.normalise(analytic_schedule_for_pass(d, "fwd", avx2))))
    CHECK(n.nr <= 8);
}

TEST_CASE("the space: output stores are searched where the output may outgrow the cache", "[tune][space]") {
  auto searched = [](const char* layer, const char* pass) {
    const TuningSpace space(parse_descriptor(layer), pass, avx512(), Parallel::None);
    std::set<OutputStores> seen;
    for (const ConvSchedule& s : space.all()) seen.insert(s.output_stores);
    return seen.size() == 2;
  };
  // A third of the L3 the row assumes (16 MiB) and more: the stem's 12 MiB, VGG conv1_1.
  CHECK(searched("mb8ic3ih224oc32oh112kh3sh2ph1", "fwd"));
  CHECK(searched("mb8ic3ih224oc64kh3ph1", "fwd"));
  CHECK(searched("mb8ic256ih56oc64kh1", "bwd_data"));
  // Small outputs, and backward-weights whatever its size, have ordinary stores only.
  CHECK_FALSE(searched("mb8ic256ih14oc256kh3ph1", "fwd"));
  CHECK_FALSE(searched("mb8ic3ih224oc64kh3ph1", "bwd_weights"));
  // A move flips them, and the default's value is in the space.
  const ConvDescriptor d = parse_descriptor("mb8ic3ih224oc64kh3ph1");
  const TuningSpace space(d, "fwd", avx512(), Parallel::None);
  const ConvSchedule def = space.normalise(analytic_schedule_for_pass(d, "fwd", avx512()));
  CHECK(def.output_stores == OutputStores::Streaming);
  bool flipped = false;
  for (const ConvSchedule& n : space.neighbours(def)) {
    ConvSchedule back = n;
    back.output_stores = def.output_stores;
    flipped |= n.output_stores == OutputStores::Cached && back == def;
  }
  CHECK(flipped);
}

TEST_CASE("the search: default first, no repeats, a function of the seed and the results", "[tune][search]") {
  Setup s;
  StubEvaluator stub(s.space, s.def);
  auto run = [&](uint64_t seed, const std::string& method) {
    SearchOptions o;
    o.seed = seed;
    o.method = method;
    Search search(s.space, s.def, o);
    std::vector<std::string> seq;
    for (int i = 0; i < 40; ++i) {
      auto c = search.next();
      REQUIRE(c);
      seq.push_back(describe(*c));
      search.report(*c, stub.seconds(*c));
    }
    return seq;
  };
  for (const char* method : {"guided", "random"}) {
    const auto a = run(1, method), b = run(1, method), c = run(2, method);
    CHECK(a.front() == describe(s.def));
    CHECK(std::set<std::string>(a.begin(), a.end()).size() == a.size());
    CHECK(a == b);
    CHECK(a != c);
  }
}

TEST_CASE("guided search beats random search on a smooth landscape at equal trials", "[tune][search]") {
  Setup s;
  StubEvaluator stub(s.space, s.def);
  auto best_after = [&](const std::string& method, uint64_t seed, int trials) {
    SearchOptions o;
    o.seed = seed;
    o.method = method;
    Search search(s.space, s.def, o);
    double best = 1e9;
    for (int i = 0; i < trials; ++i) {
      auto c = search.next();
      REQUIRE(c);
      best = std::min(best, stub.seconds(*c));
      search.report(*c, stub.seconds(*c));
    }
    return best;
  };
  double guided = 0, random = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    guided += std::log(best_after("guided", seed, 32));
    random += std::log(best_after("random", seed, 32));
  }
  CHECK(guided < random);
}

TEST_CASE("kill -9 mid-run, then the same command resumes: the same trials, none repeated", "[tune][journal]") {
  Setup s;
  TempDir dir;
  const std::string reference = (dir.path / "reference.jsonl").string();
  const std::string resumed = (dir.path / "resumed.jsonl").string();
  {
    StubEvaluator stub(s.space, s.def);
    TuneJournal journal(reference);
    tune_key(s.request(24), s.space, stub, journal);
  }
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    StubEvaluator stub(s.space, s.def);
    stub.kill_at = 9;  // nine trials journaled, then SIGKILL mid-trial
    TuneJournal journal(resumed);
    tune_key(s.request(24), s.space, stub, journal);
    ::_exit(0);  // not reached
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto before = trial_schedules(resumed);
  CHECK(before.size() == 9);

  StubEvaluator stub(s.space, s.def);
  TuneJournal journal(resumed);
  const TuneKeyOutcome out = tune_key(s.request(24), s.space, stub, journal);
  CHECK(out.replayed == 9);
  CHECK(stub.evaluated.size() == 15);
  for (const std::string& id : stub.evaluated)
    CHECK(std::find(before.begin(), before.end(), id) == before.end());
  CHECK(trial_schedules(resumed) == trial_schedules(reference));
  CHECK(journal.find_tuned(s.request(24).key)->schedule == read_records(reference).back().schedule);

  // Once finished, the same command measures nothing.
  StubEvaluator again(s.space, s.def);
  const TuneKeyOutcome third = tune_key(s.request(24), s.space, again, journal);
  CHECK(third.skipped);
  CHECK(again.evaluated.empty());
}

TEST_CASE("a candidate that kills the tuner twice is journaled as failed, and the run gets past it",
          "[tune][journal]") {
  Setup s;
  TempDir dir;
  const std::string path = (dir.path / "crash.jsonl").string();
  // Dies at its 10th candidate, then a resumed run dies at that same candidate again.
  for (int kill_at : {9, 0}) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      StubEvaluator stub(s.space, s.def);
      stub.kill_at = kill_at;
      TuneJournal journal(path);
      tune_key(s.request(24), s.space, stub, journal);
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    REQUIRE(WIFSIGNALED(status));
  }
  StubEvaluator stub(s.space, s.def);
  TuneJournal journal(path);
  const TuneKeyOutcome out = tune_key(s.request(24), s.space, stub, journal);
  CHECK(out.failed == 1);
  CHECK(out.trials == 24);
  CHECK(stub.evaluated.size() == 14);  // trials 10-23; trial 9 is not run a third time
  int failed_lines = 0;
  for (const ScheduleRecord& r : journal.records())
    if (r.kind == RecordKind::Trial && r.tuning.status == "failed") {
      ++failed_lines;
      CHECK(r.tuning.trial == 9);
      CHECK_THAT(r.note, Catch::Contains("died twice"));
    }
  CHECK(failed_lines == 1);
  CHECK_FALSE(std::filesystem::exists(path + ".inflight"));
}

TEST_CASE("a whole last line without its newline is ended before the next append; bad JSON-valid lines stay errors",
          "[tune][journal]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  const std::string line = to_json_line(sample_trial());
  {
    std::ofstream out(path, std::ios::binary);
    out << line;  // no newline
  }
  {
    TuneJournal journal(path);
    CHECK(journal.repaired_bytes() == 0);
    journal.append(sample_trial());
  }
  CHECK(read_records(path).size() == 2);
  // Valid JSON that convgen refuses (a newer version) is not taken for a torn write.
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    std::string newer = line;
    newer.replace(newer.find(R"("version":5)"), 11, R"("version":9)");
    out << newer;
  }
  try {
    TuneJournal journal(path);
    FAIL("a newer record was cut off as torn");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::BadRecord);
    CHECK_THAT(e.what(), Catch::Contains("version 9"));
  }
}

TEST_CASE("a wrong candidate is journaled as such and never wins; noise keeps the default", "[tune][search]") {
  Setup s;
  TempDir dir;
  std::string fastest;
  {
    StubEvaluator stub(s.space, s.def);
    TuneJournal journal((dir.path / "a.jsonl").string());
    fastest = describe(tune_key(s.request(16), s.space, stub, journal).chosen.schedule);
  }
  REQUIRE(fastest != describe(s.def));
  StubEvaluator stub(s.space, s.def);
  stub.wrong = fastest;
  TuneJournal journal((dir.path / "b.jsonl").string());
  const TuneKeyOutcome out = tune_key(s.request(16), s.space, stub, journal);
  CHECK(out.wrong == 1);
  CHECK(describe(out.chosen.schedule) != fastest);
  bool journaled = false;
  for (const ScheduleRecord& r : journal.records())
    journaled |= r.kind == RecordKind::Trial && describe(r.schedule) == fastest && r.tuning.status == "wrong" &&
                 r.note.find("reference") != std::string::npos;
  CHECK(journaled);

  StubEvaluator level(s.space, s.def);
  level.retime_equal = true;
  TuneJournal flat((dir.path / "c.jsonl").string());
  const TuneKeyOutcome kept = tune_key(s.request(16), s.space, level, flat);
  CHECK_FALSE(kept.accepted);
  CHECK(kept.chosen.schedule == s.def);
  CHECK_THAT(kept.chosen.note, Catch::Contains("default kept"));
}

TEST_CASE("comparing schedules: every one checked, only correct ones re-timed beside the default, in order",
          "[tune][compare]") {
  Setup s;
  StubEvaluator stub(s.space, s.def);
  std::vector<ConvSchedule> schedules;
  for (const ConvSchedule& c : s.space.neighbours(s.def)) {
    schedules.push_back(c);
    if (schedules.size() == 3) break;
  }
  REQUIRE(schedules.size() == 3);
  stub.wrong = describe(s.space.normalise(schedules[1]));
  const Comparison c = compare_with_default(s.space, s.def, schedules, stub, 5);
  REQUIRE(c.schedules.size() == 3);
  CHECK(stub.checked_only.size() == 3);  // checked once each ...
  CHECK(stub.evaluated.empty());         // ... and timed only in the interleaved rounds
  CHECK(c.default_stats.count == 5);
  CHECK(c.default_stats.median_seconds == Approx(stub.seconds(s.def)));
  for (size_t i = 0; i < 3; ++i) {
    CHECK(c.schedules[i].schedule == s.space.normalise(schedules[i]));
    if (i == 1) {
      CHECK(c.schedules[i].check.status == "wrong");
      CHECK(c.schedules[i].retimed.count == 0);  // never timed
    } else {
      CHECK(c.schedules[i].check.status == "ok");
      CHECK(c.schedules[i].retimed.count == 5);
      CHECK(c.schedules[i].retimed.median_seconds == Approx(stub.seconds(schedules[i])));
    }
  }
}

TEST_CASE("the timing rule stops when the best runs agree, or early when clearly slower", "[tune][timing]") {
  int calls = 0;
  const std::vector<double> noisy = {1.0, 1.2, 1.1, 1.01, 1.02, 1.3};
  TimingRule rule;
  TimingStats st = time_until_stable([&] { return noisy[static_cast<size_t>(calls++)]; }, rule, 0);
  CHECK(calls == 5);  // 1.0, 1.01, 1.02: within 3%
  CHECK(st.min_seconds == 1.0);
  CHECK(st.count == 5);
  calls = 0;
  st = time_until_stable([&] { return 2.0 + 0.5 * (calls++ % 2); }, rule, 1.0);
  CHECK(calls == 3);  // twice the best so far: stopped at min_samples
  CHECK(beats_beyond_noise(summarise({0.90, 0.91, 0.92}), summarise({1.0, 1.01, 1.02})));
  CHECK_FALSE(beats_beyond_noise(summarise({0.97, 0.99, 1.01}), summarise({1.0, 1.05, 1.06})));
}

TEST_CASE("timing method 3: a candidate timed in a slow phase is scaled back by the default beside it",
          "[tune][timing]") {
  // The default took 1.0 s when the layer's tuning started and 1.25 s beside this
  // candidate (a slow phase): the candidate's 1.0 s is 0.8 s in the start's units.
  const TimingStats raw = summarise({1.0, 1.02, 1.01});
  const TimingStats st = relative_to_reference(raw, 1.0, 1.25);
  CHECK(st.min_seconds == Approx(0.8));
  CHECK(st.median_seconds == Approx(1.01 * 0.8));
  CHECK(st.spread == raw.spread);
  CHECK(st.count == raw.count);
  // No reference yet, or none beside: unchanged.
  CHECK(relative_to_reference(raw, 0, 1.25).min_seconds == raw.min_seconds);
  CHECK(relative_to_reference(raw, 1.0, 0).min_seconds == raw.min_seconds);
}

TEST_CASE("similar tuned layers seed the search, most similar first", "[tune][search]") {
  const TargetInfo t = avx512();
  auto tuned = [&](const char* desc, int mr) {
    ScheduleRecord r;
    r.key = {parse_descriptor(desc).normalised(), "fwd", t.target, CONVGEN_GENERATOR_HASH};
    r.schedule.mr = mr;
    r.source = "tuned";
    r.tuning.present = true;
    return r;
  };
  const std::vector<ScheduleRecord> records = {tuned("mb8ic64ih56oc64oh56kh3ph1", 16),
                                               tuned("mb8ic128ih28oc128oh28kh3ph1", 32),
                                               tuned("mb8ic128ih28oc128oh28kh1", 48)};
  const ScheduleKey key{parse_descriptor("mb8ic128ih28oc128oh28kh3ph1").normalised(), "fwd", t.target,
                        CONVGEN_GENERATOR_HASH};
  const auto seeds = similar_tuned_schedules(records, key);
  REQUIRE(seeds.size() == 1);  // itself and the 1x1 layer are not seeds
  CHECK(seeds[0].mr == 16);
}

TEST_CASE("a layer's winner under an earlier generator seeds its re-tune and is re-timed whatever its search timing",
          "[tune][search]") {
  Setup s;
  StubEvaluator probe(s.space, s.def);
  const ConvSchedule* best = &s.def;
  for (const ConvSchedule& c : s.space.all())
    if (probe.seconds(c) < probe.seconds(*best)) best = &c;
  const ConvSchedule winner = *best;
  REQUIRE(probe.seconds(winner) < 0.95 * probe.seconds(s.def));

  const ScheduleKey key = s.request(1).key;
  auto tuned_line = [&](const std::string& hash, const ConvSchedule& schedule, double gflops) {
    ScheduleRecord r;
    r.key = key;
    r.key.generator_hash = hash;
    r.schedule = schedule;
    r.source = "tuned";
    r.gflops = gflops;
    r.tuning.present = true;
    r.tuning.default_gflops = 100;
    return r;
  };
  // The latest line of another generator counts; this generator's own lines and a kept
  // default (its figure is the default's) give no seed.
  CHECK(previous_tuned_schedule({tuned_line("older", winner, 120)}, key) == winner);
  CHECK_FALSE(previous_tuned_schedule({tuned_line(key.generator_hash, winner, 120)}, key));
  CHECK_FALSE(previous_tuned_schedule({tuned_line("older", winner, 120), tuned_line("old", s.def, 100)}, key));
  ScheduleKey other_pass = key;
  other_pass.pass = "bwd_data";
  CHECK_FALSE(previous_tuned_schedule({tuned_line("older", winner, 120)}, other_pass));

  // Its search timing met a slow phase (2x, beyond the finalists' 10% window): as a plain
  // transfer seed it is dropped; as the earlier winner it is re-timed beside the default and wins.
  TempDir dir;
  auto run = [&](bool as_previous_winner, const char* file) {
    StubEvaluator stub(s.space, s.def);
    stub.slow_in_search = describe(winner);
    TuneJournal journal((dir.path / file).string());
    TuneKeyRequest rq = s.request(4);
    if (as_previous_winner) rq.previous_winner = winner;
    else rq.search.transfer = {winner};
    const TuneKeyOutcome out = tune_key(rq, s.space, stub, journal);
    CHECK(stub.evaluated.at(1) == describe(winner));  // trial 1: the seed
    return out;
  };
  CHECK(run(false, "seed.jsonl").chosen.schedule != winner);
  const TuneKeyOutcome kept = run(true, "previous.jsonl");
  CHECK(kept.accepted);
  CHECK(kept.chosen.schedule == winner);
  CHECK(kept.transfer_won);
}
