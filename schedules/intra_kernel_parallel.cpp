// The intra-kernel parallel variants of a schedule (schedules/conv_schedule.h): which
// loop the threads split, and the reduction partitions of a small weight gradient.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/kernel_plan.h"

namespace convgen {

// Row bands a staged input is split into for threads over one image's pixels.
constexpr int64_t kMinParallelRowBands = 16;
// Output bytes below which a depthwise forward layer runs on one thread.
constexpr int64_t kMinParallelDepthwiseBytes = 512 * 1024;

namespace {

// Threads over the pixels of one image share its staged input only if it is staged per
// pixel block: a slab packed per image is packed on one thread before the parallel loop,
// and a few row bands split unevenly. Zen 5 AVX-512, batch 1, `tune --compare`, the
// MobileNet-V2 stem (3x3 s2, 3->32 at 224x224), slab vs 7-row bands: 1 thread 143 vs 138
// GF/s, 2 threads 193 vs 325; its 1x1 96->24 at 56x56 in 3 bands vs 14: 1 thread 130 vs
// 120, 2 threads 141 vs 205. Bands of ceil(rows/16) rows (within 1/16 of even for 1, 2,
// 4, 8, 16 threads), but at least enough rows that a band's halo at most doubles what it
// packs. The bands are fixed by the layer, so the bits do not depend on the thread count
// (they may differ from the slab's, as between any two schedules: on AVX-512 the stem's
// flat rows sum in another order).
ConvSchedule staged_rows_for_threads(const ConvDescriptor& d, ConvSchedule s, std::vector<std::string>* why) {
  if (s.pack_input != PackInput::Image && s.pack_input != PackInput::Rows) return s;
  const int64_t rows = d.oh(), halo = (d.kh - 1) * d.dh;
  // A band of r output rows packs (r - 1) * sh + halo + 1 input rows; at most 2 * r * sh.
  const int64_t min_rows = std::max<int64_t>(1, (halo + 1 - d.sh + d.sh - 1) / d.sh);
  const int64_t band_rows = std::max(min_rows, (rows + kMinParallelRowBands - 1) / kMinParallelRowBands);
  if (band_rows >= rows) return s;
  const int64_t nc = band_rows * d.ow();
  if (s.pack_input == PackInput::Rows && s.nc > 0 && s.nc <= nc) return s;
  if (why)
    why->push_back(fmt::format("parallel variant: input staged in bands of {} output rows ({} bands) for the threads",
                               band_rows, (rows + band_rows - 1) / band_rows));
  s.pack_input = PackInput::Rows;
  s.nc = static_cast<int>(nc);
  return s;
}

}  // namespace

ConvSchedule parallel_variant(const ConvDescriptor& d, const std::string& pass, ConvSchedule s, Parallel p,
                              std::vector<std::string>* why) {
  s.parallel = p == Parallel::None ? p : intra_kernel_loop(d, pass, s, p);
  if (s.parallel == Parallel::Pixels && pass != "bwd_weights") s = staged_rows_for_threads(d, s, why);
  // A small depthwise layer moves more bytes than it computes: on threads it waits on the
  // other core's cache for its input and output lines and the fork. Zen 5 VM (no cache
  // shared between its 2 vCPUs), MobileNet-V2 at batch 1, 1 vs 2 threads, ms: 3x3 at
  // 7x7x960 (184 KiB out) 0.010 vs 0.017, 14x14x384 0.014 vs 0.023, 14x14x576 (441 KiB)
  // 0.022 vs 0.034; 28x28x192 (588 KiB) 0.028 vs 0.028; 56x56x144 0.082 vs 0.060.
  const int64_t output_bytes = d.mb * d.oh() * d.ow() * d.oc * 4;
  if (s.parallel == Parallel::Pixels && pass == "fwd" && s.strategy == Strategy::Depthwise &&
      output_bytes < kMinParallelDepthwiseBytes) {
    s.parallel = Parallel::None;
    if (why)
      why->push_back(fmt::format("parallel variant: serial, a depthwise layer of {} KiB output is below {} KiB",
                                 output_bytes / 1024, kMinParallelDepthwiseBytes / 1024));
  }
  // One parallel loop per reduction item forked and joined a few microseconds of work
  // at a time. Zen 5, 2 threads, mb 8, partitions 4 vs 1 (GF/s): AVX2 1x1 64->64 at
  // 56x56 217 vs 89-167, 1x1 512->128 at 28x28 202 vs 179, 3x3 128 at 28x28 239 vs
  // 225; AVX-512 the same 407 vs 271, 418 vs 300, 424 vs 321. Larger dW pays for the
  // partitions' private sums: 3x3 256 at 14x14 (2.25 MiB) on AVX-512 340 vs 426, 3x3
  // 512 at 7x7 (9 MiB) 256 vs 370, 1x1 1024->2048 216 vs 300.
  const int64_t dw_bytes = d.oc * d.icg() * d.kh * d.kw * 4;
  // (gemm_input_lanes has no partitions: its threads split the input-channel tiles. Where
  // the generator refuses it for gemm -- a window not 1x1, padded, or fewer input
  // channels per group than a vector -- gemm's apply. Below AVX-512's 16 floats a
  // narrower target may still take input lanes, which then ignores the partitions.)
  const bool input_lanes = s.strategy == Strategy::GemmInputLanes && input_lane_window(d) && d.icg() >= 16;
  if (pass == "bwd_weights" && p != Parallel::None && s.partitions == 1 && dw_bytes <= (int64_t(1) << 20) &&
      !input_lanes) {
    s.partitions = 4;
    if (why)
      why->push_back(
          fmt::format("default: parallel variant: dW of {} KiB, its reduction in 4 partitions", dw_bytes / 1024));
  }
  return s;
}

Parallel intra_kernel_loop(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                           Parallel images_or_pixels) {
  // Backward-data's classes are forward convolutions producing dX: C/g output channels.
  const int64_t channels = pass == "bwd_data" ? d.icg() : d.ocg();
  // Zen 5 AVX-512, 2 threads, a ResNeXt layer4 1x1 2048->1024 over 32 samples of a 1x1
  // image (one 1x32 image, MC 48), forward / backward-data / backward-weights GF/s:
  // pixels 48-99 (below its own 95-145 on one thread: 43 blocks packed on one thread,
  // 43 forks of 8 tiny tiles each). More than one register tile of channels, or the
  // generator would refuse the split.
  if (s.strategy == Strategy::Gemm && pass != "bwd_weights" && s.loop_order == LoopOrder::ChannelsOuter &&
      s.mc > 0 && s.mc < channels && channels > s.mr)
    return Parallel::Channels;
  return images_or_pixels;
}

}  // namespace convgen
