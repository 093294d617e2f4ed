// Rules of the analytic default and of the parallel variants, checked on the schedules
// they return (no Halide: the kernels these name run bit-exact in tests/conv/'s sweeps).
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/kernel_plan.h"

using namespace convgen;

namespace {
const char* const kAvx2 = "x86-64-linux-avx-avx2-f16c-fma-sse41";
const char* const kAvx512 = "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";
}  // namespace

TEST_CASE("analytic default: forward channel blocks stay within L2 whatever the workspace budget", "[schedule]") {
  // Large images with many channels leave a large budget: VGG conv4 and conv5, AlexNet
  // conv2, ResNet's res4 / res5 3x3 and their backward-data convolutions (C and K swap).
  const char* layers[] = {"mb8ic512ih28oc512oh28kh3ph1", "mb8ic256ih28oc512oh28kh3ph1", "mb8ic512ih14oc512oh14kh3ph1",
                          "mb8ic96ih27oc256oh27kh5ph2",  "mb8ic256ih56oc256oh56kh3ph1", "mb8ic512ih7oc512oh7kh3ph1",
                          "mb8ic256ih14oc256oh14kh3ph1", "mb8ic512ih28oc256oh28kh3ph1", "mb64ic512ih28oc512oh28kh3ph1"};
  for (const char* target : {kAvx512, kAvx2}) {
    const TargetInfo t = target_info(target);
    for (const char* layer : layers) {
      const ConvDescriptor d = parse_descriptor(layer);
      const ConvSchedule s = analytic_schedule(d, t);
      INFO(target << " " << layer << ": " << describe(s));
      const int64_t panel_bytes_per_channel = d.icg() * d.kh * d.kw * 4;
      const int64_t weights = d.oc * panel_bytes_per_channel;
      REQUIRE(s.strategy == Strategy::Gemm);
      if (weights > t.l2_bytes) {
        // Weights past L2 are blocked, and a block past L2 is one register tile at most.
        REQUIRE(s.mc > 0);
        CHECK((s.mc == s.mr || s.mc * panel_bytes_per_channel <= t.l2_bytes));
        const int64_t tiles = (d.ocg() + s.mr - 1) / s.mr;
        CHECK(s.mc % s.mr == 0);
        CHECK(tiles % (s.mc / s.mr) == 0);  // whole tiles, dividing the tile count
      }
    }
  }
  // The layer the rule was measured on: one 32-channel tile per block on AVX-512.
  const ConvSchedule conv4_2 = analytic_schedule(parse_descriptor("mb8ic512ih28oc512oh28kh3ph1"), target_info(kAvx512));
  CHECK(conv4_2.mc == conv4_2.mr);
  CHECK(conv4_2.loop_order == LoopOrder::ChannelsOuter);
}

TEST_CASE("analytic default: 2 x 14 pixel tiles on 32 registers, only where they were measured to pay", "[schedule]") {
  const TargetInfo wide = target_info(kAvx512), narrow = target_info(kAvx2);
  auto tile = [](const char* layer, const TargetInfo& t) {
    const ConvSchedule s = analytic_schedule(parse_descriptor(layer), t);
    return std::to_string(s.mr) + "x" + std::to_string(s.nr);
  };
  // 3x3 over rows that 14 tiles, 13-pixel rows, rows too long for in-row tiles, a 1x1
  // expanding layer, an unpadded 11x11/4.
  for (const char* layer : {"mb8ic256ih56oc256oh56kh3ph1", "mb8ic128ih28oc128oh28kh3ph1", "mb8ic384ih13oc384oh13kh3ph1",
                            "mb8ic64ih112oc128oh112kh3ph1", "mb8ic128ih28oc512oh28kh1", "mb8ic3ih227oc96oh55kh11sh4"}) {
    INFO(layer);
    CHECK(tile(layer, wide) == "32x14");
  }
  // Kept: 4 vectors on 1x1 reducing layers, padded rows of 16 and 32 pixels (also over
  // RGB), padded rows of up to 8, images below two tiles, 3x3 over RGB (aligned 7-pixel
  // tiles). (24 channels over 14-pixel rows take 32x14 by the row rule below.)
  CHECK(tile("mb8ic512ih28oc128oh28kh1", wide) == "64x6");
  CHECK(tile("mb8ic32ih16oc32oh16kh5ph2", wide) != "32x14");
  CHECK(tile("mb8ic32ih32oc32oh32kh5ph2", wide) != "32x14");
  CHECK(tile("mb8ic3ih32oc32oh32kh5ph2", wide) != "32x14");
  CHECK(tile("mb8ic512ih7oc512oh7kh3ph1", wide) != "32x14");
  CHECK(tile("mb8ic256ih5oc256oh5kh1", wide) != "32x14");
  CHECK(tile("mb8ic3ih224oc32oh112kh3sh2ph1", wide) == "32x7");
  // 16 registers: never past 8 pixels.
  for (const char* layer : {"mb8ic256ih56oc256oh56kh3ph1", "mb8ic128ih28oc512oh28kh1"})
    CHECK(analytic_schedule(parse_descriptor(layer), narrow).nr <= 8);
}

