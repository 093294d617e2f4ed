// Whether the running CPU has what a Halide target string's kernels use, so that a
// library compiled for a wider target than the CPU refuses at construction with the
// missing feature named, instead of faulting on an illegal instruction in its first
// kernel. Part of convgen::runtime; generated drivers call it first thing.
#pragma once

#include <functional>
#include <string>

namespace convgen {

// The first ISA feature of `target` ("x86-64-linux-avx-avx2-...") the CPU lacks, by its
// target-string name ("avx512_skylake: avx512bw"), or "" when it has them all. Target
// tokens that are not ISA features are ignored.
std::string missing_cpu_feature(const std::string& target);
// The same against `has` (a CPUID feature name: "sse4.1", "avx2", "f16c", "avx512bw", ...
// -> present), for tests of CPUs other than this one.
std::string missing_cpu_feature(const std::string& target, const std::function<bool(const std::string&)>& has);

// Throws std::runtime_error "<what> was compiled for <target>; this CPU lacks <feature>
// (...)" when missing_cpu_feature(target) is not empty.
void require_cpu_features(const std::string& target, const std::string& what);
void require_cpu_features(const std::string& target, const std::string& what,
                          const std::function<bool(const std::string&)>& has);

}  // namespace convgen
