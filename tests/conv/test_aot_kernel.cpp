// A kernel generated ahead of time by `convgen compile-layer --no-runtime` at build time,
// linked with convgen::runtime (which owns the Halide runtime and routes its parallel
// loops onto OpenMP), checked bit for bit against the reference on integer data, with
// one and two OpenMP threads.
#include <catch2/catch.hpp>

#include <random>

#include <HalideBuffer.h>
#include <omp.h>

#include "conv_aot_test.h"
#include "gen_aot_test.h"
#include "runtime/parallel/parallel_runtime.h"
#include "schedules/conv_descriptor.h"
#include "tests/common/reference_conv.h"

using namespace convgen;

namespace {

using Kernel = int (*)(halide_buffer_t*, halide_buffer_t*, halide_buffer_t*, halide_buffer_t*);

// Runs an AOT kernel of CONVGEN_AOT_LAYER on integer data with 1 and 2 OpenMP threads
// and requires a bit-exact match with the reference.
void check_aot_kernel(Kernel kernel) {
  install_kernel_runtime();
  const ConvDescriptor d = parse_descriptor(CONVGEN_AOT_LAYER);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> ints(-3, 3);
  std::vector<float> x(d.mb * d.ih * d.iw * d.ic), w(d.oc * d.icg() * d.kh * d.kw), b(d.oc);
  for (auto* v : {&x, &w, &b})
    for (auto& e : *v) e = float(ints(rng));
  const auto ref = test::reference_forward(d, x, w, b);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    std::vector<float> y(ref.y.size(), -12345.0f);
    const int g = int(d.g), cg = int(d.icg()), kg = int(d.ocg());
    Halide::Runtime::Buffer<float> in(x.data(), {cg, g, int(d.iw), int(d.ih), int(d.mb)});
    Halide::Runtime::Buffer<float> wt(w.data(), {int(d.kw), int(d.kh), cg, kg, g});
    Halide::Runtime::Buffer<float> bs(b.data(), {int(d.oc)});
    Halide::Runtime::Buffer<float> out(y.data(), {kg, g, int(d.oh() * d.ow()), int(d.mb)});
    REQUIRE(kernel(in, wt, bs, out) == 0);
    size_t mismatches = 0;
    for (size_t i = 0; i < y.size(); ++i) mismatches += double(y[i]) != ref.y[i];
    INFO("threads " << threads);
    CHECK(mismatches == 0);
  }
}

}  // namespace

TEST_CASE("AOT kernel from compile-layer matches the reference on 1 and 2 threads", "[aot]") {
  check_aot_kernel(conv_aot_test);
}

TEST_CASE("AOT kernel from the Halide Generator (GenGen) matches the reference", "[aot]") {
  check_aot_kernel(gen_aot_test);
}
