// The tuner's evaluator (generator/tune/): every candidate is checked bit for bit before
// it is timed, so a wrong kernel is reported as such and never timed; the timing
// statistics are real; the default is checked against the plain reference.
#include <catch2/catch.hpp>

#include "generator/tune/kernel_evaluator.h"
#include "generator/tune/sampled_reference.h"
#include "schedules/conv_descriptor.h"
#include "schedules/tune/tuning_space.h"

using namespace convgen;

TEST_CASE("a planted wrong candidate is found wrong in every pass; correct ones are timed", "[tune]") {
  // Padded, so the planted padding bug changes the result.
  const ConvDescriptor d = parse_descriptor("mb2ic16ih9oc24oh9kh3ph1+relu");
  const TargetInfo t = default_target();
  for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
    CAPTURE(pass);
    const TuningSpace space(d, pass, t, Parallel::None);
    const ConvSchedule def = space.normalise(analytic_schedule_for_pass(d, pass, t));
    const auto around = space.neighbours(def);
    REQUIRE(around.size() >= 2);
    EvaluatorOptions o;
    o.plant_wrong = describe(around[0]);
    o.min_sample_seconds = 0.001;
    KernelEvaluator ev(d, pass, t, def, o);
    const CandidateResult bad = ev.evaluate(around[0], 0);
    CHECK(bad.status == "wrong");
    CHECK_THAT(bad.error, Catch::Contains("where the reference gives"));
    CHECK(bad.stats.count == 0);
    const CandidateResult good = ev.evaluate(around[1], 0);
    CHECK(good.status == "ok");
    CHECK(good.stats.count >= 3);
    CHECK(good.stats.min_seconds > 0);
    CHECK(good.stats.median_seconds >= good.stats.min_seconds);
    const auto retimed = ev.retime_interleaved({def, around[1]}, 3);
    REQUIRE(retimed.size() == 2);
    CHECK(retimed[0].count == 3);
  }
}

TEST_CASE("the sampled reference agrees with the definition on a hand-computed case", "[tune]") {
  // 1 image, 1 channel, 3x3 input, 2x2 kernel, stride 1, no padding.
  const ConvDescriptor d = parse_descriptor("mb1ic1ih3oc1kh2");
  PassTensors in;
  in.x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  in.w = {1, 0, 0, -1};
  in.dy = {1, 1, 1, 1};
  CHECK(reference_forward_at(d, in, 0) == 1 - 5);
  CHECK(reference_forward_at(d, in, 3) == 5 - 9);
  CHECK(reference_backward_data_at(d, in, 4) == 1 - 1);    // centre: w00 and w11 both reach it
  CHECK(reference_backward_data_at(d, in, 8) == -1);        // corner: only w11
  CHECK(reference_backward_weights_at(d, in, 0) == 1 + 2 + 4 + 5);
  CHECK(reference_backward_weights_at(d, in, 3) == 5 + 6 + 8 + 9);
}
