// Training records (kind "training" / "training_trial", version 5): the micro-batch and
// parallel modes `convgen tune --train` chose, stored beside schedule records in the same
// file. Round trips, strict reading, and how readers of schedule records treat them.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "schedules/errors.h"
#include "schedules/schedule_records.h"
#include "tests/common/temp_dir.h"

using namespace convgen;

namespace {

const std::string kSha(64, 'a');
const char* const kAvx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";

// The example line of docs/tuning.md ("Training steps").
const std::string kGolden =
    R"({"format":"convgen-schedule","version":5,"kind":"training","key":{"model_sha256":")" + kSha +
    R"(","batch":32,"target":"x86-64-linux-avx-avx2-f16c-fma-sse41"},"config":{"micro_batch":8,)"
    R"("parallel_modes":{"conv1":"micro-batch","conv2":"whole-batch"}},"gflops":41.5,"note":"",)"
    R"("tuning":{"trial":-1,"status":"ok","seed":1,"search":"guided","trials":7,"default_gflops":38.25,)"
    R"("workspace_bytes":0,"stats":{"min_seconds":0.004,"median_seconds":0.0045,"spread":0.02,"count":5},)"
    R"("provenance":{"cpu":"AMD EPYC","l1_bytes":32768,"l2_bytes":1048576,"l3_bytes":33554432,"halide":"14.0.0",)"
    R"("threads":2,"micro_batch":8,"variant":"none","timing_method":2}}})";

TrainingRecord golden() {
  TrainingRecord r;
  r.key = {kSha, 32, kAvx2};
  r.micro_batch = 8;
  r.parallel_modes = {{"conv1", "micro-batch"}, {"conv2", "whole-batch"}};
  r.gflops = 41.5;
  r.tuning.present = true;
  r.tuning.trial = -1;
  r.tuning.seed = 1;
  r.tuning.search = "guided";
  r.tuning.trials = 7;
  r.tuning.default_gflops = 38.25;
  r.tuning.stats = {0.004, 0.0045, 0.02, 5};
  r.tuning.provenance = {"AMD EPYC", 32768, 1048576, 33554432, "14.0.0", 2, 8, "none", 2};
  return r;
}

const std::string kSchedule =
    R"({"format":"convgen-schedule","version":4,"kind":"schedule","key":{"descriptor":"mb1ic64ih56oc64oh56kh3ph1",)"
    R"("pass":"fwd","target":"x86-64-linux-avx-avx2-f16c-fma-sse41","generator_hash":"abc123"},)"
    R"("schedule":{"strategy":"gemm","mr":24,"nr":4,"kc":0,"mc":0,"nc":0,"layout":"nhwc",)"
    R"("pack_input":"image","pack_weights":"per_call","loop_order":"pixels_outer","parallel":"none",)"
    R"("partitions":1},"source":"analytic","gflops":0,"note":""})";

std::string replaced(std::string s, const std::string& from, const std::string& to) {
  const auto at = s.find(from);
  REQUIRE(at != std::string::npos);
  return s.replace(at, from.size(), to);
}

void require_error(const std::function<void()>& f, std::vector<std::string> needles) {
  try {
    f();
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(e.code() == ExitCode::BadRecord);
    for (const auto& n : needles) CHECK_THAT(e.what(), Catch::Contains(n));
    return;
  }
  FAIL("no convgen::Error thrown");
}

struct TempDir : convgen::test::TempDir {
  TempDir() : convgen::test::TempDir("convgen-training-records") {}
};

}  // namespace

TEST_CASE("a training record prints as the documented line and reads back", "[schedule_records][training]") {
  CHECK(to_json_line(golden()) == kGolden);
  CHECK(parse_training_record_line(kGolden, "t:1") == golden());
  TrainingRecord trial = golden();
  trial.kind = RecordKind::Trial;
  trial.tuning.trial = 3;
  trial.tuning.status = "wrong";
  trial.note = "first-step loss 2.3, the default's 2.2";
  trial.parallel_modes.clear();  // a model without Conv layers
  CHECK(parse_training_record_line(to_json_line(trial), "t:2") == trial);
  CHECK_THAT(to_json_line(trial), Catch::Contains(R"("kind":"training_trial")") &&
                                      Catch::Contains(R"("parallel_modes":{})"));
}

