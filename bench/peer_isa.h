// Matching the peers' instruction set to the one convgen's kernels are built for, so that
// a ratio compares code generation, not vector width. Must run before the first BLIS or
// oneDNN call of the process: both libraries fix their choice on first use.
#pragma once

#include <string>

namespace convgen::bench {

struct PeerIsa {
  std::string blis_arch;     // BLIS sub-configuration in use ("zen3", "skx", "generic", ...)
  std::string blis_how;      // why: "chosen by BLIS", "set for 8 lanes", "BLIS_ARCH_TYPE from the environment", ...
  std::string onednn_isa;    // oneDNN's effective ISA cap ("avx2", "avx512_core", "native")
};

// `vector_floats` is convgen's target width (8 = AVX2, 16 = AVX-512). With `matched`:
// - oneDNN is capped at that ISA (avx2, or avx512_core) with dnnl::set_max_cpu_isa;
// - BLIS keeps its own choice when that is a kernel set of the same width; otherwise (this
//   Debian BLIS picks `generic` on CPUs it does not know) it is given the kernel set for
//   that width (skx for 16 lanes; zen3 on AMD or haswell elsewhere for 8), through
//   BLIS_ARCH_TYPE, after a child process has proved that this BLIS build has it.
// A BLIS_ARCH_TYPE set by the user is always left alone. Without `matched` both
// libraries choose for themselves.
PeerIsa select_peer_isa(int vector_floats, bool matched);

}  // namespace convgen::bench
