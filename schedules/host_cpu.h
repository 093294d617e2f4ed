// The running CPU as tuning records name it: model name and data cache sizes, read from
// Linux's /proc and /sys. Provenance only -- what a timing was measured on, never part
// of a record's key.
#pragma once

#include <cstdint>
#include <string>

namespace convgen {

struct HostCpu {
  std::string model;  // "AMD EPYC 9R45 ..." ("unknown" where /proc/cpuinfo has none)
  int64_t l1d_bytes = 0, l2_bytes = 0, l3_bytes = 0;  // per cache, 0 where unknown
};

// Read once per process.
const HostCpu& host_cpu();

}  // namespace convgen
