// The tuner's evaluator (generator/tune/): every candidate is checked bit for bit before
// it is timed, so a wrong kernel is reported as such and never timed; the timing
// statistics are real; the default is checked against the plain reference.
#include <catch2/catch.hpp>

#include <random>
#include <type_traits>

#include "generator/conv/backward.h"
#include "generator/conv/pipeline.h"
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

// Candidates are timed on cache-line aligned tensors, as the runtime and convgen-bench
// store them: at a plain vector's 16-byte offset depthwise kernels timed ~40% slower
// and schedules that stage their input looked better than in-place ones.
static_assert(std::is_same_v<decltype(PassTensors::x), FloatBuffer> &&
              std::is_same_v<decltype(PassTensors::dy), FloatBuffer>);

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

namespace {

// The schedule decisions the generator reports (--verbose) for a pass, without the lines
// that only echo a raw field it then clamped or refused: what it built.
std::vector<std::string> built_as(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                                  const TargetInfo& t) {
  std::vector<std::string> why;
  if (pass == "fwd") build_forward(d, s, t, &why);
  else if (pass == "bwd_data") build_backward_data(d, s, t, &why);
  else build_backward_weights(d, s, t, &why);
  std::vector<std::string> kept;
  for (const std::string& line : why)
    if (line.find("clamped") == std::string::npos && line.find("refused") == std::string::npos) kept.push_back(line);
  return kept;
}

}  // namespace

TEST_CASE("the tuner's normal form of a schedule builds the kernel the schedule builds", "[tune]") {
  const TargetInfo t = default_target();
  std::mt19937 rng(5);
  auto pick = [&](std::initializer_list<int> values) {
    return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
  };
  for (const char* text : {"mb2ic16ih9oc24oh9kh3ph1", "mb2ic20ih7oc20kh1", "g8mb2ic8ih9oc8kh3sh2ph1",
                           "g4mb2ic16ih8oc8kh3ph1", "mb2ic8ih9oc16kh3sh2ph1+relu"}) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
      const TuningSpace space(d, pass, t, Parallel::None);
      const ConvSchedule def = analytic_schedule_for_pass(d, pass, t);
      // The comparison has teeth: another register tile reads differently.
      ConvSchedule other = def;
      other.nr = def.nr == 2 ? 3 : 2;
      CHECK(built_as(d, pass, def, t) != built_as(d, pass, other, t));
      int input_lanes = 0;
      for (int i = 0; i < 12; ++i) {
        ConvSchedule s = def;
        s.mr = pick({8, 16, 24, 32});
        s.nr = pick({1, 3, 4, 6, 7, 8});
        s.kc = pick({0, 4, 8, 16, 100, 1000});
        s.mc = pick({0, 8, 16, 24, 40, 1000});
        s.nc = pick({0, 7, 16, 30, 56, 10000});
        s.pack_input = static_cast<PackInput>(pick({0, 1, 2, 3}));
        s.loop_order = static_cast<LoopOrder>(pick({0, 1}));
        s.partitions = pick({1, 2, 4});
        // A strategy the space offers; on the 1x1 layer's backward-weights, half of them
        // with vectors along the input channels.
        if (i % 2 && std::string(pass) == "bwd_weights" && d.kh == 1) s.strategy = Strategy::GemmInputLanes;
        s.strategy = space.normalise(s).strategy;
        const ConvSchedule n = space.normalise(s);
        CAPTURE(text, pass, describe(s), describe(n));
        CHECK(built_as(d, pass, s, t) == built_as(d, pass, n, t));
        input_lanes += n.strategy == Strategy::GemmInputLanes;
      }
      if (std::string(pass) == "bwd_weights" && d.kh == 1) CHECK(input_lanes == 6);
    }
  }
}

