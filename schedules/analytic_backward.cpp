// Analytic defaults of the backward passes (docs/schedules.md, "Backward passes").
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "schedules/backward_data_classes.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/errors.h"
#include "schedules/kernel_plan.h"

namespace convgen {

namespace {

void note(std::vector<std::string>* why, const std::string& line) {
  if (why) why->push_back("default: " + line);
}

// Backward-data runs the forward generator on each residue class's derived convolution;
// the class with the most work (pixels x taps) decides the schedule all classes share.
ConvSchedule backward_data_default(const ConvDescriptor& d, const TargetInfo& t, std::vector<std::string>* why) {
  // Strided depthwise: dX pixel by pixel in place (computes_depthwise_dx_in_place), one
  // vector of channels x two periods of the column stride. The per-class form staged
  // each class, copied it into dX and packed dY per class. Zen 5 AVX-512, 1 thread, mb 8,
  // against oneDNN in the same run: 3x3/2 96 ch at 112x112 1.09-1.19x vs 0.44x, 144 ch at
  // 56x56 1.18-1.33x vs 0.47x, 192 ch at 28x28 1.95x vs 0.60x, 576 ch at 14x14 2.29x vs
  // 0.74x, 5x5/2 240 ch at 28x28 1.52x vs 0.75x. Two vectors of channels or NR 2 or 8
  // measured within noise of it.
  ConvSchedule in_place;
  in_place.strategy = Strategy::Depthwise;
  in_place.pack_input = PackInput::None;
  in_place.mr = t.vector_floats;
  in_place.nr = static_cast<int>(2 * d.sw);
  // Column strides up to 4 (tiles of up to 8 pixels): the measured range.
  if (d.sw <= 4 && computes_depthwise_dx_in_place(d, in_place)) {
    note(why, fmt::format("backward-data: strided depthwise, dX pixel by pixel in place, tile {}x{}", in_place.mr,
                          depthwise_dx_row_tile(d, in_place)));
    in_place.output_stores = default_output_stores(d, "bwd_data", t, why);
    return in_place;
  }
  const ConvDescriptor* largest = nullptr;
  int64_t most = -1;
  const auto classes = backward_data_classes(d);
  for (const ResidueClass& c : classes) {
    if (c.zero()) continue;
    const int64_t work = c.rows.count * c.cols.count * c.rows.taps * c.cols.taps;
    if (work > most) most = work, largest = &c.derived;
  }
  if (!largest) {
    note(why, "backward-data: every residue class is zero; nothing to compute");
    return ConvSchedule{};
  }
  note(why, fmt::format("backward-data: the forward default of the residue class with the most work, {}",
                        largest->normalised()));
  ConvContext context;
  context.output_staged = !single_class(classes, d);
  context.input_computed = d.relu;
  ConvSchedule s = analytic_schedule(*largest, t, why, context);
  // One class: its output is dX, and analytic_schedule decided for it.
  if (context.output_staged) s.output_stores = default_output_stores(d, "bwd_data", t, why);
  return s;
}

// Backward-weights: an MR x NR tile of output channels x weight taps. Vectors along K/g
// when it fills one (GEMM), across groups otherwise. Reduction items of about 512 output
// pixels in whole rows: the item's dY slice (512 x MR floats) stays in L1 per channel
// tile and its input rows in L2, and the dW tile update costs 2 accesses per 1024 flops.
// Few tiles (a small weight tensor, e.g. 3x5x5 -> 32) cannot feed threads: split the
// reduction into partitions so parallel runs have work; the partition count is fixed here
// whatever the thread count.
ConvSchedule backward_weights_default(const ConvDescriptor& d, const TargetInfo& t, std::vector<std::string>* why) {
  ConvSchedule s;
  const int vl = t.vector_floats;
  const int64_t taps = d.icg() * d.kh * d.kw;
  const bool gemm = d.ocg() >= vl;
  s.strategy = gemm ? Strategy::Gemm : Strategy::Depthwise;
  const int64_t channels = gemm ? d.ocg() : d.oc;
  if (channels % (3 * vl) == 0 && taps >= 4) {
    s.mr = 3 * vl, s.nr = 4;
  } else if (channels >= 2 * vl) {
    s.mr = 2 * vl, s.nr = 6;
  } else {
    s.mr = vl, s.nr = 8;
  }
  // Packed panels (BLIS's packed A and B) pay off once the weight tensor is wide: many
  // input channels, or a small image whose few pixels cannot hide strided tap loads.
  // ResNet-50 v1.5, 1 thread, mb 8 (GF/s panel vs direct tile loads): 1x1 2048->512 at
  // 7x7 57 vs 34, 3x3 256 at 14x14 71 vs 52, 1x1 256->128 at 28x28 61 vs 50; but 3x3
  // 64 at 56x56 38 vs 79 and 3x3 128 at 28x28 55 vs 82 (im2col panels cost a copy per
  // block that K/MR channel tiles do not amortise). Few output channels never amortise
  // it: cifar10_full 5x5 32->32 at 16x16 35 vs 66, 32->64 at 8x8 38 vs 68.
  const bool panels = gemm && d.ocg() >= 128 &&
                      (d.icg() >= 256 || (d.icg() >= 128 && d.kh * d.kw == 1) || d.oh() * d.ow() < 28 * 28);
  s.pack_input = panels ? PackInput::Panel : PackInput::Image;
  // Panels: 24x4 whatever K (NR = 4 divides C/g, so the panel packer copies vectors;
  // 16x6 packs taps one by one: 1x1 512->2048 at 7x7 46-54 vs 54-70 GF/s), items of
  // about 100 pixels (2 images of 7x7), blocks of 512 taps. Direct tile loads: items of
  // 256 pixels (1x1 64->64 at 56x56: 60 vs 46 with 512).
  if (panels) s.mr = 3 * vl, s.nr = 4;
  // ...unless 24-wide tiles pad the channels by a tenth or more: 128 output channels in
  // 6 tiles of 24 compute 144. 16x6 then (Zen 5 AVX2: 1x1 256->128 at 56x56 101 vs 90
  // GF/s, 512->128 at 28x28 104-106 vs 92; on 512 or 2048 channels, 3% padding, 16x6
  // lost up to 25% at 7x7).
  if (panels && round_up(channels, 3 * vl) * 10 >= channels * 11 && channels % (2 * vl) == 0)
    s.mr = 2 * vl, s.nr = 6;
  // Direct tile loads on a padded layer: NR = 4 divides C/g, so a tile's taps share a
  // kernel position and the pixels whose tap is padding are left out of the tile
  // (cifar10_full 5x5 pad 2, 32 channels: 8x8 1.02x oneDNN vs 0.82x with 16x6).
  const bool padded = d.pt || d.pb || d.pl || d.pr;
  if (!panels && gemm && padded && d.icg() % 4 == 0) s.nr = 4;
  // GEMM direct tile loads on images of 28x28 and more: items of about 112 pixels (two
  // 56-pixel rows), so the item's dY slice and the strided input rows its taps read stay
  // in L1. Zen 5 AVX2, three side-by-side runs each: 1x1 256->64 at 56x56 108-110 vs
  // 91-92 GF/s with 256; 3x3 64, 3x3 128 (stride 1 and 2), dilated 3x3 64: 1-3% faster.
  s.kc = panels ? 100 : (gemm && d.oh() * d.ow() >= 28 * 28 ? 112 : 256);
  s.nc = panels ? 512 : 0;
  // 32 vector registers (AVX-512): tiles of 16 or 24 accumulators instead of 8 or 12,
  // so each loaded dY vector feeds 8 taps, and direct tile loads everywhere: with twice
  // the FMA rate the panel copies no longer pay. Measured on AMD Zen 5 (family 26), 1
  // thread, mb 8, ResNet-50 v1.5, GF/s (and ratio to oneDNN avx512_core) against the
  // 48x4 / 32x4 / 32x6 rules above: 3x3 64 at 56x56 32x8 234 (1.10) vs 175 (0.85);
  // 1x1 256->128 at 56x56 48x8 195 (1.02) vs 133 (0.72); 1x1 512->1024/2 214 (0.98) vs
  // 184 (0.85); eleven weakest layers 0.86 vs 0.78. Tried and worse: packed panels with
  // 48x8 or 32x8 (0.78, 0.72 on those layers), 64x4 and 64x6 (4 dY loads per pixel),
  // 48x6. 48 channels unless that pads the channels by more than a quarter (64 -> 96:
  // 48x8 160 vs 32x8 234 GF/s). Images under 14x14: one item of up to 8 whole images
  // (3x3 512 at 7x7: 181 vs 151 GF/s with 5 + 3 images). NR = 8 keeps the rules above
  // when 8 divides C/g: a padded layer's tile taps share a kernel position.
  // Larger images: items of about 128 pixels, so one MR slice of the item's dY (24 KiB
  // at 48 channels) stays in L1 while the tap tiles stream past it; with 256 pixels it
  // spilled to L2 (1x1 256->64 at 56x56: 202 vs 146 GF/s, 512->128 at 28x28 212 vs 171;
  // ResNet-50 set 0.93 vs 0.88x oneDNN; 96 pixels measured the same).
  // Between one and two vectors of channels the tile is 32x8 too: 24 channels padded to
  // 32 in 16 accumulators beat 16x4's 8 (5x5/3 16->24 at 13x13: 0.93-0.99 vs 0.58x).
  if (t.vector_registers >= 32 && gemm && channels > vl && d.icg() % 8 == 0) {
    s.pack_input = PackInput::Image;
    s.mr = round_up(channels, 3 * vl) * 4 > channels * 5 ? 2 * vl : 3 * vl;
    s.nr = 8;
    s.kc = d.oh() * d.ow() < 14 * 14 ? 400 : 128;
    s.nc = 0;
  }
  // First layers (C/g below a vector, one group; their rows are staged flat) whose taps
  // come in nines (3 channels x 3x3): NR = 9, three whole tap tiles instead of five of
  // six with three padded taps. Zen 5 AVX-512, RGB stem 3x3/2 3->32 at 224x224, three
  // alternating runs against oneDNN: 0.71-0.73x vs 0.63-0.65x with 32x6.
  // (Not where 8 divides C/g: NR = 8 tiles then share a kernel position and skip padding.)
  if (t.vector_registers >= 32 && gemm && d.g == 1 && d.icg() < vl && d.icg() % 8 != 0 && taps % 9 == 0 &&
      s.mr <= 2 * vl) {
    s.nr = 9;
    // ...and where the FMAs per input float are few (K*R*S / (sh*sw) <= 128), the input is
    // read in place: a tile of nine taps is one kernel row, nine adjacent floats of an
    // NHWC row, and the flat copy (a memcpy streaming the rows from memory before any
    // FMA) costs more than the border split. RGB stem 3x3/2 3->32 at 224x224 (72 FMAs
    // per float), Zen 5 AVX-512, side by side: 181 vs 152 GF/s, 1.20x oneDNN vs 0.91x.
    // Denser layers keep the copy: 3x3/1 3->64 at 224x224 (576) 0.77 vs 0.83x; 5x5 3->32
    // at 32x32 (800) 0.59 vs 1.01x. (AVX2's 16x6 tiles span kernel positions: 0.5x.)
    if (padded && d.ocg() * d.kh * d.kw <= 128 * d.sh * d.sw) s.pack_input = PackInput::None;
  }
  // Depthwise (one output per group, whole vectors of channels): the input and dY read in
  // place, one vector of channels x the whole window (or one kernel row of a larger one),
  // so each dY load feeds every tap. The packed row band and dY copy cost more than the
  // FMAs: Zen 5 AVX-512, 1 thread, mb 8, in place vs packed 48x4 (GF/s): 96 ch 3x3/2 at
  // 112x112 22-28 vs 12, 32 ch 3x3/1 at 112x112 37-46 vs 26-32, 144 ch 3x3/1 at 56x56
  // 27 vs 1 (the packed path's ragged 48-channel tiles), 576 ch at 14x14 79-88 vs 29,
  // 960 ch at 7x7 100 vs 24. Two vectors of channels: no better at 112x112, worse on
  // 144 channels (padded to 160). Channels not in whole vectors keep the packed band:
  // a ragged in-place tile gathers (72 ch 5x5: 5.5 vs 49 GF/s).
  // With 32 registers and the channels in pairs of vectors, two vectors x the window (18
  // accumulators for 3x3): Intel Xeon (family 6, model 207) AVX-512, mb 8, interleaved
  // against one vector: 3x3 over 32 channels at 112x112 1.62x, 96 at 112 stride 2 1.41x,
  // 192 at 28x28 1.45x, 576 at 14x14 1.13x, 960 at 7x7 1.12x (on Zen 5: level at 112x112).
  // Not where they leave a ragged tile (144 channels: 0.39x).
  if (!gemm && d.ocg() == 1 && d.oc % vl == 0) {
    s.pack_input = PackInput::None;
    s.mr = t.vector_registers >= 32 && d.oc % (2 * vl) == 0 ? 2 * vl : vl;
    s.nr = static_cast<int>(taps <= 9 ? taps : (d.kw <= 9 ? d.kw : 8));
    s.kc = 256;
    s.nc = 0;
  }
  // Few pixels, many input channels, AVX-512, an unpadded 1x1 layer: vectors along the
  // input channels (gemm_input_lanes), 64x6, one item of every pixel, so dW leaves the
  // registers in ONNX order. The GEMM tile's partial sums, their zero fill and the
  // transpose to ONNX order cost about what its FMAs do there. Intel Xeon (family 6,
  // model 167), 1 thread, mb 8, `tune --compare` interleaved, GF/s: ResNet-50's 1x1
  // 2048->512 at 7x7 139 vs 61, 512->2048 128 vs 87, 1024->2048/2 130 vs 56. With more
  // pixels its items gather in a dW-sized sum, as the GEMM tile's partial sums do; up to
  // 2048 pixels per call, items of 56 pixels still gain (Intel Xeon model 207, `tune
  // --compare` interleaved against the GEMM default: ResNet-50's 1x1 layers at 14x14,
  // 1568 pixels: 1024->256 1.18x, 1024->512 1.09x, 512->1024/2 1.10x, 512->256 1.07x,
  // 256->1024 1.05x); at 28x28 (6272 pixels) level, at 56x56 0.75-0.98x.
  const int64_t call_pixels = d.mb * d.oh() * d.ow();
  if (t.vector_registers >= 32 && input_lane_weights_apply(d, t) && d.icg() >= 256 && call_pixels <= 4 * 512) {
    s.strategy = Strategy::GemmInputLanes;
    s.mr = 4 * vl, s.nr = 6, s.kc = call_pixels <= 512 ? 0 : 56, s.nc = 0;
    s.pack_input = PackInput::Image;
    s.partitions = 1;
    s.parallel = Parallel::None;
    note(why, fmt::format("backward-weights: input-lane tile {}x{} over {} input x {} output channels; {} of {} "
                          "pixels; dW stored in ONNX order",
                          s.mr, s.nr, d.icg(), d.ocg(), s.kc == 0 ? "one item" : "items of 56", call_pixels));
    return s;
  }
  const int64_t tiles = (channels + s.mr - 1) / s.mr * ((taps + s.nr - 1) / s.nr) * (gemm ? d.g : 1);
  s.partitions = tiles < 16 ? 4 : 1;
  s.parallel = Parallel::None;
  note(why, fmt::format("backward-weights: {} tile {}x{} over {} channels x {} taps; {}; items of {} pixels; {} "
                        "partition(s) ({} tiles)",
                        gemm ? "gemm" : "across-groups", s.mr, s.nr, channels, taps,
                        s.pack_input == PackInput::Panel  ? "packed panels in blocks of 512 taps"
                        : s.pack_input == PackInput::None ? "input and dY read in place"
                                                          : "direct tile loads",
                        s.kc, s.partitions, tiles));
  return s;
}

}  // namespace

ConvSchedule analytic_schedule_for_pass(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                        std::vector<std::string>* why) {
  if (pass == "fwd") return analytic_schedule(d, t, why);
  if (pass == "bwd_data") return backward_data_default(d, t, why);
  if (pass == "bwd_weights") return backward_weights_default(d, t, why);
  throw Error(ExitCode::Usage, fmt::format("pass: unknown pass '{}' (fwd, bwd_data, bwd_weights)", pass));
}

}  // namespace convgen
