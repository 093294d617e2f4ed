// Determinism: for a given schedule, the backward kernels give bit-identical results on
// every run and whatever the thread count (real-valued data, so a changed summation
// order would show). Threads only split non-reduction loops or whole partitions.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cstring>
#include <random>

#include "generator/conv/jit.h"
#include "schedules/schedule_records.h"
#include "tests/common/real_valued.h"
#include "tests/conv/sweep_plan.h"

using namespace convgen;
using test::bitwise_equal;
using test::random_floats;

namespace {

struct Results {
  std::vector<float> dx, dw, db;
};

Results run_with_threads(JitBackwardDataKernel& data, JitBackwardWeightsKernel& weights, const ConvDescriptor& d,
                         int threads) {
  const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 1), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 2);
  const auto dy = random_floats(d.mb * d.oh() * d.ow() * d.oc, 3), y = random_floats(dy.size(), 4);
  Results r{std::vector<float>(x.size()), std::vector<float>(w.size()), std::vector<float>(d.oc)};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  data.run(dy.data(), w.data(), y.data(), r.dx.data());
  weights.run(x.data(), dy.data(), y.data(), r.dw.data(), r.db.data());
  omp_set_num_threads(saved);
  return r;
}

}  // namespace

TEST_CASE("backward kernels are bit-identical across runs and thread counts", "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // A first layer (few weights: partitions carry the parallelism) and a wider one.
  for (const char* text : {"mb6ic3ih20iw20oc16kh5kw5sh1pt2pb2pl2pr2+bias+relu",
                           "mb4ic32ih10iw10oc48kh3kw3sh2sw2pt1pb1pl1pr1+bias+relu"}) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* words : {"parallel=pixels partitions=4", "parallel=images partitions=3", "parallel=pixels"}) {
      INFO(text << "  schedule words: " << words);
      ConvSchedule sd = analytic_schedule_for_pass(d, "bwd_data", t), sw = analytic_schedule_for_pass(d, "bwd_weights", t);
      apply_schedule_overrides(words, &sd);
      apply_schedule_overrides(words, &sw);
      JitBackwardDataKernel data(d, sd, t);
      JitBackwardWeightsKernel weights(d, sw, t);
      const Results one = run_with_threads(data, weights, d, 1);
      for (int threads : {1, 2, 3, 4}) {
        INFO("threads " << threads);
        const Results other = run_with_threads(data, weights, d, threads);
        CHECK(bitwise_equal(one.dx, other.dx));
        CHECK(bitwise_equal(one.dw, other.dw));
        CHECK(bitwise_equal(one.db, other.db));
      }
    }
  }
}

TEST_CASE("parallel variant: a small dW's reduction in 4 partitions, bit-identical across thread counts",
          "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // 48 x 32 x 3 x 3 floats (54 KiB): partitions; 1024 x 512 (2 MiB): one partition.
  const ConvDescriptor small = parse_descriptor("mb4ic32ih10iw10oc48kh3kw3pt1pb1pl1pr1+bias+relu");
  const ConvDescriptor large = parse_descriptor("mb2ic512ih2iw2oc1024kh1kw1");
  for (Parallel p : {Parallel::Images, Parallel::Pixels}) {
    const ConvSchedule sw = parallel_variant(small, "bwd_weights", analytic_schedule_for_pass(small, "bwd_weights", t), p);
    CHECK(sw.parallel == p);
    CHECK(sw.partitions == 4);
    CHECK(parallel_variant(large, "bwd_weights", analytic_schedule_for_pass(large, "bwd_weights", t), p).partitions == 1);
    const ConvSchedule sd = parallel_variant(small, "bwd_data", analytic_schedule_for_pass(small, "bwd_data", t), p);
    CHECK(sd.partitions == analytic_schedule_for_pass(small, "bwd_data", t).partitions);
    CHECK(sd.parallel == p);
    JitBackwardDataKernel data(small, sd, t);
    JitBackwardWeightsKernel weights(small, sw, t);
    const Results one = run_with_threads(data, weights, small, 1);
    for (int threads : {2, 3}) {
      INFO("threads " << threads);
      const Results other = run_with_threads(data, weights, small, threads);
      CHECK(bitwise_equal(one.dw, other.dw));
      CHECK(bitwise_equal(one.db, other.db));
      CHECK(bitwise_equal(one.dx, other.dx));
    }
  }
  // An explicit partition count is kept.
  ConvSchedule three = analytic_schedule_for_pass(small, "bwd_weights", t);
  three.partitions = 3;
  CHECK(parallel_variant(small, "bwd_weights", three, Parallel::Images).partitions == 3);
}
