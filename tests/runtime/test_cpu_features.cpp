// A driver compiled for features the CPU lacks refuses at construction, naming them
// (runtime/driver/cpu_features.h): the target-token table against simulated CPUs, and
// this CPU against the widest target it resolves "host" to.
#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>

#include "runtime/driver/cpu_features.h"
#include "schedules/conv_schedule.h"

using namespace convgen;

TEST_CASE("cpu features: the first missing feature of a target, by its token", "[runtime]") {
  const std::string avx512 = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";
  const std::string avx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";
  const std::set<std::string> zen3 = {"sse4.1", "avx", "avx2", "fma", "f16c"};
  auto cpu = [](std::set<std::string> features) {
    return [features](const std::string& f) { return features.count(f) > 0; };
  };
  CHECK(missing_cpu_feature(avx2, cpu(zen3)).empty());
  CHECK(missing_cpu_feature(avx512, cpu(zen3)) == "avx512: avx512f");
  std::set<std::string> knights = zen3;
  knights.insert({"avx512f", "avx512cd"});  // AVX-512 without BW/DQ/VL
  CHECK(missing_cpu_feature(avx512, cpu(knights)) == "avx512_skylake: avx512bw");
  CHECK(missing_cpu_feature(avx2, cpu({"sse4.1", "avx"})) == "avx2");
  CHECK(missing_cpu_feature("x86-64-linux-sse41", cpu({})) == "sse41: sse4.1");
  CHECK(missing_cpu_feature("x86-64-linux", cpu({})).empty());
  CHECK(missing_cpu_feature("x86-64-linux-avx2-no_asserts", cpu(zen3)).empty());  // not an ISA token
}

TEST_CASE("cpu features: this CPU runs what host resolves to; the refusal names the model and feature",
          "[runtime]") {
  CHECK(missing_cpu_feature(host_target_string()).empty());
  CHECK_NOTHROW(require_cpu_features(host_target_string(), "model lenet"));
  const auto avx2_cpu = [](const std::string& f) { return f.rfind("avx512", 0) != 0; };
  try {
    require_cpu_features("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41", "model lenet", avx2_cpu);
    FAIL("no refusal");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("model lenet was compiled for "
                                           "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41; "
                                           "this CPU lacks avx512: avx512f (recompile with"));
  }
}
