// Streaming output stores (generator/object_code): the streaming variant's whole, aligned
// vector stores to the output are marked non-temporal, and nothing else is; kernels with
// them compute exactly what the reference computes, on an output aligned to a vector (the
// streaming variant, whose stores would fault on an unaligned one) and on one a float off
// it (the ordinary variant). Integer-valued data, so every sum is exact.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <random>

#include "generator/conv/backward.h"
#include "generator/conv/jit.h"
#include "generator/conv/kernel_pipeline.h"
#include "generator/conv/pipeline.h"
#include "generator/object_code/object_code.h"
#include "schedules/conv_descriptor.h"
#include "schedules/kernel_plan.h"
#include "tests/common/guarded_output.h"
#include "tests/common/reference_conv.h"
#include "tests/common/reference_conv_backward.h"
#include "tests/common/temp_dir.h"

using namespace convgen;
using namespace convgen::test;

namespace {

constexpr const char* kAvx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";
constexpr const char* kAvx512 = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";

// Streaming stores the forward kernel's object code marks, for (d, s) on `target`.
int marked_stores(const ConvDescriptor& d, ConvSchedule s, const std::string& target, bool streaming) {
  const TargetInfo t = target_info(target);
  s.output_stores = streaming ? OutputStores::Streaming : OutputStores::Cached;
  ForwardPipeline fp = build_forward(d, s, t);
  TempDir dir("convgen-object-code");
  const std::string object = (dir.path / "k.o").string();
  const KernelObjectReport report = compile_kernel_object(
      {kernel_pipeline(fp.output), fp.arguments(), "k", halide_target(target).with_feature(Halide::Target::NoRuntime),
       streaming},
      object);
  REQUIRE(std::filesystem::file_size(object) > 0);
  return report.streaming_stores;
}

std::vector<float> integers(size_t n, int range, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-range, range);
  std::vector<float> v(n);
  for (float& e : v) e = float(pick(rng));
  return v;
}

size_t mismatches(const GuardedOutput& got, const std::vector<double>& want) {
  size_t bad = got.damaged_guards();
  for (size_t i = 0; i < want.size(); ++i) bad += double(got[i]) != want[i];
  return bad;
}

}  // namespace

TEST_CASE("streaming stores: the output's whole, aligned vector stores are marked in every variant's loops",
          "[object_code]") {
  const ConvDescriptor d = parse_descriptor("mb2ic3ih20oc32kh3ph1");
  for (const char* target : {kAvx2, kAvx512}) {
    INFO(target);
    const ConvSchedule s = analytic_schedule(d, target_info(target));
    CHECK(marked_stores(d, s, target, true) > 0);
    CHECK(marked_stores(d, s, target, false) == 0);
    // The parallel loop's body is a function of its own, named after the variant.
    ConvSchedule images = s;
    images.parallel = Parallel::Images;
    CHECK(marked_stores(d, images, target, true) > 0);
  }
}

TEST_CASE("streaming stores: stores a vector cannot align with are left ordinary", "[object_code]") {
  // 24 channels, one pixel per tile: a pixel's 96 bytes start every other pixel mid-way
  // through a 64-byte vector, but always on a 32-byte one.
  const ConvDescriptor d = parse_descriptor("mb2ic8ih12oc24kh3ph1");
  ConvSchedule s = analytic_schedule(d, target_info(kAvx512));
  s.strategy = Strategy::Gemm, s.mr = 16, s.nr = 1;
  CHECK(marked_stores(d, s, kAvx512, true) == 0);
  ConvSchedule avx2 = analytic_schedule(d, target_info(kAvx2));
  avx2.strategy = Strategy::Gemm, avx2.mr = 8, avx2.nr = 1;
  CHECK(marked_stores(d, avx2, kAvx2, true) > 0);
}

TEST_CASE("streaming stores: both variants match the reference bit for bit, forward and backward-data",
          "[object_code]") {
  const TargetInfo t = target_info(host_target_string());
  for (const char* text : {"mb2ic3ih20oc32kh3ph1", "mb2ic16ih11oc32kh3sh2ph1+relu", "g16mb2ic16ih14oc16kh3ph1"}) {
    const ConvDescriptor d = parse_descriptor(text);
    INFO(d.to_string());
    const auto x = integers(d.mb * d.ih * d.iw * d.ic, 3, 1), w = integers(d.oc * d.icg() * d.kh * d.kw, 2, 2);
    const auto bias = integers(d.oc, 4, 3), dy = integers(d.mb * d.oh() * d.ow() * d.oc, 3, 4);
    ConvSchedule fwd = analytic_schedule(d, t);
    fwd.output_stores = OutputStores::Streaming;
    JitForwardKernel forward(d, fwd, t);
    const ReferenceResult want_y = reference_forward(d, x, w, bias, {});
    std::vector<float> y;
    for (size_t misalign : {0, 1}) {
      INFO("forward, output " << misalign << " floats past a 64-byte boundary");
      GuardedOutput out(want_y.y.size(), misalign);
      forward.run(x.data(), w.data(), d.bias ? bias.data() : nullptr, out.data());
      CHECK(mismatches(out, want_y.y) == 0);
      y = out.values();
    }
    ConvSchedule bwd = analytic_schedule_for_pass(d, "bwd_data", t);
    bwd.output_stores = OutputStores::Streaming;
    JitBackwardDataKernel backward(d, bwd, t);
    std::vector<float> dy_masked = dy;
    if (d.relu)
      for (size_t i = 0; i < dy.size(); ++i) dy_masked[i] = y[i] > 0 ? dy[i] : 0.0f;
    const std::vector<double> want_dx = reference_backward_data(d, dy_masked, w);
    for (size_t misalign : {0, 1}) {
      INFO("backward-data, dX " << misalign << " floats past a 64-byte boundary");
      GuardedOutput dx(want_dx.size(), misalign);
      backward.run(dy.data(), w.data(), d.relu ? y.data() : nullptr, dx.data());
      CHECK(mismatches(dx, want_dx) == 0);
    }
  }
}