TEST_CASE("the sampled reference certifies the default of strided, dilated, grouped and asymmetric layers",
          "[tune]") {
  // Building the evaluator checks the default against the sampled reference; wrong index
  // arithmetic in the reference would throw here (the defaults are the sweeps' kernels).
  const TargetInfo t = default_target();
  for (const char* text : {"mb2ic6ih11iw9oc12kh3kw2sh2sw3pt1pb0pl2pr1g3+bias+relu", "mb2ic8ih12oc16kh3ph2dh2+bias",
                           "g8mb2ic8ih10oc16kh3sh2ph1", "mb1ic3ih15oc8kh5sh3ph1"}) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
      CAPTURE(text, pass);
      const TuningSpace space(d, pass, t, Parallel::None);
      EvaluatorOptions o;
      o.min_sample_seconds = 0.001;
      CHECK_NOTHROW(KernelEvaluator(d, pass, t, space.normalise(analytic_schedule_for_pass(d, pass, t)), o));
    }
  }
}

TEST_CASE("fused inference layers tune: a residual is added, a +outstride slice leaves its neighbours alone",
          "[tune]") {
  // What `convgen tune MODEL` plans for ResNet's blocks and SqueezeNet's Concat. The
  // evaluator once ran these without the residual (an internal error) and with a dense
  // output buffer the strided kernel wrote past (a heap corruption).
  const TargetInfo t = default_target();
  for (const char* text : {"mb2ic16ih8oc16kh3ph1+bias+residual+relu", "mb1ic16ih8oc8kh1+outstride(24)",
                           "mb1ic24ih6oc8kh3ph1+bias+residual+outstride(20)+clip(0,6)"}) {
    const ConvDescriptor d = parse_descriptor(text);
    CAPTURE(text);
    const TuningSpace space(d, "fwd", t, Parallel::None);
    const ConvSchedule def = space.normalise(analytic_schedule_for_pass(d, "fwd", t));
    EvaluatorOptions o;
    o.min_sample_seconds = 0.001;
    KernelEvaluator ev(d, "fwd", t, def, o);  // the default against the sampled reference
    const auto around = space.neighbours(def);
    REQUIRE(!around.empty());
    const CandidateResult r = ev.evaluate(around[0], 0);
    CHECK(r.status == "ok");
  }

  // The reference counts the residual: the same element with and without it differs by it.
  ConvDescriptor d = parse_descriptor("mb1ic1ih2oc1kh1+residual");
  PassTensors in;
  in.x = {1, 2, 3, 4};
  in.w = {2};
  in.residual = {10, 20, 30, 40};
  CHECK(reference_forward_at(d, in, 3) == 2 * 4 + 40);
  d.residual = false;
  CHECK(reference_forward_at(d, in, 3) == 2 * 4);
}

TEST_CASE("candidates of a consumer that packs weights once read packed panels, checked like any other", "[tune]") {
  // A padded GEMM layer: the planted padding bug changes its result.
  const ConvDescriptor d = parse_descriptor("mb2ic16ih9oc24oh9kh3ph1+relu");
  const TargetInfo t = default_target();
  for (const char* pass : {"fwd", "bwd_data"}) {
    CAPTURE(pass);
    const TuningSpace space(d, pass, t, Parallel::None, PackWeights::Prepacked);
    const ConvSchedule def = space.normalise(analytic_schedule_for_pass(d, pass, t));
    REQUIRE(def.strategy == Strategy::Gemm);
    CHECK(def.pack_weights == PackWeights::Prepacked);
    const auto around = space.neighbours(def);
    REQUIRE(around.size() >= 2);
    for (const ConvSchedule& s : around) CHECK(s.pack_weights == PackWeights::Prepacked);
    EvaluatorOptions o;
    o.plant_wrong = describe(around[0]);
    o.min_sample_seconds = 0.001;
    // The default is checked against the plain reference here, reading its panels.
    KernelEvaluator ev(d, pass, t, def, o);
    CHECK(ev.evaluate(around[0], 0).status == "wrong");
    CHECK(ev.evaluate(around[1], 0).status == "ok");
  }
  // Backward-weights reads no weights: its candidates stay per call.
  const TuningSpace weights_space(d, "bwd_weights", t, Parallel::None, PackWeights::Prepacked);
  CHECK(weights_space.normalise(analytic_schedule_for_pass(d, "bwd_weights", t)).pack_weights ==
        PackWeights::PerCall);
}