TEST_CASE("analytic default: 1x1 kernels read their input in place on 32 registers; long reductions take 4 x 7",
          "[schedule]") {
  const TargetInfo wide = target_info(kAvx512), narrow = target_info(kAvx2);
  auto schedule = [](const char* layer, const char* pass, const TargetInfo& t) {
    return analytic_schedule_for_pass(parse_descriptor(layer), pass, t);
  };
  auto tile = [](const ConvSchedule& s) { return std::to_string(s.mr) + "x" + std::to_string(s.nr); };
  // ResNet-50's 1x1 layers, forward and backward-data (C and K swap): never packed.
  const char* layers[] = {"mb8ic64ih56oc256oh56kh1",  "mb8ic256ih56oc64oh56kh1",     "mb8ic128ih28oc512oh28kh1",
                          "mb8ic256ih56oc512kh1sh2",  "mb8ic512ih28oc1024kh1sh2",    "mb8ic256ih14oc1024oh14kh1",
                          "mb8ic512ih7oc2048oh7kh1",  "mb8ic1024ih14oc2048kh1sh2",   "mb8ic2048ih7oc512oh7kh1"};
  for (const char* layer : layers)
    for (const char* pass : {"fwd", "bwd_data"}) {
      INFO(layer << " " << pass);
      CHECK(schedule(layer, pass, wide).pack_input == PackInput::None);
    }
  // Reductions over 512 channels and more whose 2 x 14 tile's inputs (28 KiB and more)
  // would fill over half of L1: 4 vectors x 7 pixels. Over 256 (14 KiB): 2 x 14 stays.
  CHECK(tile(schedule("mb8ic512ih7oc2048oh7kh1", "fwd", wide)) == "64x7");
  CHECK(tile(schedule("mb8ic2048ih7oc512oh7kh1", "fwd", wide)) == "64x7");
  CHECK(tile(schedule("mb8ic1024ih14oc2048kh1sh2", "fwd", wide)) == "64x7");
  CHECK(tile(schedule("mb8ic512ih7oc2048oh7kh1", "bwd_data", wide)) == "64x7");
  CHECK(tile(schedule("mb8ic2048ih7oc512oh7kh1", "bwd_data", wide)) == "64x7");
  CHECK(tile(schedule("mb8ic256ih14oc1024oh14kh1", "fwd", wide)) == "32x14");
  CHECK(tile(schedule("mb8ic256ih56oc512kh1sh2", "fwd", wide)) == "32x14");
  // Channels that 64 does not divide keep 2 x 14 (no zero-filled half tile).
  CHECK(tile(schedule("mb8ic960ih7oc160oh7kh1", "fwd", wide)) == "32x14");
  // 16 registers: two 8-lane vectors over a 1x1 kernel still read a packed copy.
  CHECK(schedule("mb8ic128ih28oc512oh28kh1", "fwd", narrow).pack_input != PackInput::None);
}

