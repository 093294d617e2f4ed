#include "runtime/ops/pool_channels_last.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace convgen::ops::detail {

namespace {

// Channels held in registers across a window's taps: 4 vectors of 16 (4 AVX-512
// registers; 8 AVX2 or 16 SSE ones in the other clones).
using Vec16 = float __attribute__((vector_size(64)));
constexpr int64_t kVectors = 4, kLanes = 16, kBlock = kVectors * kLanes;

// One output pixel: `taps` point at the channel vectors of its window's pixels inside the
// image, in row-major order. A block of channels stays in registers over all taps (the
// old form re-read and re-wrote a C-float accumulator per tap). Cloned per ISA: a
// maximum is exact, so every clone gives the same bits. `acc < v ? v : acc` is
// std::max(acc, v): a NaN never replaces the accumulator. SqueezeNet's three MaxPools
// (3x3 s2; 64, 128, 256 channels) at batch 1, one thread, Zen 5 AVX-512: 0.236, 0.102,
// 0.045 ms before, 0.161, 0.055, 0.025 after.
__attribute__((target_clones("avx512f", "avx2", "default"))) void max_of_taps(const float* const* taps,
                                                                               int64_t count, int64_t C, float* y) {
  constexpr float lowest = -std::numeric_limits<float>::infinity();
  int64_t c0 = 0;
  for (; c0 + kBlock <= C; c0 += kBlock) {
    Vec16 acc[kVectors];
    for (auto& a : acc) a = Vec16{} + lowest;
    for (int64_t t = 0; t < count; ++t)
      for (int64_t k = 0; k < kVectors; ++k) {
        Vec16 v;
        std::memcpy(&v, taps[t] + c0 + k * kLanes, sizeof v);
        acc[k] = acc[k] < v ? v : acc[k];
      }
    std::memcpy(y + c0, acc, sizeof acc);
  }
  for (; c0 + kLanes <= C; c0 += kLanes) {
    Vec16 acc = Vec16{} + lowest;
    for (int64_t t = 0; t < count; ++t) {
      Vec16 v;
      std::memcpy(&v, taps[t] + c0, sizeof v);
      acc = acc < v ? v : acc;
    }
    std::memcpy(y + c0, &acc, sizeof acc);
  }
  for (int64_t c = c0; c < C; ++c) {
    float acc = lowest;
    for (int64_t t = 0; t < count; ++t) acc = std::max(acc, taps[t][c]);
    y[c] = acc;
  }
}

// Global pooling: a block of 16 channels, 2 vectors of 8 doubles, in registers across the
// pixels (the old 64-float accumulator in memory, 2 doubles wide: EfficientNet-B0's 17
// squeeze-excitation pools at batch 1, one thread, 0.57 -> 0.35 ms on Zen 5). Per channel
// the additions are those of the dense path, in its order.
using Vec8d = double __attribute__((vector_size(64)));
using Vec8f = float __attribute__((vector_size(32)));
constexpr int64_t kPoolBlock = 16;

__attribute__((target_clones("avx512f", "avx2", "default"))) void pool_pixels(const float* x, int64_t spatial,
                                                                               int64_t C, int64_t width, bool max,
                                                                               double* acc) {
  const double first = max ? -std::numeric_limits<double>::infinity() : 0.0;
  if (width == kPoolBlock) {
    Vec8d lo = Vec8d{} + first, hi = lo;
    for (int64_t s = 0; s < spatial; ++s, x += C) {
      Vec8f a, b;
      std::memcpy(&a, x, sizeof a);
      std::memcpy(&b, x + 8, sizeof b);
      const Vec8d da = __builtin_convertvector(a, Vec8d), db = __builtin_convertvector(b, Vec8d);
      if (max) {
        lo = lo < da ? da : lo;
        hi = hi < db ? db : hi;
      } else {
        lo += da;
        hi += db;
      }
    }
    std::memcpy(acc, &lo, sizeof lo);
    std::memcpy(acc + 8, &hi, sizeof hi);
    return;
  }
  std::fill(acc, acc + width, first);
  for (int64_t s = 0; s < spatial; ++s, x += C)
    for (int64_t c = 0; c < width; ++c) acc[c] = max ? std::max(acc[c], double(x[c])) : acc[c] + x[c];
}

}  // namespace

void max_pool_channels_last(const ConstView& x, const Window& w, const View& y) {
  const int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], Wd = x.shape[3];
  const int64_t P = y.shape[2], Q = y.shape[3];
  const int64_t kh = w.kernel[0], kw = w.kernel[1];
#pragma omp parallel for collapse(2) schedule(static) if (N * P * Q * C > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = 0; p < P; ++p) {
      std::vector<const float*> taps(static_cast<size_t>(kh * kw));
      for (int64_t q = 0; q < Q; ++q) {
        int64_t count = 0;
        for (int64_t r = 0; r < kh; ++r) {
          const int64_t i = p * w.strides[0] + r * w.dilations[0] - w.pads_begin[0];
          if (i < 0 || i >= H) continue;
          for (int64_t s = 0; s < kw; ++s) {
            const int64_t j = q * w.strides[1] + s * w.dilations[1] - w.pads_begin[1];
            if (j >= 0 && j < Wd) taps[count++] = x.data + ((n * H + i) * Wd + j) * C;
          }
        }
        max_of_taps(taps.data(), count, C, y.data + ((n * P + p) * Q + q) * C);
      }
    }
}

void global_pool_channels_last(const ConstView& x, int64_t spatial, bool max, const View& y) {
  const auto sy = y.strides();
  const int64_t N = x.shape[0], C = x.shape[1], blocks = (C + kPoolBlock - 1) / kPoolBlock;
  // Images and channel blocks split over the threads. At batch 1 each thread reads every
  // pixel, half of them written by the other core, and is slow on a machine whose cores
  // share no cache -- EfficientNet-B0's 17 pools at batch 1 on a Zen 5 VM: 0.35 ms on one
  // thread, 0.51-0.55 on two -- but one thread alone reading it all is slower still
  // (0.63-0.75). A split by pixels would sum in another order.
#pragma omp parallel for collapse(2) schedule(static) if (N * C * spatial > 65536)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kPoolBlock, width = std::min(kPoolBlock, C - c0);
      double acc[kPoolBlock];
      pool_pixels(x.data + n * spatial * C + c0, spatial, C, width, max, acc);
      for (int64_t c = 0; c < width; ++c)
        y.data[n * sy[0] + (c0 + c) * sy[1]] = static_cast<float>(max ? acc[c] : acc[c] / static_cast<double>(spatial));
    }
}

}  // namespace convgen::ops::detail
