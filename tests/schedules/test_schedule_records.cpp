// Schedule records: JSON-lines round trips, strict reading, atomic writes, and the
// schedule data they rest on (target table, schedule space, validation).
#include <catch2/catch.hpp>

#include "tests/common/temp_dir.h"
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "schedules/conv_schedule.h"
#include "schedules/errors.h"
#include "schedules/schedule_records.h"

using namespace convgen;
namespace fs = std::filesystem;

namespace {

const char* const kAvx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";
const char* const kAvx512 = "x86-64-linux-avx512_skylake-avx2-fma";

// The example line of docs/schedules.md: the default schedule, analytic, unmeasured.
const std::string kGolden =
    R"({"format":"convgen-schedule","version":5,"kind":"schedule","key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none",)"
    R"("partitions":1,"output_stores":"cached"},"source":"analytic","gflops":0,"note":""})";

// The same record as version 4 wrote it: no "output_stores" (read as cached).
const std::string kGoldenVersion4 =
    R"({"format":"convgen-schedule","version":4,"kind":"schedule","key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none",)"
    R"("partitions":1},"source":"analytic","gflops":0,"note":""})";

// The same record as version 3 wrote it: a schedule line without tuning is version 4's
// but for the version (version 4 added only the tuning provenance's timing method).
const std::string kGoldenVersion3 =
    R"({"format":"convgen-schedule","version":3,"kind":"schedule","key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none",)"
    R"("partitions":1},"source":"analytic","gflops":0,"note":""})";

// The same record as version 2 wrote it (no "kind"): still read, as a schedule line.
const std::string kGoldenVersion2 =
    R"({"format":"convgen-schedule","version":2,"key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none",)"
    R"("partitions":1},"source":"analytic","gflops":0,"note":""})";

// The same record as version 1 wrote it (no "partitions"): still read, as partitions=1.
const std::string kGoldenVersion1 =
    R"({"format":"convgen-schedule","version":1,"key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none"},)"
    R"("source":"analytic","gflops":0,"note":""})";

ScheduleRecord golden_record() {
  ScheduleRecord r;
  r.key = {"mb1ic64ih56oc64oh56kh3ph1", "fwd", kAvx2, "abc123"};
  r.source = "analytic";
  return r;
}

// Temporary directories for this file's tests.
struct TempDir : convgen::test::TempDir {
  TempDir() : convgen::test::TempDir("convgen-records") {}
};

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Every value of every field of the target's space, each in one record of its own.
std::vector<ScheduleRecord> one_record_per_value(const std::string& target) {
  const ScheduleSpace space = schedule_space(target_info(target));
  std::vector<ScheduleRecord> out;
  auto add = [&](const std::function<void(ConvSchedule&)>& set) {
    ScheduleRecord r = golden_record();
    r.key.target = target;
    r.schedule.mr = space.mr.front();  // the default MR=24 is not legal on every target
    set(r.schedule);
    r.source = out.size() % 2 ? "tuned" : "analytic";
    r.gflops = out.size() * 12.5;
    r.note = "value " + std::to_string(out.size());
    out.push_back(r);
  };
  for (auto v : space.strategy)
    add([=](ConvSchedule& s) { s.strategy = v; });
  // gemm_input_lanes is a backward-weights tile: its record is a bwd_weights one.
  for (ScheduleRecord& r : out)
    if (r.schedule.strategy == Strategy::GemmInputLanes) r.key.pass = "bwd_weights";
  for (auto v : space.mr) add([=](ConvSchedule& s) { s.mr = v; });
  for (auto v : space.nr) add([=](ConvSchedule& s) { s.nr = v; });
  for (auto v : space.kc) add([=](ConvSchedule& s) { s.kc = v; });
  for (auto v : space.mc) add([=](ConvSchedule& s) { s.mc = v; });
  for (auto v : space.nc) add([=](ConvSchedule& s) { s.nc = v; });
  for (auto v : space.layout) add([=](ConvSchedule& s) { s.layout = v; });
  for (auto v : space.pack_input) add([=](ConvSchedule& s) { s.pack_input = v; });
  for (auto v : space.pack_weights) add([=](ConvSchedule& s) { s.pack_weights = v; });
  for (auto v : space.loop_order) add([=](ConvSchedule& s) { s.loop_order = v; });
  for (auto v : space.parallel) add([=](ConvSchedule& s) { s.parallel = v; });
  for (auto v : space.partitions) add([=](ConvSchedule& s) { s.partitions = v; });
  for (auto v : space.output_stores) add([=](ConvSchedule& s) { s.output_stores = v; });
  return out;
}

// Runs `f`, requires an Error with `code` whose message contains every needle.
void require_error(const std::function<void()>& f, ExitCode code, std::vector<std::string> needles) {
  try {
    f();
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == code);
    for (const auto& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
    return;
  }
  FAIL("no convgen::Error thrown");
}

void require_bad_line(const std::string& line, std::vector<std::string> needles) {
  INFO("line: " << line);
  needles.push_back("recs.jsonl:7: ");
  require_error([&] { parse_record_line(line, "recs.jsonl:7"); }, ExitCode::BadRecord, needles);
}

}  // namespace

