// The analytic default schedule: a BLIS-like cache model over the layer shape and the
// target's register and cache sizes (schedules/conv_schedule.h: TargetInfo). Measured
// figures behind each rule are in docs/schedules.md ("The analytic default").
#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "conv_descriptor.h"
#include "conv_schedule.h"

namespace convgen {

namespace {

void note(std::vector<std::string>* why, const std::string& line) {
  if (why) why->push_back("default: " + line);
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

struct Tile {
  int mr, nr;
  double shape_efficiency;  // measured relative speed of the tile shape when nothing is wasted
};

// Register tiles that fit 16 ymm registers: (MR/vl)*NR accumulators + MR/vl weight
// vectors + 1 broadcast. 3x4 and 2x6 (12 accumulators) measured 88 and 80 GF/s on a
// 3x3 conv (Zen 3, 1 thread); 1x6 is the fallback for narrow groups; 4-vector tiles spill.
std::vector<Tile> register_tiles(const TargetInfo& t) {
  const int vl = t.vector_floats;
  return {{3 * vl, 4, 1.00}, {2 * vl, 6, 0.92}, {vl, 6, 0.55}};
}

// Fraction of issued FMAs that do useful work, with MR rounding of K/g and NR
// tail-recompute over the flattened P*Q output pixels.
double tile_utilisation(int64_t channels, int64_t pixels, const Tile& tile) {
  const double chan = double(channels) / double(ceil_div(channels, tile.mr) * tile.mr);
  const double pix = double(pixels) / double(ceil_div(pixels, tile.nr) * tile.nr);
  return chan * pix;
}

Tile choose_tile(int64_t channels, int64_t pixels, const TargetInfo& t, std::vector<std::string>* why) {
  Tile best = register_tiles(t).front();
  double best_score = -1;
  for (const Tile& tile : register_tiles(t)) {
    const double score = tile.shape_efficiency * tile_utilisation(channels, pixels, tile);
    if (score > best_score + 1e-9) {
      best = tile;
      best_score = score;
    }
  }
  note(why, fmt::format("tile {}x{} (expected {:.0f}% of the best tile's speed for {} channels x {} pixels)", best.mr,
                        best.nr, 100 * best_score, channels, pixels));
  return best;
}

// Largest divisor of c that is <= limit (at least 1).
int64_t largest_divisor_at_most(int64_t c, int64_t limit) {
  for (int64_t v = std::min(c, limit); v > 1; --v)
    if (c % v == 0) return v;
  return 1;
}

}  // namespace

ConvSchedule analytic_schedule(const ConvDescriptor& d, const TargetInfo& t, std::vector<std::string>* why) {
  ConvSchedule s;
  const int64_t pixels = d.oh() * d.ow();
  const int64_t taps = d.kh * d.kw;

  // Strategy: GEMM needs enough output channels per group to fill a vector.
  if (d.ocg() < t.vector_floats) {
    s.strategy = Strategy::Depthwise;
    note(why, fmt::format("depthwise strategy: {} output channels per group cannot fill a {}-float vector", d.ocg(),
                          t.vector_floats));
  }
  const int64_t channels = s.strategy == Strategy::Gemm ? d.ocg() : d.oc;
  const Tile tile = choose_tile(channels, pixels, t, why);
  s.mr = tile.mr;
  s.nr = tile.nr;

  // Input staging. Padding wants the packer's zero fill; without padding, taps read the
  // input in place (packing measured neutral or worse there).
  const bool padded = d.pt || d.pb || d.pl || d.pr;
  const int64_t slab_bytes = (d.ih + d.pt + d.pb) * (d.iw + d.pl + d.pr) * d.ic * 4;
  const int64_t budget = std::max<int64_t>(d.im2col_bytes() / 20, int64_t(1) << 20);
  if (!padded) {
    s.pack_input = PackInput::None;
    note(why, "no padding: input read in place");
  } else if (slab_bytes <= budget) {
    s.pack_input = PackInput::Image;
    note(why, fmt::format("padded slab per image: {} KiB within the workspace budget of {} KiB", slab_bytes / 1024,
                          budget / 1024));
  } else {
    s.pack_input = PackInput::Rows;
    // Rows of output per block so the padded band stays within budget.
    const int64_t row_bytes = (d.iw + d.pl + d.pr) * d.ic * 4;
    const int64_t band_rows = std::max<int64_t>(1, budget / row_bytes - (d.kh - 1) * d.dh);
    const int64_t out_rows = std::max<int64_t>(1, band_rows / d.sh);
    s.nc = static_cast<int>(std::min(pixels, out_rows * d.ow()));
    note(why, fmt::format("padded slab {} KiB over the budget of {} KiB: packing row bands of {} output rows",
                          slab_bytes / 1024, budget / 1024, out_rows));
  }

  // Cache blocks. All K/g weights of a tile row stream once per pixel tile; when they
  // outgrow half of L2, block the channels so a block's panel stays in L2 across pixels.
  const int64_t panel_bytes_per_channel = d.icg() * taps * 4;
  const int64_t weights_bytes = channels * panel_bytes_per_channel;
  if (weights_bytes > t.l2_bytes / 2) {
    const int64_t mc = std::max<int64_t>(s.mr, (t.l2_bytes / 2) / panel_bytes_per_channel / s.mr * s.mr);
    if (mc < channels) {
      s.mc = static_cast<int>(mc);
      s.loop_order = LoopOrder::ChannelsOuter;
      note(why, fmt::format("weights {} KiB exceed half of L2: channel blocks of {} kept in L2, channels outer",
                            weights_bytes / 1024, mc));
    }
  }
  // Reduction blocks: the NR input taps of one tile should stay in L1 across the
  // channel tiles of a block; past that, split the input channels.
  const int64_t tile_inputs_bytes = int64_t(s.nr) * panel_bytes_per_channel;
  if (s.strategy == Strategy::Gemm && tile_inputs_bytes > t.l2_bytes / 4) {
    const int64_t kc = largest_divisor_at_most(d.icg(), (t.l2_bytes / 4) / (int64_t(s.nr) * taps * 4));
    if (kc < d.icg() && kc >= 16) {
      s.kc = static_cast<int>(kc);
      note(why, fmt::format("reduction blocked by kc={} input channels (tile inputs {} KiB)", kc,
                            tile_inputs_bytes / 1024));
    }
  }
  return s;
}

}  // namespace convgen
