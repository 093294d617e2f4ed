// Measured fp32 FMA throughput of this machine: the denominator of every "% of peak".
#pragma once

namespace convgen {

// Runs 12 independent FMA accumulator chains on `threads` OpenMP threads at once for
// about 0.2 s, three times, and returns the best total rate in GFLOP/s over all threads
// (one FMA = 2 flops x lanes). `vector_floats` picks the instruction set the peak is
// measured with, the same as the kernels being rated: 16 = AVX-512F (zmm), anything
// else = AVX2+FMA (ymm; narrower targets are rated against the AVX2 peak). 16 on a CPU
// without AVX-512F throws std::invalid_argument. `threads` < 1 is treated as 1.
// runtime/probe/fma_probe_avx2.cpp and runtime/probe/fma_probe_avx512.cpp are the only files built with those ISAs.
double measure_fma_peak_gflops(int threads, int vector_floats = 8);

// The lanes per FMA the probe uses for a target of `vector_floats` lanes (16 or 8).
inline int fma_probe_lanes(int vector_floats) { return vector_floats == 16 ? 16 : 8; }

}  // namespace convgen
