#include "runtime/driver/cpu_features.h"

#include <cpuid.h>

#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace convgen {

namespace {

// F16C has no __builtin_cpu_supports name in GCC 12: CPUID leaf 1, ECX bit 29.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}

bool cpu_has(const std::string& feature) {
  __builtin_cpu_init();
  // __builtin_cpu_supports needs string literals.
  if (feature == "sse4.1") return __builtin_cpu_supports("sse4.1");
  if (feature == "avx") return __builtin_cpu_supports("avx");
  if (feature == "avx2") return __builtin_cpu_supports("avx2");
  if (feature == "fma") return __builtin_cpu_supports("fma");
  if (feature == "f16c") return has_f16c();
  if (feature == "avx512f") return __builtin_cpu_supports("avx512f");
  if (feature == "avx512cd") return __builtin_cpu_supports("avx512cd");
  if (feature == "avx512bw") return __builtin_cpu_supports("avx512bw");
  if (feature == "avx512dq") return __builtin_cpu_supports("avx512dq");
  if (feature == "avx512vl") return __builtin_cpu_supports("avx512vl");
  return false;
}

// Halide's x86 feature tokens and the CPUID features each needs.
const std::map<std::string, std::vector<std::string>>& token_features() {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"sse41", {"sse4.1"}},
      {"avx", {"avx"}},
      {"avx2", {"avx2"}},
      {"fma", {"fma"}},
      {"f16c", {"f16c"}},
      {"avx512", {"avx512f", "avx512cd"}},
      {"avx512_skylake", {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}},
  };
  return table;
}

}  // namespace

std::string missing_cpu_feature(const std::string& target) { return missing_cpu_feature(target, cpu_has); }

std::string missing_cpu_feature(const std::string& target, const std::function<bool(const std::string&)>& has) {
  std::istringstream tokens(target);
  std::string token;
  while (std::getline(tokens, token, '-')) {
    auto it = token_features().find(token);
    if (it == token_features().end()) continue;
    for (const std::string& f : it->second)
      if (!has(f)) return token == f ? token : token + ": " + f;
  }
  return "";
}

void require_cpu_features(const std::string& target, const std::string& what) {
  require_cpu_features(target, what, cpu_has);
}

void require_cpu_features(const std::string& target, const std::string& what,
                          const std::function<bool(const std::string&)>& has) {
  const std::string missing = missing_cpu_feature(target, has);
  if (missing.empty()) return;
  throw std::runtime_error(what + " was compiled for " + target + "; this CPU lacks " + missing +
                           " (recompile with convgen compile --target set to what the deployment CPUs have, "
                           "docs/cmake.md)");
}

}  // namespace convgen