TEST_CASE("analytic default: streaming output stores where the output outgrows the last-level cache", "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto stores = [](const char* layer, const char* pass, const TargetInfo& t) {
    return analytic_schedule_for_pass(parse_descriptor(layer), pass, t).output_stores;
  };
  // Over 1.5x the row's L3 (24 MiB on AVX-512): VGG conv1_1 (98 MiB), ResNet-50's conv1
  // and res2 1x1 64->256 (24.5 MiB), and dX of res2 1x1 256->64, of the strided
  // projection 256->512 (residue classes) and of a strided depthwise layer (in place).
  CHECK(stores("mb8ic3ih224oc64kh3ph1", "fwd", avx512) == OutputStores::Streaming);
  CHECK(stores("mb8ic3ih224oc64oh112kh7sh2ph3", "fwd", avx512) == OutputStores::Streaming);
  CHECK(stores("mb8ic64ih56oc256kh1", "fwd", avx512) == OutputStores::Streaming);
  CHECK(stores("mb8ic256ih56oc64kh1", "bwd_data", avx512) == OutputStores::Streaming);
  CHECK(stores("mb8ic256ih56oc512kh1sh2", "bwd_data", avx512) == OutputStores::Streaming);
  CHECK(stores("g96mb8ic96ih112oc96oh56kh3sh2ph1", "bwd_data", avx512) == OutputStores::Streaming);
  // Below it the output is still cached when read: the 3x3/2 RGB stem (12.3 MiB), the
  // same layers at a smaller batch, and every backward-weights pass (dW is small).
  CHECK(stores("mb8ic3ih224oc32oh112kh3sh2ph1", "fwd", avx512) == OutputStores::Cached);
  CHECK(stores("mb4ic64ih56oc256kh1", "fwd", avx512) == OutputStores::Cached);
  CHECK(stores("mb4ic256ih56oc64kh1", "bwd_data", avx512) == OutputStores::Cached);
  CHECK(stores("mb64ic3ih224oc64kh3ph1", "bwd_weights", avx512) == OutputStores::Cached);
  // AVX2's row assumes a 32 MiB L3: 48 MiB and more.
  CHECK(stores("mb8ic3ih224oc64kh3ph1", "fwd", avx2) == OutputStores::Streaming);
  CHECK(stores("mb8ic64ih56oc256kh1", "fwd", avx2) == OutputStores::Cached);
}

TEST_CASE("analytic default: memory-bound depthwise kernels stream from half the last-level cache", "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto stores = [](const char* layer, const char* pass, const TargetInfo& t) {
    return analytic_schedule_for_pass(parse_descriptor(layer), pass, t).output_stores;
  };
  // 9 FMAs per output value, output from 8 MiB on AVX-512: depthwise 3x3 144 at 56x56
  // (14 MiB), MobileNetV2's 32 channels at 112x112 (12.3 MiB) and 96 at 112 -> 56 (9.2
  // MiB), forward and backward-data.
  for (const char* pass : {"fwd", "bwd_data"}) {
    CAPTURE(pass);
    CHECK(stores("g144mb8ic144ih56oc144oh56kh3ph1", pass, avx512) == OutputStores::Streaming);
    CHECK(stores("g32mb8ic32ih112oc32oh112kh3ph1", pass, avx512) == OutputStores::Streaming);
  }
  CHECK(stores("g96mb8ic96ih112oc96oh56kh3sh2ph1", "fwd", avx512) == OutputStores::Streaming);
  // Below half the cache (the same layer at mb 4: 7 MiB; AVX2 assumes 32 MiB), with more
  // FMAs per value (a 5x5 depthwise: 25; grouped 4 channels x 3x3: 36; the RGB stem's 27
  // in the test case above), and in backward-weights, the stores stay ordinary.
  CHECK(stores("g144mb4ic144ih56oc144oh56kh3ph1", "fwd", avx512) == OutputStores::Cached);
  CHECK(stores("g144mb8ic144ih56oc144oh56kh3ph1", "fwd", avx2) == OutputStores::Cached);
  CHECK(stores("g144mb8ic144ih56oc144oh56kh5ph2", "fwd", avx512) == OutputStores::Cached);
  CHECK(stores("g32mb8ic128ih56oc128oh56kh3ph1", "fwd", avx512) == OutputStores::Cached);
  CHECK(stores("g144mb8ic144ih56oc144oh56kh3ph1", "bwd_weights", avx512) == OutputStores::Cached);
}

