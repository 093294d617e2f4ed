// The analytic default schedule: a BLIS-like cache model over the layer shape and the
// target's register and cache sizes (schedules/conv_schedule.h: TargetInfo). Measured
// figures behind each rule are in docs/schedules.md ("The analytic default").
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/kernel_plan.h"

namespace convgen {

namespace {

// Taps per tile of a short reduction: a 3x3 over RGB (3 channels x 9 taps). Its tiles are
// set-up-bound (choose_tile) and its staged values feed few FMAs (input staging).
constexpr int64_t kShortReductionTaps = 27;

// FMAs per output value at or below which a kernel is bound by its memory traffic
// (depthwise 3x3); the RGB stem's 27 is not (default_output_stores).
constexpr int64_t kMemoryBoundFmasPerValue = 9;

void note(std::vector<std::string>* why, const std::string& line) {
  if (why) why->push_back("default: " + line);
}

struct Tile {
  int mr, nr;
};

// Register tile, from measurements on Zen 3 (1 thread, mb 8; docs/schedules.md). Twelve
// accumulators is the sweet spot of 16 ymm registers: 3x4 (24 channels x 4 pixels) or
// 2x6 (16 x 6). 4-vector tiles spilled (32x3: 35 vs 81-86 GF/s on 3x3 64->64) until the
// micro-kernel grouped their FMAs by weight vector; now they run level with these
// (ResNet-50 forward, Zen 5 AVX2: 118 vs 119 GF/s) and are taken on narrow rows only.
// - K/g a multiple of 24: 3x4, no waste.
// - K/g a multiple of 16 only: 3x4 would compute a zero-filled third of its last tile.
//   2x6 wins on spatial kernels over images of >= 128 pixels (3x3 64->64 at 56x56: 81-86
//   vs 57-64; 3x3 128->128 stride 2: 82 vs 78; 5x5 3->32: 61 vs 46-51; 3x3 256->256 and
//   512->512 at 14x14: 73-86 vs 50-62); 3x4 still wins on 1x1 kernels (256->64: 70 vs
//   58) and on tiny images (5x5 32->64 at 8x8: 77-83 vs 71; 3x3 512->512 at 7x7: 56-59
//   vs 53), where 2x6 leaves more of its pixel tile unused -- unless 3x4's last tile
//   wastes over a quarter (32 channels: 2x6 wins on 8x8 too).
//   1x1 kernels with >= 128 channels take 2x6 too, reading a packed copy of the input
//   (256->128 at 56x56: 76-80 vs 58-72 for 3x4 in place); with 64 channels it is a wash.
//   Few-channel layers (C/g < 16, fused kernel-row loop) with >= 48 channels keep 3x4
//   (VGG conv1_1 3->64: 53-69 vs 51-54).
// - Narrow groups (K/g <= 8): one vector x 6 pixels.
Tile choose_tile(const ConvDescriptor& d, int64_t channels, const TargetInfo& t, std::vector<std::string>* why) {
  const int vl = t.vector_floats;
  const Tile wide{3 * vl, 4}, tall{2 * vl, 6}, narrow{vl, 6};
  const int64_t pixels = d.oh() * d.ow();
  Tile tile = wide;
  std::string reason;
  if (channels <= vl) {
    tile = narrow;
    reason = fmt::format("{} channels fill one vector", channels);
  } else if (channels % wide.mr == 0) {
    reason = fmt::format("{} channels a multiple of {}", channels, wide.mr);
  } else if (channels % tall.mr == 0 && pixels < 128 &&
             4 * (round_up(channels, wide.mr) - channels) > channels) {
    // On a small image 3x4 still wins unless its zero-filled last tile wastes over a
    // quarter of the work: 32 channels at 8x8 (5x5 64->32, cifar10 conv3's backward-data
    // convolution): 2x6 0.85-0.86x oneDNN, 3x4 0.69-0.72x.
    tile = tall;
    reason = fmt::format("{} channels: a {}-channel tile would waste over a quarter", channels, wide.mr);
  } else if (channels % tall.mr != 0 || pixels < 128) {
    reason = channels % tall.mr != 0 ? fmt::format("{} channels not a multiple of {}", channels, tall.mr)
                                     : fmt::format("small image ({} pixels)", pixels);
  } else if (d.kh * d.kw == 1 && channels < 128) {
    reason = fmt::format("1x1 kernel with {} channels", channels);
  } else if (d.icg() < 2 * vl && channels >= 48) {
    reason = fmt::format("{} input channels per group: the fused kernel-row loop is short", d.icg());
  } else {
    tile = tall;
    reason = fmt::format("{} channels a multiple of {} only, over {} pixels", channels, tall.mr, pixels);
  }
  // Narrow images with left/right padding: tiles inside one row let the kernel drop the
  // taps on padding per pixel (row_tiles_pay). When NR does not fit the row that way
  // but 4 does, take 4: 5x5 pad 2 on 8x8 (cifar10 conv3's backward-data, 32 outputs):
  // 16x4 0.88-0.93x oneDNN, 16x6 0.80-0.90x.
  const int64_t q = d.ow();
  const bool column_padding = (d.pl > 0 || d.pr > 0) && d.kw > 1 && (d.icg() >= 2 * vl || d.dw > 1);
  if (column_padding && !row_tiles_pay(q, tile.nr) && row_tiles_pay(q, 4) && q % 4 == 0) {
    tile.nr = 4;
    reason += fmt::format("; {} pixels per tile divide the {}-pixel rows, so taps on padding are left out", tile.nr, q);
  }
  // 16 registers, rows too narrow for 6-pixel tiles: 4 vectors x 3 pixels give 12
  // accumulator chains instead of 16x4's 8 (see below for why chains count); the
  // micro-kernel puts the pixels innermost, so one weight vector and 3 broadcasts are
  // live beside them, 16 registers in all. Zen 5 AVX2, 5x5 pad 2 at 8x8: backward-data
  // 64->32 32x3 0.97x oneDNN vs 16x4 0.88x; forward 32->64 0.98x vs 24x4 0.95x.
  if (column_padding && t.vector_registers < 32 && channels % (4 * vl) == 0 && !row_tiles_pay(q, 6) &&
      row_tiles_pay(q, 3)) {
    tile = {4 * vl, 3};
    reason += fmt::format("; {}-pixel rows: {}x3 tiles inside them, 12 accumulators", q, tile.mr);
  }
  if (t.vector_registers >= 32) {
    // 32 vector registers (AVX-512) hold up to 24 accumulators beside MR/vl weight
    // vectors and a broadcast. The rules above count 16-register tiles in vectors, and
    // 3 vectors of 16 lanes pad 64 channels to 96 and 24 to 48: when that wastes over a
    // quarter, 4 vectors x 6 pixels or 2 x 8, whichever pads less (Zen 5, ResNet-50
    // forward against oneDNN avx512_core: 1x1 64->64 0.92 -> 1.13x, 1x1 256->64 0.90 ->
    // 0.95x with 64x6). Few input channels (the fused kernel-row loop, kw*C/g steps)
    // take 64x4: VGG conv1_1 3x3 3->64 0.63x (48x4) -> 0.80x (64x4; 64x6 0.55x), ResNet's
    // 7x7/2 stem 0.82 -> 1.00x.
    if (4 * (round_up(channels, tile.mr) - channels) > channels) {
      const int mr = round_up(channels, 4 * vl) <= round_up(channels, 2 * vl) ? 4 * vl : 2 * vl;
      tile = {mr, mr != 4 * vl ? 8 : (d.icg() < 2 * vl ? 4 : 6)};
      reason += fmt::format("; {} registers: {}x{} pads the channels less", t.vector_registers, tile.mr, tile.nr);
    }
    // 1x1 kernels reducing over at least twice as many input channels as they output,
    // on images of 14x14 and more: 4 vectors x 6 pixels reading the input in place
    // (where 2 x 6 read packed row bands and 3 x 4 in place). Zen 5 AVX-512 against
    // oneDNN, two side-by-side runs each: forward 256->128 at 28x28 1.01-1.02x vs
    // 0.92-0.93, 512->128 0.99 vs 0.88-0.90, 256->128 at 56x56 1.07-1.08 vs 0.92-0.96,
    // 1024->256 at 14x14 0.99-1.00 vs 0.91-0.93; backward-data (derived 512->128,
    // 1024->256, 1024->512 stride 2) 1.01-1.03 vs 0.87-0.93. At 7x7 it lost 2-4%, and
    // with fewer input channels (64->256: 0.86 vs 1.00x, 128->256 0.79 vs 0.98x).
    if (d.kh * d.kw == 1 && channels % (4 * vl) == 0 && d.icg() >= 2 * channels && pixels >= 14 * 14) {
      tile = {4 * vl, 6};
      reason += fmt::format("; {} registers, 1x1 reducing over {} channels: {}x6, input in place", t.vector_registers,
                            d.icg(), tile.mr);
    }
    // With the columns unrolled, an inner pixel takes all kw taps of a step into one
    // accumulator while a border pixel takes fewer: the longest chain, not the FMA
    // count, bounds the step (4-cycle FMAs on 2 pipes need 8 chains kept busy). Tiles of
    // 8 pixels inside the rows (two vectors: 16 accumulators) double the chains of 4- or
    // 6-pixel tiles and put rows of 7 to 32 pixels inside tiles. Zen 5 AVX-512 against
    // oneDNN: cifar10 5x5 pad 2, 32 outputs (backward-data of conv2 / conv3) 32x8 1.05 /
    // 1.14x, 32x6 0.98 / 0.91, 32x4 0.89 / 0.94; ResNet-50 3x3 256 at 14x14 1.09 vs
    // 1.00x (32x6 over flattened rows), 3x3 512 at 7x7 1.05 vs 0.86x (48x4).
    if (column_padding && channels % (2 * vl) == 0 && row_tiles_pay(q, 8) && !(tile.mr == 2 * vl && tile.nr == 8)) {
      tile = {2 * vl, 8};
      reason += fmt::format("; {} registers: {}x8 tiles inside the {}-pixel rows, 16 accumulator chains",
                            t.vector_registers, tile.mr, q);
    }
    // Two vectors x 14 pixels: 28 accumulators, two weight vectors and a broadcast fill
    // 31 of the 32 registers, and each weight vector loaded (from L2 once the panel
    // outgrows L1) feeds 14 FMAs instead of 6 or 8. Intel Xeon (AVX-512), mb 8,
    // interleaved against the tile before: ResNet-50 3x3 1.06-1.13x, 1x1 expanding and
    // strided projections 1.03-1.11x (forward and backward-data alike), 1x1 at 7x7 (48x4
    // before) 1.01-1.06x; AlexNet 1.09-1.17x (backward-data 5x5 48x4: 1.27x; 11x11/4 over
    // RGB 1.09x); VGG-16 3x3 1.03-1.15x. Not where 4 vectors were chosen (1x1
    // reducing in place: 64x6 0.79-0.97x), nor where 2 vectors pad the channels (5x5/3
    // 16->24: 0.88x), nor across padded rows that 14 does not tile (16-pixel rows, 5x5
    // pad 2: 0.30x; 32: 0.97x, over RGB too: cifar10 conv1 0.97x). Rows of 9 to 13
    // pixels take one tile each (AlexNet's 13: the gain above); rows of up to 8 are one
    // 8-pixel tile already (3x3 at 7x7, 5x5 at 8x8: even); rows of over 4 tiles read a
    // padded copy, where straddling tiles cost nothing (VGG at 224 and 112: 1.10-1.14x).
    // 3x3 over RGB keeps the 7-pixel tiles below.
    const bool two_or_three_vectors = tile.mr == 2 * vl || tile.mr == 3 * vl;
    const bool padded_columns = (d.pl > 0 || d.pr > 0) && d.kw > 1;  // whatever the channels
    if (two_or_three_vectors && channels % (2 * vl) == 0 && pixels >= 2 * 14 &&
        (!padded_columns || (q > 8 && row_tiles_pay(q, 14)) || q > max_row_tiles * 14)) {
      tile = {2 * vl, 14};
      reason += fmt::format("; {} registers: {}x14, 28 accumulators", t.vector_registers, tile.mr);
    }
    // 1x1 kernels with long reductions: the 14 pixels' inputs (14 x C/g floats, read by
    // broadcasts all through the reduction) fill over half of L1 while the weight panel
    // streams through it from L2, and get evicted. 4 vectors x 7 pixels halve them and
    // tile every ResNet image (7x7, 14x14, 28x28) without a ragged last tile. Intel Xeon
    // model 207 AVX-512, mb 8, interleaved against 32x14 read in place (the next rule):
    // forward 512->2048 at 7x7 1.10x, 2048->512 1.12x, 1024->2048 stride 2 1.15x, 512->1024
    // stride 2 level; backward-data reducing over 2048 1.14x (and stride 2: 1.14x), over
    // 512 at 7x7 1.11x, at 14x14 level. Not over 256 channels (256->512 stride 2 0.96x).
    if (tile.mr == 2 * vl && tile.nr == 14 && d.kh * d.kw == 1 && channels % (4 * vl) == 0 &&
        14 * d.icg() * 4 > t.l1_bytes / 2) {
      tile = {4 * vl, 7};
      reason += fmt::format("; {} registers, 1x1 reducing over {} channels: 14 pixels' inputs would fill over half "
                            "of L1, {}x7",
                            t.vector_registers, d.icg(), tile.mr);
    }
    // A short fused kernel-row reduction (3x3 over RGB: 27 taps per tile) pays for each
    // tile's set-up about as much as for its FMAs, and a tile straddling rows finds
    // every pixel's row and column apart. Tiles of 7 pixels dividing the row start from
    // one base (row_aligned_tile). Zen 5 AVX-512, mb 8, interleaved against the tile
    // before: 3x3/2 stem 3->32 at 224 32x7 1.16-1.17x (32x6; aligned 32x8 1.10-1.22x),
    // VGG conv1_1 3->64 at 224 1.07-1.18x (64x4), 3x3 1->32 at 28 1.04x (32x6). Where 7
    // does not divide the row, 8 gained nothing (3->32 at 32x32 32x8 0.99x 32x6; 3->64
    // 0.98x 64x4), nor did longer reductions (5x5 3->32 at 32, 7x7/2 stem 0.97-0.99x).
    const bool fused_row_loop = d.icg() < 2 * vl && d.dw == 1 && d.kw > 1;  // fuses_kernel_row_taps, GEMM, kc 0
    const bool short_row_reduction = fused_row_loop && d.icg() * d.kh * d.kw <= kShortReductionTaps;
    if (short_row_reduction && channels % (2 * vl) == 0 && q % 7 == 0) {
      tile = {2 * vl, 7};
      reason += fmt::format("; {} registers, {} taps per tile: {}x7 tiles aligned with the {}-pixel rows",
                            t.vector_registers, d.icg() * d.kh * d.kw, tile.mr, q);
    }
    // Longer fused kernel-row reductions: a tile straddling rows steps one tap pointer
    // per pixel every iteration (32x8: 8 scalar increments beside 16 FMAs). A row of 9 to
    // 14 pixels is one tile of two vectors from one base. 5x5/3 16->24 at 12x13 (13-pixel
    // rows), Intel Xeon model 207 AVX-512, mb 8, interleaved: 32x13 1.03-1.05x 32x8.
    if (fused_row_loop && tile.mr == 2 * vl && q % tile.nr != 0 && q >= 9 && q <= 14) {
      tile.nr = static_cast<int>(q);
      reason += fmt::format("; {} registers, fused kernel-row loop: {}x{} tiles, one per row", t.vector_registers,
                            tile.mr, q);
    }
  }
  note(why, fmt::format("tile {}x{}: {}", tile.mr, tile.nr, reason));
  return tile;
}

// Depthwise tile: vectors across channels, pixels along a row. With NR dividing the
// output width a tile never wraps a row, Halide proves its pixels' taps adjacent, and
// with the taps unrolled LLVM loads each input vector once for the neighbouring
// pixels that share it (MobileNetV2 3x3 at 112x112: 16x7 29-30 GF/s vs 16x6 17-24;
// stride 2: 9.4-10.7 vs 24x4 7.8-8.1; ResNeXt g32 via this strategy: 18-19 vs 14).
Tile choose_depthwise_tile(const ConvDescriptor& d, int64_t channels, const TargetInfo& t, bool in_place,
                           std::vector<std::string>* why) {
  const int vl = t.vector_floats;
  if (in_place) {
    // Input read in place (partitions_padding_borders): one vector of channels and a
    // row segment of NR pixels. Measured against oneDNN on Zen 5 AVX-512, mb 8, with
    // 16x7: MobileNetV2 3x3 at 112x112 1.09x (packed 0.86x), stride 2 1.10x (0.62x),
    // 56x56x144 0.84x (0.58x; 32x4 0.89x), 14x14x576 0.85x (0.59x), 7x7x960 1.00x (0.61x).
    int nr = 8;
    for (int n : {7, 8, 6, 5, 4}) {
      if (d.ow() % n == 0) {
        nr = n;
        break;
      }
    }
    note(why, fmt::format("depthwise tile {}x{} read in place: one vector of channels, {} pixels of a row", vl, nr,
                          nr));
    return {vl, nr};
  }
  int mr = 2 * vl;
  if (channels % (2 * vl) != 0) mr = channels % (3 * vl) == 0 ? 3 * vl : (channels % vl == 0 ? vl : 2 * vl);
  int nr = 6;
  for (int n = 7; n >= 3; --n) {
    if ((mr / vl) * n <= 14 && d.ow() % n == 0) {
      nr = n;
      break;
    }
  }
  note(why, fmt::format("depthwise tile {}x{}: {} channels; {} pixels per tile{}", mr, nr, channels, nr,
                        d.ow() % nr == 0 ? " divide the row, so neighbouring taps share loads" : ""));
  return {mr, nr};
}

// Grouped tile: a vector holds the input channels of vl/(C/g) groups; MR asks for all
// K/g output channels of each (accumulators = K/g x NR), NR the pixels that keep about
// twelve accumulators. Measured on ResNeXt g32 3x3 (C/g = K/g = 4) at 56x56: 4x3 43 GF/s,
// 4x2 44, 4x1 33, 4x4 (16 accumulators, spills) 25; depthwise 16x7 on the same layer 18-19.
Tile choose_grouped_tile(const ConvDescriptor& d, const TargetInfo& t, std::vector<std::string>* why) {
  const int vl = t.vector_floats;
  const int cg = static_cast<int>(d.icg()), kgn = static_cast<int>(d.ocg());
  ConvSchedule tile;
  tile.mr = std::clamp(vl * ((kgn + cg - 1) / cg), vl, 4 * vl);
  const int kg_per_tile = grouped_outputs_per_tile(d, tile, t);
  tile.nr = std::clamp(12 / kg_per_tile, 1, 8);
  note(why, fmt::format("grouped tile: {} groups per vector, {} output channels each x {} pixels = {} accumulators",
                        vl / cg, kg_per_tile, tile.nr, kg_per_tile * tile.nr));
  return {tile.mr, tile.nr};
}

// NR for tiles inside output rows: the tile's own when it divides the row, else the
// nearest within 3 that does and keeps the accumulators within 28 registers (3->16 3x3/2
// at 224, read in place on Intel Xeon model 207 AVX-512: 16x6 0.86x, 16x7 1.14x of the
// staged default).
int row_dividing_tile(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  const int64_t q = d.ow();
  if (q <= s.nr) return static_cast<int>(q);
  if (q % s.nr == 0) return s.nr;
  const int vectors = (s.mr + t.vector_floats - 1) / t.vector_floats;
  for (int delta = 1; delta <= 3; ++delta)
    for (int n : {s.nr + delta, s.nr - delta})
      if (n >= 2 && q % n == 0 && vectors * n <= t.vector_registers - 4) return n;
  return s.nr;
}

}  // namespace

bool row_tiles_pay(int64_t row_pixels, int nr) {
  const int64_t tiles = (row_pixels + nr - 1) / nr, last = row_pixels - (tiles - 1) * nr;
  return tiles <= max_row_tiles && 2 * last >= nr;
}

bool grouped_strategy_applies(const ConvDescriptor& d, const TargetInfo& t) {
  // A vector must also hold real channels only: with fewer input channels in all than
  // lanes, its loads ran past the last group (a crash the backward-data sweep found,
  // 4 -> 3 channels, g = 1).
  return t.vector_floats % d.icg() == 0 && d.ic >= t.vector_floats;
}

int grouped_outputs_per_tile(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  const int64_t wanted = static_cast<int64_t>(s.mr) * d.icg() / t.vector_floats;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(4, d.ocg())));
}

