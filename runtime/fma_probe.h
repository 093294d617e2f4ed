// Measured fp32 FMA throughput of this machine: the denominator of every "% of peak".
#pragma once

namespace convgen {

// Runs 12 independent AVX2 FMA accumulator chains (vfmadd on 8 fp32 lanes) on `threads`
// OpenMP threads at once for about 0.2 s, three times, and returns the best total
// rate in GFLOP/s over all threads (one FMA = 2 flops x 8 lanes). `threads` < 1 is
// treated as 1. fma_probe.cpp is the only file compiled with -mavx2 -mfma.
double measure_fma_peak_gflops(int threads);

}  // namespace convgen