TEST_CASE("the default record prints as the documented line", "[schedule_records]") {
  CHECK(to_json_line(golden_record()) == kGolden);
  CHECK(parse_record_line(kGolden, "golden") == golden_record());
  // Version 1 lines read as partitions=1, version 2 lines as schedule lines, version 4
  // and older as ordinary output stores; all are written back as version 5.
  CHECK(parse_record_line(kGoldenVersion4, "golden v4") == golden_record());
  CHECK(parse_record_line(kGoldenVersion3, "golden v3") == golden_record());
  CHECK(parse_record_line(kGoldenVersion1, "golden v1") == golden_record());
  CHECK(parse_record_line(kGoldenVersion2, "golden v2") == golden_record());
}

TEST_CASE("the same record always prints the same bytes", "[schedule_records]") {
  ScheduleRecord r = golden_record();
  r.gflops = 123.4;
  r.note = "tuned on \"zen3\"\tbox\n\xc3\xa9";
  const ScheduleRecord copy = r;
  CHECK(to_json_line(r) == to_json_line(copy));
  CHECK(to_json_line(r).find('\n') == std::string::npos);
  CHECK(parse_record_line(to_json_line(r), "x") == r);
}

TEST_CASE("every value of every field round-trips through a line", "[schedule_records]") {
  for (const std::string target : {kAvx2, kAvx512, "x86-64-linux-sse41"}) {
    for (const auto& r : one_record_per_value(target)) {
      const std::string line = to_json_line(r);
      INFO(line);
      CHECK(parse_record_line(line, "t:1") == r);
    }
  }
}

TEST_CASE("gflops with one decimal and other numbers round-trip", "[schedule_records]") {
  for (double g : {0.0, 0.1, 1.5, 99.9, 1234.5, 1e-7, 3e12}) {
    ScheduleRecord r = golden_record();
    r.gflops = g;
    CHECK(parse_record_line(to_json_line(r), "t:1").gflops == g);
  }
  ScheduleRecord r = golden_record();
  r.gflops = 0.5;
  CHECK_THAT(to_json_line(r), Catch::Contains(R"("gflops":0.5,)"));
}

TEST_CASE("records round-trip through a file", "[schedule_records]") {
  TempDir dir;
  const std::string path = (dir.path / "schedules.jsonl").string();
  std::vector<ScheduleRecord> all;
  for (const std::string target : {kAvx2, kAvx512}) {
    for (const auto& r : one_record_per_value(target)) all.push_back(r);
  }
  write_records(path, all);
  CHECK(read_records(path) == all);

  // Same records, same bytes.
  const std::string first = slurp(path);
  write_records(path, all);
  CHECK(slurp(path) == first);
  CHECK(first.back() == '\n');
}