ConvSchedule analytic_schedule(const ConvDescriptor& d, const TargetInfo& t, std::vector<std::string>* why,
                               const ConvContext& context) {
  ConvSchedule s;
  const int64_t pixels = d.oh() * d.ow();

  // Strategy: GEMM needs enough output channels per group to fill a vector.
  if (d.ocg() < t.vector_floats && d.icg() >= 2 && grouped_strategy_applies(d, t)) {
    s.strategy = Strategy::Grouped;
    note(why, fmt::format("grouped strategy: {} output channels per group cannot fill a {}-float vector; {} input "
                          "channels per group divide it",
                          d.ocg(), t.vector_floats, d.icg()));
  } else if (d.ocg() < t.vector_floats) {
    s.strategy = Strategy::Depthwise;
    note(why, fmt::format("depthwise strategy: {} output channels per group cannot fill a {}-float vector", d.ocg(),
                          t.vector_floats));
  }
  const int64_t channels = s.strategy == Strategy::Gemm ? d.ocg() : d.oc;
  // Depthwise taps are few per output: a packed copy of the input costs about as much as
  // the convolution itself, so a kernel that is not staged reads its input in place.
  ConvSchedule depthwise_in_place = s;
  depthwise_in_place.pack_input = PackInput::None;
  const bool dw_in_place = s.strategy == Strategy::Depthwise && !context.input_computed &&
                           partitions_padding_borders(d, depthwise_in_place, t, context.output_staged);
  const Tile tile = s.strategy == Strategy::Gemm        ? choose_tile(d, channels, t, why)
                    : s.strategy == Strategy::Grouped ? choose_grouped_tile(d, t, why)
                                                      : choose_depthwise_tile(d, channels, t, dw_in_place, why);
  s.mr = tile.mr;
  s.nr = tile.nr;

  // Workspace budget per call: the staged input plus the packed weights stay within
  // max(5% of the im2col buffer, 1 MiB) (tests/conv/test_workspace.cpp measures it).
  const int64_t budget = std::max<int64_t>(d.im2col_bytes() / 20, int64_t(1) << 20);
  const int64_t panel_bytes_per_channel = d.icg() * d.kh * d.kw * 4;
  const int64_t k_tiles = (channels + s.mr - 1) / s.mr;
  const int64_t packed_weights = k_tiles * s.mr * panel_bytes_per_channel * (s.strategy == Strategy::Gemm ? d.g : 1);

  // Input staging. Padding wants the packer's zero fill; without padding, taps read the
  // input in place (packing measured neutral or worse there).
  const bool padded = d.pt || d.pb || d.pl || d.pr;
  const int64_t row_bytes = (d.iw + d.pl + d.pr) * d.ic * 4;
  const int64_t slab_bytes = (d.ih + d.pt + d.pb) * row_bytes;
  const int64_t halo_rows = (d.kh - 1) * d.dh;
  auto band_bytes = [&](int64_t out_rows) { return d.band_input_rows(out_rows) * row_bytes; };
  int64_t input_bytes = 0;
  // 1x1 tiles of two 8-lane vectors read a packed copy (Zen 3 AVX2, see choose_tile).
  // With 32 registers the copy is pure cost: Intel Xeon model 207 AVX-512, mb 8, ResNet-50
  // 1x1 32x14 read in place against packed, interleaved: forward 1.01-1.38x (512->1024
  // stride 2 1.22x, 1024->2048 stride 2 1.38x, 2048->512 at 7x7 1.21x), backward-data
  // 0.99-1.23x.
  const bool tall_1x1 = d.kh * d.kw == 1 && s.mr == 2 * t.vector_floats && t.vector_registers < 32;
  // Tiles inside padded rows leave out every tap on padding (the rows per tile, the
  // columns per pixel), so no tap reads the packer's zeros and the copy is pure cost.
  // Measured side by side against oneDNN on Zen 5, forward / backward-data: AVX2 5x5
  // pad 2 at 16x16 (cifar10 conv2) 1.01 / 1.01x in place vs 0.99 / 0.98x packed, 3x3
  // 512 at 7x7 1.11 / 1.00 vs 1.05 / 0.98; AVX-512 the same layers 1.08 / 1.06 vs 1.06 /
  // 1.05 and 1.10 / 1.04 vs 1.07 / 0.97, 3x3 256 at 14x14 1.11 / 1.08 vs 1.09 / 1.07.
  // Where tiles straddle rows, per-load padding tests made it 0.5x (3x3 at 14-56 px); a
  // computed input (backward-data's dY masked by the ReLU) re-evaluated per tap made it
  // 0.59-0.75x (cifar10 conv3 / conv2 backward-data at mb 25 with +relu).
  ConvSchedule in_place = s;
  in_place.pack_input = PackInput::None;
  // A short reduction's staged values feed channels x taps / stride^2 FMAs each; its
  // bands are 2 output rows.
  const int64_t fmas_per_staged_value = channels * d.kh * d.kw / (d.sh * d.sw);
  const bool few_fmas_per_staged_value = s.strategy == Strategy::Gemm &&
                                         d.icg() * d.kh * d.kw <= kShortReductionTaps &&
                                         fmas_per_staged_value <= 144 && slab_bytes > t.l1_bytes;
  const bool rows_tiled = d.ow() % s.nr == 0;  // a band of whole rows is whole tiles
  const int64_t short_band_rows = std::min<int64_t>(2, d.oh());
  const int64_t short_band_bytes = band_bytes(std::min(short_band_rows + 1, d.oh()));
  const bool taps_skip_padding =
      padded && !context.output_staged && !context.input_computed && skips_padded_columns(d, in_place, t);
  // Few input channels, windows at most twice the stride (the 3x3/2 RGB stem, a 5x5/3),
  // 32 registers: the taps unrolled read the input in place, borders split off. Intel
  // Xeon model 207 AVX-512, mb 8, interleaved against the staged defaults: 3->32 3x3/2 at
  // 224 1.14x (32x7; 160 GF/s, 94% of the FMA probe, oneDNN 147), 3->16 1.14x (16x7),
  // 3->32 at 112 1.06x, 8->32 and 16->32 3x3/2 at 56 1.20x and 1.10x (32x14), 16->24
  // 5x5/3 on 37x41 1.16x (32x13; oneDNN 121 GF/s). Wider windows lose: 5x5/2 0.76-0.90x,
  // the 7x7/2 stem 0.92x, stride 1 0.48-0.90x (3x3 and 5x5 over 3 channels); so does AVX2
  // (16 registers: the 3x3/2 stem 0.82x, 5x5/3 0.79x), and so do two channel tiles or
  // more (3->64 3x3/2 at 224: 32x7 0.49x, 64x4 0.88x of the staged row bands). Rows
  // narrower than the staged tile would shrink it (a 3-pixel row: 6 accumulators).
  ConvSchedule borders_in_place = in_place;
  borders_in_place.nc = 0;
  const bool few_channels_in_place = t.vector_registers >= 32 && d.kh <= 2 * d.sh && d.kw <= 2 * d.sw &&
                                     channels <= s.mr && d.ow() >= s.nr && !context.input_computed &&
                                     partitions_padding_borders(d, borders_in_place, t, context.output_staged);
  if (dw_in_place) {
    s.pack_input = PackInput::None;
    note(why, "depthwise: input read in place, border tiles and rows split off");
  } else if (few_channels_in_place) {
    s.pack_input = PackInput::None;
    s.nc = 0;
    s.nr = row_dividing_tile(d, s, t);
    note(why, fmt::format("{} input channels, {}x{} window over stride {}x{}: input read in place, taps unrolled, "
                          "border tiles and rows split off ({}x{} tiles inside rows)",
                          d.icg(), d.kh, d.kw, d.sh, d.sw, s.mr, s.nr));
  } else if (!padded && !tall_1x1) {
    s.pack_input = PackInput::None;
    note(why, "no padding: input read in place");
  } else if (taps_skip_padding) {
    s.pack_input = PackInput::None;
    note(why, "tiles inside the padded rows leave out every tap on padding: input read in place");
  } else if (few_fmas_per_staged_value && rows_tiled && short_band_bytes <= t.l1_bytes) {
    // Each staged value feeds few FMAs (a 3x3/2 stem over RGB: 32 x 9 / 4 = 72), so the
    // slab's second trip from L2 shows; bands of 2 output rows are staged and read from
    // L1. Intel Xeon (family 6, model 207) AVX-512, mb 8, interleaved against the slab:
    // 3->32 at 224 1.10-1.11x (1 row: 1.10x, 4 rows 1.07x and 8 rows 1.00x on model
    // 167), 3->64 1.03-1.05x (144 FMAs per value; AVX2 24x4: 1.03x). Level or below
    // where a value feeds more: VGG conv1_1 3->64 at 224 stride 1 (576) 0.97-1.00x, the
    // 7x7/2 stem (784) 0.95-0.98x. (3->32 reads in place on 32 registers: above.)
    s.pack_input = PackInput::Rows;
    input_bytes = short_band_bytes;
    s.nc = static_cast<int>(short_band_rows * d.ow());
    note(why, fmt::format("{} FMAs per staged value: bands of {} output rows ({} KiB) staged in L1, not the {} KiB slab",
                          fmas_per_staged_value, short_band_rows, input_bytes / 1024, slab_bytes / 1024));
  } else if (slab_bytes + std::min(packed_weights, budget / 2) <= budget && slab_bytes <= t.l3_bytes / 8) {
    s.pack_input = PackInput::Image;
    input_bytes = slab_bytes;
    note(why, fmt::format("padded slab per image: {} KiB (budget {} KiB)", slab_bytes / 1024, budget / 1024));
  } else {
    // Row bands: the slab does not fit the budget beside the weights, or is so large
    // that packing it whole streams it through memory twice. A band of about L2 is
    // reused by every channel tile while it is hot (VGG conv1_2, 12.5 MiB slab: 10-row
    // bands 77 vs whole slab 65-73 GF/s); at least 4 output rows when they fit (the
    // 7x7 stem: 77 GF/s with 4-row bands, 67 with 1-row bands, which re-pack the halo).
    s.pack_input = PackInput::Rows;
    // A pixel block of whole NR-tiles need not start at a row: it can touch one output
    // row more than it covers, so bands are sized for out_rows + 1.
    const int64_t target = std::min(t.l2_bytes, budget / 2);
    int64_t out_rows = std::max<int64_t>(1, (target / row_bytes - halo_rows - 1) / d.sh);
    if (out_rows < 4 && band_bytes(std::min<int64_t>(4, d.oh()) + 1) <= budget / 2) out_rows = 4;
    out_rows = std::min(out_rows, d.oh());
    input_bytes = band_bytes(std::min(out_rows + 1, d.oh()));
    s.nc = static_cast<int>(std::min(pixels, out_rows * d.ow()));
    note(why, fmt::format("padded slab {} KiB: packing row bands of {} output rows ({} KiB; budget {} KiB)",
                          slab_bytes / 1024, out_rows, input_bytes / 1024, budget / 1024));
  }

  // Channel blocks. To keep the packed weights within what the budget leaves: blocks go
  // outermost and each block's panel is packed once for all images. Blocks are whole
  // tiles dividing the tile count (a ragged last block measured 36 vs 83 GF/s on a 1x1
  // 512->256 layer). Reduction blocks (kc) stay off: 1x1 512->256 ran 37 vs 83 GF/s
  // with kc=128, so kc is in the schedule space for the tuner only.
  auto channel_block = [&](int64_t bytes) {
    for (int64_t per = k_tiles - 1; per > 1; --per)
      if (k_tiles % per == 0 && per * s.mr * panel_bytes_per_channel <= bytes) return static_cast<int>(per * s.mr);
    return s.mr;
  };
  const int64_t weights_room = budget - input_bytes;
  if (packed_weights > weights_room) {
    // Every pixel tile streams its block's weights, so a block also stays within L2 when
    // the budget is larger (large images with many channels). Intel Xeon AVX-512 (the
    // target's 1 MiB L2; the CPU's is 2 MiB), mb 8, against the budget's blocks in one
    // interleaved run: VGG 3x3 512->512 at 28x28 forward 142 vs 58 GF/s (blocks of one
    // 32-channel tile, 576 KiB; 64: 134, 128: 77), backward-data 141 vs 62; 256->512 at
    // 28x28 forward 138 vs 75 (64; 32: 142); 512->512 at 14x14 154 vs 151 (32); AlexNet
    // 5x5 96->256 at 27x27 133 vs 126 (64; 32: 138).
    const int64_t block_room = std::min(weights_room, t.l2_bytes);
    s.mc = channel_block(block_room);
    s.loop_order = LoopOrder::ChannelsOuter;
    note(why, fmt::format("packed weights {} KiB over the {} KiB left in the budget: channel blocks of {} ({} KiB; "
                          "room {} KiB, the budget's or L2's), outermost",
                          packed_weights / 1024, weights_room / 1024, s.mc, s.mc * panel_bytes_per_channel / 1024,
                          block_room / 1024));
  } else if (packed_weights > t.l2_bytes && channels % s.mr == 0) {
    // Weights past L2 would stream from L3 once per pixel tile; a block of them kept in
    // L2 serves every pixel tile of the image (AlexNet conv2 5x5 96->256: 82 vs 67 GF/s
    // with 32-channel blocks of 300 KiB). Only when MR divides the channels: blocks over
    // a guarded last tile measured 27 vs 80 GF/s (1x1 256->512 stride 2).
    s.mc = channel_block(t.l2_bytes * 6 / 10);
    note(why, fmt::format("weights {} KiB exceed L2: channel blocks of {} ({} KiB) reused over the image",
                          packed_weights / 1024, s.mc, s.mc * panel_bytes_per_channel / 1024));
  }
  // Depthwise in place at stride 1: the kh input rows under a row of tiles hold every
  // channel, and past L1 they come back from L2 for each of the kh output rows that read
  // them. Channel blocks of one tile -- one cache line of channels per pixel where a
  // vector fills a line -- keep a block's rows in L1. Measured side by side on Zen 5
  // AVX-512, mb 8, 16x7 tiles, forward / backward-data against mc=0: 56x56x144 1.48-1.68
  // / 1.72x, 14x14x576 1.33 / 0.95-1.01x, 7x7x960 1.67 / 1.63x. Left out: two tiles of
  // channels (112x112x32: 1.06x), stride 2 (112x112x96: 0.82x: the input is read once
  // per block from memory), and half-line vectors (AVX2 56x56x144: 0.87x, 7x7x960 1.17x).
  const int64_t window_bytes = d.kh * row_bytes;
  if (s.strategy == Strategy::Depthwise && dw_in_place && d.sh == 1 && d.sw == 1 && s.mc == 0 && k_tiles >= 4 &&
      t.vector_floats * 4 == 64 && s.mr == t.vector_floats && window_bytes > t.l1_bytes) {
    s.mc = s.mr;
    note(why, fmt::format("depthwise: the {} input rows of all channels ({} KiB) exceed L1: channel blocks of one "
                          "tile, each block's rows reused from L1",
                          d.kh, window_bytes / 1024));
  }
  // A staged output (a residue class of backward-data) is not what the kernel stores:
  // backward-data's default decides for the whole dX.
  if (!context.output_staged) s.output_stores = default_output_stores(d, "fwd", t, why);
  return s;
}