TEST_CASE("strict reading of training lines: every malformed one names the field", "[schedule_records][training]") {
  auto bad = [](const std::string& line, std::vector<std::string> needles) {
    INFO("line: " << line);
    needles.push_back("recs.jsonl:3: ");
    require_error([&] { parse_training_record_line(line, "recs.jsonl:3"); }, needles);
  };
  bad(replaced(kGolden, R"("version":5)", R"("version":4)"), {"needs version 5"});
  bad(replaced(kGolden, R"("micro_batch":8,)", R"("micro_batch":0,)"), {"config.micro_batch", "1..32"});
  bad(replaced(kGolden, R"("micro_batch":8,)", R"("micro_batch":33,)"), {"config.micro_batch"});
  bad(replaced(kGolden, R"("conv2":"whole-batch")", R"("conv2":"both")"), {"config.parallel_modes.conv2", "both"});
  bad(replaced(kGolden, R"("conv1":"micro-batch",)", R"("":"micro-batch",)"), {"must not be empty"});
  bad(replaced(kGolden, R"({"conv1":"micro-batch","conv2":"whole-batch"})", "[]"),
      {"config.parallel_modes", "expected an object"});
  bad(replaced(kGolden, R"("micro_batch":8,)", R"("micro_batch":8,"x":1,)"), {"unknown field \"config.x\""});
  bad(replaced(kGolden, kSha, "ABC"), {"key.model_sha256"});
  bad(replaced(kGolden, R"("batch":32)", R"("batch":0)"), {"key.batch"});
  bad(replaced(kGolden, R"("batch":32)", R"("batch":32,"threads":2)"), {"unknown field \"key.threads\""});
  bad(replaced(kGolden, R"("target":"x86-64-linux-avx-avx2-f16c-fma-sse41")", R"("target":"arm-64-linux")"),
      {"key."});
  bad(replaced(kGolden, R"(,"tuning":{"trial":-1)", R"(,"tunin":{"trial":-1)"), {"tunin"});
  bad(replaced(kGolden, R"("kind":"training")", R"("kind":"trial")"), {"kind"});
  // Each parser refuses the other kind of line.
  require_error([&] { parse_training_record_line(kSchedule, "x:1"); }, {"x:1: ", "training record"});
  require_error([&] { parse_record_line(kGolden, "x:2"); }, {"x:2: ", "schedule record"});
  // A version this convgen does not know.
  bad(replaced(kGolden, R"("version":5)", R"("version":6)"), {"version 6 is not supported", "1 to 5"});
}

TEST_CASE("one file holds both kinds: schedule readers skip training lines, all are checked",
          "[schedule_records][training]") {
  TempDir dir;
  const std::string path = (dir.path / "r.jsonl").string();
  TrainingRecord older = golden(), trial = golden(), newer = golden();
  older.micro_batch = 4;
  trial.kind = RecordKind::Trial;
  trial.tuning.trial = 0;
  trial.micro_batch = 16;
  TrainingRecord other_batch = golden();
  other_batch.key.batch = 64;
  {
    std::ofstream out(path);
    out << to_json_line(older) << "\n" << kSchedule << "\n" << to_json_line(newer) << "\n"
        << to_json_line(trial) << "\n" << to_json_line(other_batch) << "\n";
  }
  CHECK(read_records(path).size() == 1);
  std::vector<TrainingRecord> training;
  CHECK(read_records(path, nullptr, &training).size() == 1);
  REQUIRE(training.size() == 4);
  // The last training line of the key wins; trial lines are never chosen.
  const TrainingRecord* r = find_training_record(training, golden().key);
  REQUIRE(r);
  CHECK(*r == newer);
  CHECK(find_training_record(training, TrainingKey{kSha, 16, kAvx2}) == nullptr);

  // A bad training line is an error even for a reader that wants schedules only.
  {
    std::ofstream out(path, std::ios::app);
    out << replaced(kGolden, R"("micro_batch":8,)", R"("micro_batch":-1,)") << "\n";
  }
  require_error([&] { read_records(path); }, {path + ":6: ", "config.micro_batch"});

  // write_records keeps them, after the schedule lines.
  const std::vector<ScheduleRecord> schedules = {parse_record_line(kSchedule, "s")};
  write_records(path, schedules, training);
  std::vector<TrainingRecord> back;
  CHECK(read_records(path, nullptr, &back) == schedules);
  CHECK(back == training);
}
