// Streaming output stores (generator/object_code): the streaming variant's whole, aligned
// vector stores to the output become non-temporal in the object code, and nothing else
// does; kernels with them compute exactly what the reference computes, on an output
// aligned to a vector (the streaming variant, whose stores would fault on an unaligned
// one) and on one a float off it (the ordinary variant), on integer-valued data so every
// sum is exact; and exactly what the ordinary kernel computes on real data.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "generator/conv/backward.h"
#include "generator/conv/jit.h"
#include "generator/conv/kernel_pipeline.h"
#include "generator/conv/pipeline.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/object_code/object_code.h"
#include "schedules/conv_descriptor.h"
#include "schedules/kernel_plan.h"
#include "tests/common/guarded_output.h"
#include "tests/common/integer_valued.h"
#include "tests/common/reference_conv.h"
#include "tests/common/real_valued.h"
#include "tests/common/reference_conv_backward.h"
#include "tests/common/temp_dir.h"

using namespace convgen;
using namespace convgen::test;

namespace {

constexpr const char* kAvx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";
constexpr const char* kAvx512 = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";

// What compiling the forward kernel of (d, s) for `target` as a static library gives:
// the stores marked streaming, and in its assembly the non-temporal vector stores
// (vmovntps, after LLVM's optimisation and any inlining) and fences (sfence).
struct Compiled {
  int marked = 0, non_temporal = 0, fences = 0;
};

Compiled compile(const ConvDescriptor& d, ConvSchedule s, const std::string& target, bool streaming) {
  const TargetInfo t = target_info(target);
  s.output_stores = streaming ? OutputStores::Streaming : OutputStores::Cached;
  ForwardPipeline fp = build_forward(d, s, t);
  TempDir dir("convgen-object-code");
  const std::string prefix = (dir.path / "k").string();
  Compiled c;
  const KernelObjectRequest request{kernel_pipeline({fp.output}, fp.prefetches), fp.arguments(), "k",
                                   halide_target(target), streaming};
  c.marked = compile_kernel_library(request, prefix, /*emit_assembly=*/true).streaming_stores;
  REQUIRE(std::filesystem::file_size(prefix + ".a") > 0);
  REQUIRE(std::filesystem::exists(prefix + ".h"));
  std::ifstream assembly(prefix + ".s");
  for (std::string line; std::getline(assembly, line);) {
    c.non_temporal += line.find("vmovntps") != std::string::npos;
    c.fences += line.find("sfence") != std::string::npos;
  }
  return c;
}

size_t mismatches(const GuardedOutput& got, const std::vector<double>& want) {
  size_t bad = got.damaged_guards();
  for (size_t i = 0; i < want.size(); ++i) bad += double(got[i]) != want[i];
  return bad;
}

}  // namespace

TEST_CASE("streaming stores: the output's whole, aligned vector stores are non-temporal in the object code",
          "[object_code]") {
  const ConvDescriptor d = parse_descriptor("mb2ic3ih20oc32kh3ph1");
  for (const char* target : {kAvx2, kAvx512}) {
    INFO(target);
    const ConvSchedule s = analytic_schedule(d, target_info(target));
    const Compiled streaming = compile(d, s, target, true);
    CHECK(streaming.marked > 0);
    CHECK(streaming.non_temporal >= streaming.marked);
    CHECK(streaming.fences > 0);
    const Compiled cached = compile(d, s, target, false);
    CHECK(cached.non_temporal == 0);
    // The parallel loop's body is a function of its own, named after the variant.
    ConvSchedule images = s;
    images.parallel = Parallel::Images;
    const Compiled parallel = compile(d, images, target, true);
    CHECK(parallel.marked > 0);
    CHECK(parallel.non_temporal >= parallel.marked);
  }
}

TEST_CASE("streaming stores: stores a vector cannot align with are left ordinary", "[object_code]") {
  // 24 channels, one pixel per tile: a pixel's 96 bytes start every other pixel mid-way
  // through a 64-byte vector, but always on a 32-byte one. (A store split into scalar
  // non-temporal ones would show as movnti.)
  const ConvDescriptor d = parse_descriptor("mb2ic8ih12oc24kh3ph1");
  ConvSchedule s = analytic_schedule(d, target_info(kAvx512));
  s.strategy = Strategy::Gemm, s.mr = 16, s.nr = 1;
  const Compiled avx512 = compile(d, s, kAvx512, true);
  CHECK(avx512.marked == 0);
  CHECK(avx512.non_temporal == 0);
  ConvSchedule narrow = analytic_schedule(d, target_info(kAvx2));
  narrow.strategy = Strategy::Gemm, narrow.mr = 8, narrow.nr = 1;
  const Compiled avx2 = compile(d, narrow, kAvx2, true);
  CHECK(avx2.marked > 0);
  CHECK(avx2.non_temporal >= avx2.marked);
}

TEST_CASE("streaming stores: both variants match the reference bit for bit, forward and backward-data",
          "[object_code]") {
  const TargetInfo t = target_info(host_target_string());
  const int64_t jit_before = kernel_cache_stats().jit;
  for (const char* text : {"mb2ic3ih20oc32kh3ph1", "mb2ic16ih11oc32kh3sh2ph1+relu", "g16mb2ic16ih14oc16kh3ph1"}) {
    const ConvDescriptor d = parse_descriptor(text);
    INFO(d.to_string());
    const auto x = integer_floats(d.mb * d.ih * d.iw * d.ic, -3, 3, 1);
    const auto w = integer_floats(d.oc * d.icg() * d.kh * d.kw, -2, 2, 2);
    const auto bias = integer_floats(d.oc, -4, 4, 3), dy = integer_floats(d.mb * d.oh() * d.ow() * d.oc, -3, 3, 4);
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
  // Every kernel came from the kernel cache: JIT-compiled ones would store normally.
  CHECK(kernel_cache_stats().jit == jit_before);
}

TEST_CASE("streaming stores: fused Clip and HardSwish give the ordinary kernel's bits on real data and NaN",
          "[object_code]") {
  // strict_float keeps fast-math out of their code (generator/conv/epilogue.cpp); a module
  // generated without it would fuse and reorder what the ordinary kernel does not.
  const TargetInfo t = target_info(host_target_string());
  for (const char* text : {"mb2ic16ih12oc32kh3ph1+bias+clip(0,6)", "mb2ic16ih12oc32kh3ph1+bias+hardswish"}) {
    const ConvDescriptor d = parse_descriptor(text);
    INFO(d.to_string());
    auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 5);
    x[7] = std::nanf("");
    const auto w = random_floats(d.oc * d.icg() * d.kh * d.kw, 6), bias = random_floats(d.oc, 7);
    ConvSchedule s = analytic_schedule(d, t);
    std::vector<std::vector<float>> outputs;
    for (const OutputStores stores : {OutputStores::Cached, OutputStores::Streaming}) {
      s.output_stores = stores;
      JitForwardKernel kernel(d, s, t);
      GuardedOutput out(size_t(d.mb * d.oh() * d.ow() * d.oc));
      kernel.run(x.data(), w.data(), bias.data(), out.data());
      outputs.push_back(out.values());
    }
    CHECK(bitwise_equal(outputs[0], outputs[1]));
  }
}