// Streaming stores where the output per call is over 1.5x the last-level cache the target
// row assumes (16 MiB on AVX-512, 32 MiB on AVX2): the output then leaves the cache
// before anything reads it, and ordinary stores read each line from memory before writing
// it. Intel Xeon AVX-512, mb 8, interleaved against ordinary stores: forward VGG conv1_1
// (98 MiB out, 27 FMAs per value) 1.64-1.70x, conv1_2 and conv2_x (49-98 MiB) 1.01-1.03x,
// ResNet-50 conv1 and res2 1x1 64->256 (24.5 MiB) 1.08 / 1.10x; backward-data res2 1x1
// 256->64 (24.5 MiB dX) 1.14x, strided depthwise 96 ch at 112 (37 MiB) 1.64x (noisy),
// VGG conv1_2 to conv3_x level. Below, the output stays in the cache: the 3x3/2 stem
// over RGB (12.3 MiB) 0.93x, 1x1 256->1024 at 14x14 (6 MiB) 0.91x; others level.
//
// A kernel of a few FMAs per output value (depthwise 3x3: 9) is bound by its memory
// traffic, and the line each ordinary store reads first is a third of it: streaming from
// half the assumed last-level cache. Intel Xeon model 207 AVX-512, mb 8, re-timed
// interleaved against ordinary stores: depthwise 3x3 144 at 56x56 (14 MiB out) forward
// 1.34x, backward-data 1.48x; the tuner's picks for MobileNetV2's 3x3 at 112x112 (13 MiB)
// and 3x3/2 (10 MiB) stream.
OutputStores default_output_stores(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                   std::vector<std::string>* why) {
  if (pass == "bwd_weights") return OutputStores::Cached;
  const int64_t bytes = pass_output_bytes(d, pass);
  // Backward-data's output value sums K/g channels' taps, the forward's C/g.
  const int64_t fmas_per_value = (pass == "bwd_data" ? d.ocg() : d.icg()) * d.kh * d.kw;
  if (fmas_per_value <= kMemoryBoundFmasPerValue && bytes >= t.l3_bytes / 2) {
    note(why, fmt::format("output {} MiB per call, {} FMAs per value (bound by memory traffic), over half the {} "
                          "MiB last-level cache: streaming stores",
                          bytes >> 20, fmas_per_value, t.l3_bytes >> 20));
    return OutputStores::Streaming;
  }
  if (bytes < t.l3_bytes * 3 / 2) return OutputStores::Cached;
  note(why, fmt::format("output {} MiB per call, over 1.5x the {} MiB last-level cache: streaming stores",
                        bytes >> 20, t.l3_bytes >> 20));
  return OutputStores::Streaming;
}

}  // namespace convgen