TEST_CASE("read_records skips blank lines and names file and line in errors", "[schedule_records]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  {
    std::ofstream out(path);
    out << "\n" << kGolden << "\n   \n" << kGolden << "\r\n";
  }
  CHECK(read_records(path).size() == 2);

  {
    std::ofstream out(path);
    out << kGolden << "\n\n" << replaced(kGolden, R"("nr":4)", R"("nr":"4")") << "\n";
  }
  require_error([&] { read_records(path); }, ExitCode::BadRecord, {path + ":3: ", "schedule.nr"});
}

TEST_CASE("an unreadable records file is an Io error", "[schedule_records]") {
  TempDir dir;
  require_error([&] { read_records((dir.path / "missing.jsonl").string()); }, ExitCode::Io,
                {"missing.jsonl"});
}

TEST_CASE("find_record returns the last record with the key", "[schedule_records]") {
  ScheduleRecord a = golden_record();
  ScheduleRecord other = golden_record();
  other.key.pass = "bwd_data";
  ScheduleRecord b = golden_record();
  b.source = "tuned";
  b.schedule.nr = 6;
  const std::vector<ScheduleRecord> records = {a, other, b};

  const ScheduleRecord* hit = find_record(records, a.key);
  REQUIRE(hit == &records[2]);
  CHECK(find_record(records, other.key) == &records[1]);

  ScheduleKey unknown = a.key;
  unknown.generator_hash = "def456";
  CHECK(find_record(records, unknown) == nullptr);
  unknown = a.key;
  unknown.target = kAvx512;
  CHECK(find_record(records, unknown) == nullptr);
  CHECK(find_record({}, a.key) == nullptr);
}