TEST_CASE("analytic default: RGB stems stage bands of 2 output rows where a staged value feeds few FMAs",
          "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto staging = [](const char* layer, const TargetInfo& t) {
    const ConvSchedule s = analytic_schedule(parse_descriptor(layer), t);
    return to_string(s.pack_input) + " nc=" + std::to_string(s.nc);
  };
  // 3x3/2 over RGB to 64 channels (144 FMAs per staged value): 2 rows of 112 pixels,
  // whole 7-pixel tiles (on AVX2 the 24x4 tiles the rows). To 32 channels it reads the
  // input in place on 32 registers (the next case).
  CHECK(staging("mb8ic3ih224oc64oh112kh3sh2ph1", avx512) == "rows nc=224");
  CHECK(staging("mb8ic3ih224oc64oh112kh3sh2ph1", avx2) == "rows nc=224");
  // Kept on the slab: a value feeding more FMAs (VGG conv1_1: 576; the 7x7/2 stem, a
  // longer reduction), tiles that do not divide the rows (AVX2 16x6 over 112), a slab
  // inside L1 (cifar10 conv1, MNIST-sized inputs).
  CHECK(staging("mb8ic3ih224oc64oh224kh3ph1", avx512) == "image nc=0");
  CHECK(staging("mb8ic3ih224oc64oh112kh7sh2ph3", avx512) == "image nc=0");
  CHECK(staging("mb8ic3ih224oc32oh112kh3sh2ph1", avx2) == "image nc=0");
  CHECK(staging("mb8ic3ih32oc32oh32kh5ph2", avx512) == "image nc=0");
  CHECK(staging("mb8ic1ih28oc32oh28kh3ph1", avx512) == "image nc=0");
}

TEST_CASE("analytic default: few-channel layers whose windows span at most two strides read their input in place "
          "on 32 registers",
          "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto plan = [](const char* layer, const TargetInfo& t) {
    const ConvSchedule s = analytic_schedule(parse_descriptor(layer), t);
    return fmt::format("{} nc={} {}x{}", to_string(s.pack_input), s.nc, s.mr, s.nr);
  };
  auto partitioned = [](const char* layer, const TargetInfo& t) {
    const ConvDescriptor d = parse_descriptor(layer);
    return partitions_padding_borders(d, analytic_schedule(d, t), t, /*output_staged=*/false);
  };
  // The taps unrolled, borders partitioned (partitions_padding_borders): the 3x3/2 RGB
  // stem, 16 output channels (NR 6 -> 7, dividing the 112-pixel rows), 3x3/2 over 8
  // channels, odd_shapes' 5x5/3 16->24 (one 13-pixel row per tile).
  CHECK(plan("mb8ic3ih224oc32oh112kh3sh2ph1", avx512) == "none nc=0 32x7");
  CHECK(plan("mb8ic3ih224oc16oh112kh3sh2ph1", avx512) == "none nc=0 16x7");
  CHECK(plan("mb8ic8ih56oc32oh28kh3sh2ph1", avx512) == "none nc=0 32x14");
  CHECK(plan("mb8ic16ih37iw41oc24kh5sh3ph1", avx512) == "none nc=0 32x13");
  CHECK(partitioned("mb8ic16ih37iw41oc24kh5sh3ph1", avx512));
  CHECK(partitioned("mb8ic3ih224oc32oh112kh3sh2ph1", avx512));
  // Not: wider windows (5x5/2, the 7x7/2 stem), stride 1, two channel tiles, 32 input
  // channels (no fused kernel-row loop; its taps skip the padding instead), 16 registers.
  CHECK(!partitioned("mb8ic3ih64oc32oh32kh5sh2ph2", avx512));
  CHECK(!partitioned("mb8ic3ih224oc64oh112kh7sh2ph3", avx512));
  CHECK(!partitioned("mb8ic3ih32oc32oh32kh3ph1", avx512));
  CHECK(!partitioned("mb8ic3ih224oc64oh112kh3sh2ph1", avx512));
  CHECK(!partitioned("mb8ic32ih56oc32oh28kh3sh2ph1", avx512));
  CHECK(!partitioned("mb8ic3ih224oc32oh112kh3sh2ph1", avx2));
  CHECK(!partitioned("mb8ic16ih37iw41oc24kh5sh3ph1", avx2));
}

