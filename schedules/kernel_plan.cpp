#include "schedules/kernel_plan.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

namespace convgen {

int register_tile_pixels(const ConvDescriptor& d, const ConvSchedule& s) {
  return static_cast<int>(std::min<int64_t>(s.nr, d.oh() * d.ow()));
}

int row_aligned_tile(const ConvDescriptor& d, const ConvSchedule& s) {
  const int nr = register_tile_pixels(d, s);
  return (s.strategy == Strategy::Gemm && nr > 1 && d.ow() % nr == 0) ? nr : 0;
}

int reduction_block(const ConvDescriptor& d, const ConvSchedule& s) {
  // GEMM only. Depthwise tiles run across groups, whose reductions are short; blocking
  // them mis-compiled under Halide 14 when a ragged channel tile met a ragged pixel tile
  // (an unguarded write past the accumulator, found by the sweep), so kc is refused there.
  return (s.strategy == Strategy::Gemm && s.kc > 0 && s.kc < d.icg()) ? s.kc : 0;
}

bool stages_tap_panel(const ConvSchedule& s) {
  return s.strategy == Strategy::Gemm && s.pack_input == PackInput::Panel;
}

bool fuses_kernel_row_taps(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  return s.strategy == Strategy::Gemm && reduction_block(d, s) == 0 && !stages_tap_panel(s) &&
         d.icg() < 2 * t.vector_floats && d.dw == 1 && d.kw > 1;
}

bool skips_padded_columns(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  const int nr = register_tile_pixels(d, s);
  const int64_t pix_tiles = (d.oh() * d.ow() + nr - 1) / nr;
  const bool whole_image_block = s.nc == 0 || (s.nc + nr - 1) / nr >= pix_tiles;
  return (d.pl > 0 || d.pr > 0) && d.kw > 1 && s.strategy == Strategy::Gemm && reduction_block(d, s) == 0 &&
         !stages_tap_panel(s) && !fuses_kernel_row_taps(d, s, t) && row_tiles_pay(d.ow(), nr) && whole_image_block;
}

bool stages_flat_input_rows(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  // Panels on a non-GEMM strategy fall back to the per-image slab (generator/conv/packing.cpp).
  const bool staged = s.pack_input == PackInput::Image || s.pack_input == PackInput::Rows ||
                      (s.pack_input == PackInput::Panel && s.strategy != Strategy::Gemm);
  const bool padded = d.pt || d.pb || d.pl || d.pr;
  return staged && padded && d.g == 1 && d.icg() < t.vector_floats;
}

bool partitions_padding_borders(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                bool output_staged) {
  // The taps must be unrolled (as the micro-kernels do up to 49) for the padding tests to
  // depend on the tile loops alone.
  if (output_staged || s.pack_input != PackInput::None) return false;
  if (s.strategy == Strategy::Depthwise) return d.icg() * d.kh * d.kw <= 49;
  const bool padded = d.pt || d.pb || d.pl || d.pr;
  return padded && fuses_kernel_row_taps(d, s, t) && d.kh * d.kw <= 49;
}

bool computes_depthwise_dx_in_place(const ConvDescriptor& d, const ConvSchedule& s) {
  return s.strategy == Strategy::Depthwise && s.pack_input == PackInput::None && d.icg() == 1 && d.ocg() == 1 &&
         (d.sh > 1 || d.sw > 1) && d.ih % d.sh == 0 && d.iw % d.sw == 0 && d.kh * d.kw <= 49;
}

int depthwise_dx_row_tile(const ConvDescriptor& d, const ConvSchedule& s) {
  const int sw = static_cast<int>(d.sw), iw = static_cast<int>(d.iw);
  int nr = std::max(sw, s.nr / sw * sw);
  while (iw % nr != 0) nr -= sw;  // ends at sw at worst: iw is a multiple of sw
  return nr;
}

int depthwise_dx_channel_tile(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  const int vl = t.vector_floats, groups = static_cast<int>(d.g);
  return groups >= vl ? std::clamp(s.mr / vl * vl, vl, groups / vl * vl) : vl;
}

bool weights_read_in_place(const ConvSchedule& s) { return s.pack_input == PackInput::None; }

bool input_lane_window(const ConvDescriptor& d) {
  return d.kh == 1 && d.kw == 1 && !(d.pt || d.pb || d.pl || d.pr);
}

std::string input_lane_weights_refusal(const ConvDescriptor& d, const TargetInfo& t) {
  if (d.kh * d.kw != 1) return "the window is not 1x1 (dW's taps are not its input channels)";
  if (!input_lane_window(d)) return "the layer is padded";
  if (d.icg() < t.vector_floats) return fmt::format("{} input channels per group fill no vector", d.icg());
  return "";
}

bool input_lane_weights_apply(const ConvDescriptor& d, const TargetInfo& t) {
  return input_lane_weights_refusal(d, t).empty();
}

int64_t input_lane_item_pixels(const ConvDescriptor& d, const ConvSchedule& s) {
  const int64_t pixels = d.mb * d.oh() * d.ow();
  if (s.kc <= 0 || s.kc >= pixels) return pixels;
  const int64_t items = (pixels + s.kc - 1) / s.kc;
  return (pixels + items - 1) / items;
}

bool streams_output(const std::string& pass, const ConvSchedule& s) {
  return s.output_stores == OutputStores::Streaming && pass != "bwd_weights";
}

int64_t pass_output_bytes(const ConvDescriptor& d, const std::string& pass) {
  if (pass == "bwd_data") return d.mb * d.ih * d.iw * d.ic * 4;
  if (pass == "bwd_weights") return (d.oc * d.icg() * d.kh * d.kw + (d.bias ? d.oc : 0)) * 4;
  return d.mb * d.oh() * d.ow() * d.oc * 4;
}

}  // namespace convgen