TEST_CASE("strict reading: every malformed line is a BadRecord naming the field", "[schedule_records]") {
  SECTION("unknown fields") {
    require_bad_line(replaced(kGolden, R"("note":"")", R"("note":"","extra":1)"), {"unknown field", "\"extra\""});
    require_bad_line(replaced(kGolden, R"("mr":24)", R"("mr":24,"mystery":1)"), {"unknown field", "schedule.mystery"});
    require_bad_line(replaced(kGolden, R"("pass":"fwd")", R"("pass":"fwd","cpu":"zen3")"), {"unknown field", "key.cpu"});
  }
  SECTION("version and format") {
    require_bad_line(replaced(kGolden, R"("version":5)", R"("version":6)"), {"version 6", "reads versions 1 to 5"});
    require_bad_line(replaced(kGolden, R"("version":5)", R"("version":0)"), {"version 0", "reads versions 1 to 5"});
    // A newer version is reported as such even when it has new fields.
    require_bad_line(replaced(replaced(kGolden, R"("version":5)", R"("version":6)"), R"("note":"")",
                              R"("note":"","new":true)"),
                     {"version 6"});
    require_bad_line(replaced(kGolden, R"("version":5)", R"("version":"5")"), {"version", "expected an integer"});
    // Version 4 had no output_stores, version 2 no kind, version 1 no partitions either:
    // present there, unknown.
    require_bad_line(replaced(kGolden, R"("version":5)", R"("version":4)"), {"unknown field", "schedule.output_stores"});
    require_bad_line(replaced(kGolden, R"("version":5)", R"("version":2)"), {"unknown field", "\"kind\""});
    require_bad_line(replaced(kGoldenVersion2, R"("version":2)", R"("version":1)"),
                     {"unknown field", "schedule.partitions"});
    require_bad_line(replaced(kGolden, R"("kind":"schedule",)", ""), {"missing field", "\"kind\""});
    require_bad_line(replaced(kGolden, R"(,"partitions":1)", ""), {"missing field", "schedule.partitions"});
    require_bad_line(replaced(kGolden, R"(,"output_stores":"cached")", ""), {"missing field", "schedule.output_stores"});
    require_bad_line(replaced(kGolden, R"("output_stores":"cached")", R"("output_stores":"nontemporal")"),
                     {"output_stores", "nontemporal"});
    require_bad_line(replaced(kGolden, R"("partitions":1)", R"("partitions":0)"), {"partitions", "outside 1..64"});
    // A backward-weights tile in a forward record (the golden line's pass is fwd).
    require_bad_line(replaced(kGolden, R"("strategy":"gemm")", R"("strategy":"gemm_input_lanes")"),
                     {"gemm_input_lanes", "backward-weights tile"});
    require_bad_line(replaced(kGolden, "convgen-schedule", "convgen-tuning"), {"format", "convgen-tuning"});
  }
  SECTION("missing fields") {
    require_bad_line(replaced(kGolden, R"(,"note":"")", ""), {"missing field", "\"note\""});
    require_bad_line(replaced(kGolden, R"("nr":4,)", ""), {"missing field", "schedule.nr"});
    require_bad_line(replaced(kGolden, R"("generator_hash":"abc123")", R"("generator_hash":"")"),
                     {"key.generator_hash", "empty"});
    require_bad_line(replaced(kGolden, R"("format":"convgen-schedule",)", ""), {"missing field", "format"});
  }
  SECTION("wrong types") {
    require_bad_line(replaced(kGolden, R"("mr":24)", R"("mr":"24")"), {"schedule.mr", "expected an integer"});
    require_bad_line(replaced(kGolden, R"("mr":24)", R"("mr":24.0)"), {"schedule.mr", "expected an integer"});
    require_bad_line(replaced(kGolden, R"("kc":0)", R"("kc":99999999999)"), {"schedule.kc", "out of range"});
    require_bad_line(replaced(kGolden, R"("gflops":0)", R"("gflops":"fast")"), {"gflops", "expected a number"});
    require_bad_line(replaced(kGolden, R"("gflops":0)", R"("gflops":-1)"), {"gflops", ">= 0"});
    require_bad_line(replaced(kGolden, R"("note":"")", R"("note":null)"), {"note", "expected a string"});
    require_bad_line(replaced(kGolden, R"("pass":"fwd")", R"("pass":1)"), {"key.pass", "expected a string"});
    require_bad_line(R"({"format":"convgen-schedule","version":1,"key":[],"schedule":{},"source":"tuned","gflops":0,"note":""})",
                     {"key", "expected an object"});
    require_bad_line("[1,2]", {"expected an object"});
  }
  SECTION("bad enum values") {
    require_bad_line(replaced(kGolden, R"("pack_input":"image")", R"("pack_input":"tiles")"),
                     {"schedule.pack_input", "\"tiles\"", "none, image, rows, panel"});
    require_bad_line(replaced(kGolden, R"("strategy":"gemm")", R"("strategy":"GEMM")"), {"schedule.strategy"});
    require_bad_line(replaced(kGolden, R"("source":"analytic")", R"("source":"guessed")"), {"source", "guessed"});
  }
  SECTION("bad pass") {
    require_bad_line(replaced(kGolden, R"("pass":"fwd")", R"("pass":"bwd")"), {"key.pass", "\"bwd\""});
  }
  SECTION("schedule not legal for the record's target") {
    require_bad_line(replaced(kGolden, R"("mr":24)", R"("mr":20)"), {"mr", "multiple of the vector width 8"});
    require_bad_line(replaced(kGolden, R"("nr":4)", R"("nr":17)"), {"nr"});
    // MR=64 is 4 AVX-512 vectors but 8 AVX2 vectors.
    const std::string mr64 = replaced(kGolden, R"("mr":24)", R"("mr":64)");
    require_bad_line(mr64, {"mr", "4 vectors"});
    CHECK(parse_record_line(replaced(mr64, kAvx2, kAvx512), "t:1").schedule.mr == 64);
    require_bad_line(replaced(kGolden, kAvx2, "arm-64-linux"), {"key.target", "only x86-64"});
  }
  SECTION("not JSON, truncated, duplicated keys") {
    require_bad_line("hello", {"not JSON"});
    require_bad_line("", {"not JSON"});
    require_bad_line(kGolden.substr(0, kGolden.size() / 2), {"not JSON"});
    require_bad_line(kGolden.substr(0, kGolden.size() - 1), {"not JSON"});
    require_bad_line(kGolden + "x", {"not JSON"});
    require_bad_line(replaced(kGolden, R"("nr":4)", R"("nr":4,"nr":5)"), {"duplicate field", "\"nr\""});
  }
}

