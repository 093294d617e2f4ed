// The intra-kernel parallel variants of a schedule (schedules/conv_schedule.h): which
// loop the threads split, and the reduction partitions of a small weight gradient.
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

ConvSchedule parallel_variant(const ConvDescriptor& d, const std::string& pass, ConvSchedule s, Parallel p,
                              std::vector<std::string>* why) {
  s.parallel = p == Parallel::None ? p : intra_kernel_loop(d, pass, s, p);
  // One parallel loop per reduction item forked and joined a few microseconds of work
  // at a time. Zen 5, 2 threads, mb 8, partitions 4 vs 1 (GF/s): AVX2 1x1 64->64 at
  // 56x56 217 vs 89-167, 1x1 512->128 at 28x28 202 vs 179, 3x3 128 at 28x28 239 vs
  // 225; AVX-512 the same 407 vs 271, 418 vs 300, 424 vs 321. Larger dW pays for the
  // partitions' private sums: 3x3 256 at 14x14 (2.25 MiB) on AVX-512 340 vs 426, 3x3
  // 512 at 7x7 (9 MiB) 256 vs 370, 1x1 1024->2048 216 vs 300.
  const int64_t dw_bytes = d.oc * d.icg() * d.kh * d.kw * 4;
  if (pass == "bwd_weights" && p != Parallel::None && s.partitions == 1 && dw_bytes <= (int64_t(1) << 20)) {
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
