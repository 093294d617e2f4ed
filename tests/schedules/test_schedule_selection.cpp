// Records feed back into generation: a record whose key matches (descriptor, pass,
// target, generator hash) wins over the analytic default; near misses are refused with
// the reason in the decision log.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <unistd.h>

#include "schedules/build_info.h"
#include "schedules/conv_descriptor.h"
#include "schedules/schedule_records.h"
#include "schedules/schedule_selection.h"

using namespace convgen;

namespace {

std::string temp_path(const char* stem) {
  return std::string("/tmp/convgen-test-") + stem + "-" + std::to_string(::getpid()) + ".jsonl";
}

bool mentions(const std::vector<std::string>& lines, const std::string& fragment) {
  for (const auto& l : lines)
    if (l.find(fragment) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("a matching record wins over the analytic default", "[selection]") {
  const ConvDescriptor d = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1");
  const TargetInfo t = default_target();
  ScheduleRecord r;
  r.key = {d.normalised(), "fwd", t.target, CONVGEN_GENERATOR_HASH};
  r.schedule = analytic_schedule(d, t);
  r.schedule.nr = 3;  // differs from the default
  r.source = "tuned";
  r.gflops = 81.5;
  const std::string path = temp_path("match");
  write_records(path, {r});
  std::vector<std::string> why;
  const SelectedSchedule sel = select_schedule(d, "fwd", t, path, &why);
  std::remove(path.c_str());
  CHECK(sel.schedule == r.schedule);
  CHECK(sel.source.find(path) != std::string::npos);
}

TEST_CASE("a record timed on packed weights selects the schedule, not the consumer's weights", "[selection]") {
  // `convgen tune` times a layer set's forward candidates on weights packed once; a
  // consumer that hands the kernel ONNX weights (compile-layer, the Generator, AOT
  // training kernels) must still get a kernel that reads them.
  const ConvDescriptor d = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1");
  const TargetInfo t = default_target();
  ScheduleRecord r;
  r.key = {d.normalised(), "fwd", t.target, CONVGEN_GENERATOR_HASH};
  r.schedule = analytic_schedule(d, t);
  r.schedule.nr = 3;
  r.schedule.pack_weights = PackWeights::Prepacked;
  r.source = "tuned";
  const std::string path = temp_path("packed");
  write_records(path, {r});
  const SelectedSchedule sel = select_schedule(d, "fwd", t, path, nullptr);
  std::remove(path.c_str());
  CHECK(sel.schedule.nr == 3);
  CHECK(sel.schedule.pack_weights == PackWeights::PerCall);
}

TEST_CASE("records for another generator or target are refused, and the log says why", "[selection]") {
  const ConvDescriptor d = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1");
  const TargetInfo t = default_target();
  ScheduleRecord other_code, other_target;
  other_code.key = {d.normalised(), "fwd", t.target, std::string(64, 'a')};
  other_code.schedule = analytic_schedule(d, t);
  other_code.schedule.nr = 3;
  other_code.source = "tuned";
  other_target = other_code;
  other_target.key.generator_hash = CONVGEN_GENERATOR_HASH;
  other_target.key.target = "x86-64-linux-sse41";
  other_target.schedule.mr = 8;
  const std::string path = temp_path("refuse");
  write_records(path, {other_code, other_target});
  std::vector<std::string> why;
  const SelectedSchedule sel = select_schedule(d, "fwd", t, path, &why);
  std::remove(path.c_str());
  CHECK(sel.schedule == analytic_schedule(d, t));
  CHECK(sel.source == "analytic default");
  CHECK(mentions(why, "measured for generator"));
  CHECK(mentions(why, "measured for target x86-64-linux-sse41"));
}