TEST_CASE("write_records replaces the file atomically and leaves no temp file", "[schedule_records]") {
  TempDir dir;
  const fs::path path = dir.path / "s.jsonl";
  ScheduleRecord a = golden_record();
  ScheduleRecord b = golden_record();
  b.source = "tuned";
  b.gflops = 55.5;

  write_records(path.string(), {a, b});
  CHECK(dir.entries() == std::vector<std::string>{"s.jsonl"});
  write_records(path.string(), {b});
  CHECK(read_records(path.string()) == std::vector<ScheduleRecord>{b});
  CHECK(dir.entries() == std::vector<std::string>{"s.jsonl"});

  SECTION("a record that cannot be written leaves the old file untouched") {
    const std::string before = slurp(path);
    ScheduleRecord bad = golden_record();
    bad.schedule.mr = 20;
    require_error([&] { write_records(path.string(), {a, bad}); }, ExitCode::BadRecord, {"record 2", "mr"});
    bad = golden_record();
    bad.gflops = std::nan("");
    require_error([&] { write_records(path.string(), {bad}); }, ExitCode::BadRecord, {"gflops"});
    bad = golden_record();
    bad.note = "\xff";
    require_error([&] { write_records(path.string(), {bad}); }, ExitCode::BadRecord, {"note", "UTF-8"});
    CHECK(slurp(path) == before);
    CHECK(dir.entries() == std::vector<std::string>{"s.jsonl"});
  }
  SECTION("a failed rename removes the temp file") {
    fs::create_directory(dir.path / "taken");
    fs::create_directory(dir.path / "taken" / "child");  // a non-empty directory cannot be replaced
    require_error([&] { write_records((dir.path / "taken").string(), {a}); }, ExitCode::Io, {"taken"});
    CHECK(fs::is_directory(dir.path / "taken" / "child"));
    auto entries = dir.entries();
    std::sort(entries.begin(), entries.end());
    CHECK(entries == std::vector<std::string>{"s.jsonl", "taken"});
  }
  SECTION("an unwritable location is an Io error") {
    require_error([&] { write_records((dir.path / "no" / "such" / "dir.jsonl").string(), {a}); }, ExitCode::Io,
                  {"dir.jsonl"});
  }
}

TEST_CASE("target_info looks targets up in the feature table", "[schedule]") {
  const TargetInfo zen3 = default_target();
  CHECK(zen3.target == kAvx2);
  CHECK(zen3.vector_floats == 8);
  CHECK(zen3.vector_registers == 16);
  CHECK(zen3.l1_bytes == 32 * 1024);
  CHECK(zen3.l2_bytes == 512 * 1024);
  CHECK(zen3.l3_bytes == 32 * 1024 * 1024);

  const TargetInfo skx = target_info(kAvx512);
  CHECK(skx.target == kAvx512);
  CHECK(skx.vector_floats == 16);
  CHECK(skx.vector_registers == 32);
  CHECK(skx.l1_bytes == 32 * 1024);
  CHECK(skx.l2_bytes == 1024 * 1024);
  CHECK(target_info("x86-64-linux-avx512").vector_floats == 16);

  CHECK(target_info("x86-64-linux-avx2").vector_floats == 8);
  CHECK(target_info("x86-64-windows-avx-fma").vector_floats == 8);
  CHECK(target_info("x86-64-linux-sse41").vector_floats == 4);
  CHECK(target_info("x86-64-linux").vector_floats == 4);
  CHECK(target_info("x86-64-linux").vector_registers == 16);
  // "avx" without FMA is not the AVX2 row; "avx2x" is not avx2.
  CHECK(target_info("x86-64-linux-avx").vector_floats == 4);
  CHECK(target_info("x86-64-linux-avx2x").vector_floats == 4);

  for (const char* bad : {"", "arm-64-linux", "x86-32-linux-sse41", "x86-64"}) {
    INFO(bad);
    require_error([&] { target_info(bad); }, ExitCode::Unsupported, {"only x86-64 targets are supported"});
  }
}