TEST_CASE("analytic default: a fused kernel-row loop over rows of 9 to 14 pixels takes one tile per row",
          "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto tile = [](const char* layer, const TargetInfo& t) {
    const ConvSchedule s = analytic_schedule(parse_descriptor(layer), t);
    return std::to_string(s.mr) + "x" + std::to_string(s.nr);
  };
  // odd_shapes' 5x5/3 16->24: 12x13 outputs (and a 14-pixel-row variant: 32x14 1.19x
  // 32x8 in one interleaved run).
  CHECK(tile("mb8ic16ih37iw41oc24kh5sh3ph1", avx512) == "32x13");
  CHECK(tile("mb8ic16ih37iw41oc24oh13ow14kh5sh3ph1", avx512) == "32x14");
  CHECK(tile("mb8ic16ih32oc32kh5sh3ph1", avx512) == "32x10");
  // Not with 32 input channels (a channel loop per tap, no fused loop), nor on 16
  // registers, nor rows of 8 or fewer (one 8-pixel tile already) or of 15 and more.
  CHECK(tile("mb8ic32ih37iw41oc24kh5sh3ph1", avx512) != "32x13");
  CHECK(tile("mb8ic16ih37iw41oc24kh5sh3ph1", avx2).find("x13") == std::string::npos);
  CHECK(tile("mb8ic16ih24oc24oh8kh5sh3ph1", avx512) == "32x8");
  CHECK(tile("mb8ic16ih46oc24oh15kh5sh3ph1", avx512).find("x15") == std::string::npos);
}

TEST_CASE("analytic default: depthwise backward-weights takes two vectors of channels where 32 registers hold them",
          "[schedule]") {
  const TargetInfo avx512 = target_info(kAvx512), avx2 = target_info(kAvx2);
  auto mr = [](const char* layer, const TargetInfo& t) {
    return analytic_schedule_for_pass(parse_descriptor(layer), "bwd_weights", t).mr;
  };
  // MobileNetV2's depthwise layers whose channels are whole pairs of 16-lane vectors.
  for (const char* layer : {"g32mb8ic32ih112oc32kh3ph1", "g96mb8ic96ih112oc96oh56kh3sh2ph1",
                            "g192mb8ic192ih28oc192kh3ph1", "g576mb8ic576ih14oc576kh3ph1", "g960mb8ic960ih7oc960kh3ph1"}) {
    INFO(layer);
    CHECK(mr(layer, avx512) == 32);
    CHECK(mr(layer, avx2) == 8);  // 16 registers: one vector
  }
  // A pair would leave a ragged tile (144 = 4.5 x 32): one vector.
  CHECK(mr("g144mb8ic144ih56oc144kh3ph1", avx512) == 16);
}

TEST_CASE("parallel variant: partitions skipped only where gemm_input_lanes runs", "[schedule]") {
  // The generator refuses gemm_input_lanes on a 3x3 or padded layer, or one with fewer
  // input channels per group than a vector, and runs gemm, which then takes the small
  // dW's partitions like any gemm schedule. parallel_variant does not see the target:
  // below AVX-512's 16 channels per group it gives partitions (an input-lane kernel on
  // a narrower target ignores them).
  ConvSchedule s;
  s.strategy = Strategy::GemmInputLanes;
  s.mr = 64;
  s.nr = 6;
  const ConvDescriptor one_by_one = parse_descriptor("mb8ic256ih14oc64oh14kh1");
  const ConvDescriptor three_by_three = parse_descriptor("mb8ic64ih14oc64oh14kh3ph1");
  const ConvDescriptor padded_1x1 = parse_descriptor("mb8ic256ih14oc64oh16kh1ph1");
  const ConvDescriptor narrow_groups = parse_descriptor("g8mb8ic64ih14oc64oh14kh1");
  CHECK(parallel_variant(one_by_one, "bwd_weights", s, Parallel::Images).partitions == 1);
  CHECK(parallel_variant(three_by_three, "bwd_weights", s, Parallel::Images).partitions == 4);
  CHECK(parallel_variant(padded_1x1, "bwd_weights", s, Parallel::Images).partitions == 4);
  CHECK(parallel_variant(narrow_groups, "bwd_weights", s, Parallel::Images).partitions == 4);
  s.strategy = Strategy::Gemm;
  CHECK(parallel_variant(one_by_one, "bwd_weights", s, Parallel::Images).partitions == 4);
}
