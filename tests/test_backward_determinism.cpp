// Determinism: for a given schedule, the backward kernels give bit-identical results on
// every run and whatever the thread count (real-valued data, so a changed summation
// order would show). Threads only split non-reduction loops or whole partitions.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cstring>
#include <random>

#include "conv_jit.h"
#include "sweep_plan.h"
#include "schedule_records.h"

using namespace convgen;

namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

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