TEST_CASE("schedule names, equality and describe", "[schedule]") {
  const ConvSchedule s;
  CHECK(describe(s) ==
        "gemm mr=24 nr=4 kc=0 mc=0 nc=0 layout=nhwc pack_input=image pack_weights=per_call "
        "loop_order=pixels_outer parallel=none partitions=1 output_stores=cached");
  ConvSchedule t = s;
  CHECK(t == s);
  t.parallel = Parallel::Pixels;
  CHECK(t != s);
  ConvSchedule streaming = s;
  streaming.output_stores = OutputStores::Streaming;
  CHECK(streaming != s);
  CHECK(to_string(OutputStores::Streaming) == "streaming");
  ConvSchedule overridden = s;
  apply_schedule_overrides("output_stores=streaming", &overridden);
  CHECK(overridden == streaming);
  CHECK(to_string(Strategy::Depthwise) == "depthwise");
  CHECK(to_string(Strategy::Grouped) == "grouped");
  CHECK(to_string(PackInput::None) == "none");
  CHECK(to_string(PackInput::Rows) == "rows");
  CHECK(to_string(LoopOrder::ChannelsOuter) == "channels_outer");
  CHECK(to_string(Parallel::Pixels) == "pixels");

  PackInput p = PackInput::None;
  CHECK(from_string("rows", &p));
  CHECK(p == PackInput::Rows);
  CHECK_FALSE(from_string("Rows", &p));
  CHECK(p == PackInput::Rows);
}

TEST_CASE("schedule_space spans the target's vector width", "[schedule]") {
  const ScheduleSpace space = schedule_space(target_info(kAvx512));
  CHECK(space.mr == std::vector<int>{16, 32, 48, 64});
  CHECK(space.nr == std::vector<int>{1, 2, 3, 4, 5, 6, 8, 9, 10, 12, 14, 16});  // 32 registers: to 2 x 14, 1 x 16
  CHECK(space.kc == std::vector<int>{0, 8, 24, 64});
  CHECK(space.mc == std::vector<int>{0, 48, 96});
  CHECK(space.nc == std::vector<int>{0, 8, 30, 96});
  CHECK(space.strategy.size() == 4);
  CHECK(space.pack_input.size() == 4);
  CHECK(schedule_space(default_target()).mr == std::vector<int>{8, 16, 24, 32});
  CHECK(schedule_space(default_target()).nr == std::vector<int>{1, 2, 3, 4, 5, 6, 8, 9});
}

TEST_CASE("validate rejects illegal schedules naming the field", "[schedule]") {
  const TargetInfo t = default_target();
  for (const auto& r : one_record_per_value(kAvx2)) CHECK_NOTHROW(validate(r.schedule, t));

  struct Case {
    std::function<void(ConvSchedule&)> set;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](ConvSchedule& s) { s.mr = 0; }, "mr"},   {[](ConvSchedule& s) { s.mr = -8; }, "mr"},
      {[](ConvSchedule& s) { s.mr = 12; }, "mr"},  {[](ConvSchedule& s) { s.mr = 40; }, "mr"},
      {[](ConvSchedule& s) { s.nr = 0; }, "nr"},   {[](ConvSchedule& s) { s.nr = 17; }, "nr"},
      {[](ConvSchedule& s) { s.kc = -1; }, "kc"},  {[](ConvSchedule& s) { s.mc = -1; }, "mc"},
      {[](ConvSchedule& s) { s.nc = -96; }, "nc"},
  };
  for (const auto& c : cases) {
    ConvSchedule s;
    c.set(s);
    INFO(describe(s));
    require_error([&] { validate(s, t); }, ExitCode::BadRecord, {"schedule: " + c.field + ": "});
  }
  ConvSchedule odd_mc;
  odd_mc.mc = 50;  // rounded up to a multiple of MR by the generator
  CHECK_NOTHROW(validate(odd_mc, t));
}
