#include "schedules/tune/tuning_space.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "schedules/backward_data_classes.h"
#include "schedules/conv_schedule.h"
#include "schedules/errors.h"
#include "schedules/kernel_plan.h"

namespace convgen {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Backward-data's schedule tiles the forward convolution of the residue class with the
// most work (the same class its analytic default is derived from).
ConvDescriptor largest_residue_class(const ConvDescriptor& d) {
  const ConvDescriptor* largest = nullptr;
  int64_t most = -1;
  const auto classes = backward_data_classes(d);
  for (const ResidueClass& c : classes) {
    if (c.zero()) continue;
    const int64_t work = c.rows.count * c.cols.count * c.rows.taps * c.cols.taps;
    if (work > most) most = work, largest = &c.derived;
  }
  return largest ? *largest : d;
}

template <typename T>
void add_unique(std::vector<T>* out, const T& v) {
  if (std::find(out->begin(), out->end(), v) == out->end()) out->push_back(v);
}

// The value after / before `v` in `list` (v itself when at an end or absent).
template <typename T>
std::vector<T> adjacent(const std::vector<T>& list, const T& v) {
  std::vector<T> out;
  const auto it = std::find(list.begin(), list.end(), v);
  if (it == list.end()) return list;  // off the list: every value is a move
  if (it != list.begin()) out.push_back(*(it - 1));
  if (it + 1 != list.end()) out.push_back(*(it + 1));
  return out;
}

}  // namespace

TuningSpace::TuningSpace(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t, Parallel variant,
                         PackWeights weights)
    : d_(d), pass_(pass), t_(t), variant_(variant), weights_(weights), weights_pass_(pass == "bwd_weights") {
  if (pass != "fwd" && pass != "bwd_data" && pass != "bwd_weights")
    throw Error(ExitCode::Usage, "tune: unknown pass '" + pass + "' (expected fwd, bwd_data or bwd_weights)");
  tiled_ = pass == "bwd_data" ? largest_residue_class(d) : d;
  pixels_ = tiled_.oh() * tiled_.ow();
  if (pass == "bwd_data") {
    const std::vector<ResidueClass> classes = backward_data_classes(d);
    output_staged_ = !single_class(classes, d);
    for (const ResidueClass& c : classes)
      if (!c.zero()) pixels_ = std::max(pixels_, c.derived.oh() * c.derived.ow());
  }
  const int vl = t.vector_floats;
  const ConvDescriptor& e = tiled_;
  for (int v = 1; v <= 4; ++v) mr_.push_back(v * vl);
  for (int n = 1; n <= 8; ++n) nr_.push_back(n);
  if (pass == "bwd_weights" && d.kh * d.kw * d.icg() >= 9) nr_.push_back(9);  // a 3x3 window as one tile
  // 32 registers: pixel tiles of 2 vectors x 10..14 pixels (up to 28 accumulators) and one
  // vector x 16; past those the tile spills (prior() charges it).
  if (pass != "bwd_weights") {
    const std::vector<int> wide = wide_pixel_tiles(t);
    nr_.insert(nr_.end(), wide.begin(), wide.end());
  }
  if (weights_pass_) {
    // Backward-weights: GEMM over channels x taps when a group's outputs fill a vector.
    strategies_ = {d.ocg() >= vl ? Strategy::Gemm : Strategy::Depthwise};
    loop_order_ = {LoopOrder::PixelsOuter};
    // Unpadded 1x1 layers: vectors along the input channels too (dW in ONNX order), whose
    // items or channel tiles go outermost.
    if (input_lane_weights_apply(d, t)) {
      strategies_.push_back(Strategy::GemmInputLanes);
      loop_order_.push_back(LoopOrder::ChannelsOuter);
    }
    pack_input_ = {PackInput::Image};
    if (d.ocg() >= vl) pack_input_.push_back(PackInput::Panel);
    // In place (weights_read_in_place): differs from a staged band only where there is padding.
    if (d.pt || d.pb || d.pl || d.pr) pack_input_.push_back(PackInput::None);
    // Reduction items: whole rows of about 1, 2, 4, 8 rows, or 1, 2, 4, 8 whole images.
    const int64_t q = d.ow(), pq = d.oh() * d.ow();
    for (int64_t rows : {1, 2, 4, 8})
      if (rows < d.oh()) add_unique(&kc_, static_cast<int>(rows * q));
    for (int64_t images : {1, 2, 4, 8})
      if (images <= d.mb) add_unique(&kc_, static_cast<int>(images * pq));
    nc_ = {0, 256, 512, 1024};  // panel blocks of taps (0 = 256, the generator's default)
    partitions_ = {1, 2, 4, 8};
    mc_tiles_ = {0};
  } else {
    const bool gemm_fits = e.ocg() >= vl;
    if (gemm_fits) strategies_.push_back(Strategy::Gemm);
    if (e.ocg() < vl && e.icg() >= 2 && grouped_strategy_applies(e, t)) strategies_.push_back(Strategy::Grouped);
    if (e.ocg() < vl) strategies_.push_back(Strategy::Depthwise);
    pack_input_ = {PackInput::None, PackInput::Image, PackInput::Rows, PackInput::Panel};
    loop_order_ = {LoopOrder::PixelsOuter, LoopOrder::ChannelsOuter};
    kc_ = {0};
    for (int v : {32, 64, 128, 256})
      if (v < e.icg() && e.icg() % v == 0) kc_.push_back(v);
    nc_ = {0};
    for (int64_t rows : {1, 2, 4, 8, 16})
      if (rows < e.oh()) nc_.push_back(static_cast<int>(rows * e.ow()));
    partitions_ = {1};
  }
  // Streaming stores where the output may outgrow the cache: they measured from 0.91x
  // (6 MiB) to 1.70x (98 MiB) of ordinary stores, and are ordinary below.
  output_stores_ = {OutputStores::Cached};
  if (!weights_pass_ && pass_output_bytes(d, pass) * 3 >= t.l3_bytes) output_stores_.push_back(OutputStores::Streaming);
  // The analytic default's own values belong to the space (its rules pick values off
  // these grids, e.g. backward-weights items of 128 pixels).
  const ConvSchedule def = normalise(analytic_schedule_for_pass(d, pass, t));
  add_unique(&kc_, def.kc);
  add_unique(&nc_, def.nc);
  add_unique(&partitions_, def.partitions);
  add_unique(&output_stores_, def.output_stores);
  std::sort(kc_.begin(), kc_.end());
  std::sort(nc_.begin(), nc_.end());
  std::sort(partitions_.begin(), partitions_.end());
}

TuningSpace::ChannelTiling TuningSpace::channel_tiling(const ConvSchedule& s) const {
  const ConvDescriptor& e = tiled_;
  const int vl = t_.vector_floats;
  if (s.strategy == Strategy::Gemm) {
    const int mr = static_cast<int>(std::min<int64_t>(s.mr, round_up(e.ocg(), vl)));  // generator/conv/target.cpp
    return {mr, static_cast<int>(ceil_div(e.ocg(), mr))};
  }
  if (s.strategy == Strategy::Grouped) {
    const int64_t groups_per_tile = std::min<int64_t>(vl / e.icg(), e.g);
    const int64_t per_tile = grouped_outputs_per_tile(e, s, t_);
    return {static_cast<int>(per_tile * groups_per_tile),
            static_cast<int>(ceil_div(e.ocg(), per_tile) * ceil_div(e.g, groups_per_tile))};
  }
  const int64_t chan = e.oc;
  int64_t mr = std::min<int64_t>(s.mr, std::max<int64_t>(1, chan));
  if (mr == chan && mr > vl && mr % vl != 0) mr = mr / vl * vl;
  return {static_cast<int>(mr), static_cast<int>(ceil_div(chan, mr))};
}

// Channel blocks in whole tiles dividing the tile count (a ragged last block measured
// 36 vs 83 GF/s, analytic_default.cpp), at most the six largest, as channels.
std::vector<int> TuningSpace::mc_values(const ConvSchedule& s) const {
  std::vector<int> values = {0};
  if (weights_pass_) return values;
  const ChannelTiling ct = channel_tiling(s);
  std::vector<int> blocks;
  for (int per = ct.tiles - 1; per >= 1 && blocks.size() < 6; --per)
    if (ct.tiles % per == 0) blocks.push_back(per * ct.tile_channels);
  std::reverse(blocks.begin(), blocks.end());
  values.insert(values.end(), blocks.begin(), blocks.end());
  return values;
}

ConvSchedule TuningSpace::normalise(ConvSchedule s) const {
  const int vl = t_.vector_floats;
  s.parallel = variant_;
  s.layout = Layout::Nhwc;
  if (std::find(output_stores_.begin(), output_stores_.end(), s.output_stores) == output_stores_.end())
    s.output_stores = output_stores_[0];
  if (std::find(strategies_.begin(), strategies_.end(), s.strategy) == strategies_.end()) s.strategy = strategies_[0];
  // Only GEMM reads packed panels; depthwise and grouped kernels read ONNX weights.
  s.pack_weights = !weights_pass_ && s.strategy == Strategy::Gemm ? weights_ : PackWeights::PerCall;
  s.mr = std::clamp(s.mr / vl * vl, vl, 4 * vl);
  s.nr = std::clamp(s.nr, 1, nr_.back());
  if (weights_pass_ && s.strategy == Strategy::GemmInputLanes) {
    // generator/conv/backward_weights_input_lanes.cpp: MR input channels x NR output
    // channels, items of kc pixels across images, loop order only between several items.
    const ConvDescriptor& d = d_;
    s.mr = static_cast<int>(std::min<int64_t>(s.mr, round_up(d.icg(), vl)));
    s.nr = static_cast<int>(std::min<int64_t>(s.nr, d.ocg()));
    s.pack_input = PackInput::Image;
    s.mc = 0, s.nc = 0, s.partitions = 1;
    const int64_t pixels = d.mb * d.oh() * d.ow(), item = input_lane_item_pixels(d, s);
    s.kc = item >= pixels ? 0 : static_cast<int>(item);
    if (s.kc == 0) s.loop_order = LoopOrder::PixelsOuter;
    return s;
  }
  if (weights_pass_) {
    const ConvDescriptor& d = d_;
    const int64_t taps = d.icg() * d.kh * d.kw;
    const int64_t channels = s.strategy == Strategy::Gemm ? d.ocg() : d.oc;
    s.mr = static_cast<int>(std::min<int64_t>(s.mr, ceil_div(channels, vl) * vl));
    s.nr = static_cast<int>(std::min<int64_t>(s.nr, taps));
    const bool padded = d.pt || d.pb || d.pl || d.pr;
    if (padded && weights_read_in_place(s)) {
      s.nc = 0;
    } else if (s.pack_input != PackInput::Panel || s.strategy != Strategy::Gemm) {
      s.pack_input = PackInput::Image;
      s.nc = 0;
    } else if (s.nc == 0) {
      s.nc = 256;
    }
    // Items: whole rows below one image, whole images above (generator/conv/backward_weights.cpp).
    const int64_t q = d.ow(), p = d.oh(), pq = p * q;
    if (s.kc <= 0 || s.kc >= pq) {
      const int64_t images = s.kc <= 0 ? 1 : std::clamp<int64_t>(s.kc / pq, 1, d.mb);
      s.kc = static_cast<int>(images * pq);
    } else {
      s.kc = static_cast<int>(std::clamp<int64_t>(ceil_div(s.kc, q), 1, p) * q);
    }
    s.mc = 0;
    s.loop_order = LoopOrder::PixelsOuter;
    s.partitions = std::clamp(s.partitions, 1, 64);
    return s;
  }
  const ConvDescriptor& e = tiled_;
  s.partitions = 1;
  if (pass_ == "bwd_data" && computes_depthwise_dx_in_place(d_, s)) {
    // dX pixel by pixel (generator/conv/backward_data_depthwise.cpp): the tile is all.
    s.mr = depthwise_dx_channel_tile(d_, s, t_);
    s.nr = depthwise_dx_row_tile(d_, s);
    s.kc = 0, s.mc = 0, s.nc = 0;
    s.loop_order = LoopOrder::PixelsOuter;
    return s;
  }
  // Register tiles the generator clamps alike are one: GEMM's MR to the group's channels
  // in whole vectors; a depthwise MR to all the channels; a grouped MR by the output
  // channels per group it asks for (the smallest MR asking the same).
  if (s.strategy == Strategy::Gemm) {
    s.mr = channel_tiling(s).tile_channels;
  } else if (s.strategy == Strategy::Depthwise) {
    if (s.mr >= e.oc) s.mr = static_cast<int>(std::min<int64_t>(round_up(e.oc, vl), 4 * vl));
  } else {
    const int per_tile = grouped_outputs_per_tile(e, s, t_);
    for (int mr = vl; mr <= 4 * vl; mr += vl) {
      ConvSchedule probe = s;
      probe.mr = mr;
      if (grouped_outputs_per_tile(e, probe, t_) == per_tile) {
        s.mr = mr;
        break;
      }
    }
  }
  s.nr = static_cast<int>(std::min<int64_t>(s.nr, pixels_));
  if (s.strategy != Strategy::Gemm && s.pack_input == PackInput::Panel) s.pack_input = PackInput::Image;
  if (partitions_padding_borders(e, s, t_, output_staged_)) {
    // Tiles within rows, no pixel blocks (generator/conv/loop_nest.cpp).
    s.nr = static_cast<int>(std::min<int64_t>(s.nr, e.ow()));
    s.nc = 0;
  }
  s.kc = reduction_block(e, s);
  // Cache blocks: 0 when one block covers everything, else whole tiles.
  const ChannelTiling ct = channel_tiling(s);
  const int per = s.mc <= 0 ? ct.tiles : static_cast<int>(ceil_div(s.mc, ct.tile_channels));
  s.mc = per >= ct.tiles ? 0 : per * ct.tile_channels;
  const int64_t pix_tiles = ceil_div(pixels_, s.nr);
  const int64_t per_block = s.nc <= 0 ? pix_tiles : ceil_div(s.nc, s.nr);
  if (per_block >= pix_tiles) {
    s.nc = 0;
  } else if (pass_ != "bwd_data") {
    // Whole tiles. Not for backward-data: a residue class with fewer pixels than NR
    // clamps its tile, and counts a block of NC pixels in its own tiles.
    s.nc = static_cast<int>(per_block * s.nr);
  }
  // The consumer's threads over channel blocks where the blocks are outermost.
  if (variant_ != Parallel::None) s.parallel = intra_kernel_loop(d_, pass_, s, variant_);
  return s;
}

std::vector<ConvSchedule> TuningSpace::neighbours(const ConvSchedule& from) const {
  const ConvSchedule s = normalise(from);
  std::vector<ConvSchedule> out;
  std::set<std::string> seen = {describe(s)};
  auto add = [&](ConvSchedule c) {
    c = normalise(c);
    if (seen.insert(describe(c)).second) out.push_back(c);
  };
  // Each value of `values` in field `field` of s.
  auto vary = [&](auto field, const auto& values) {
    for (const auto& v : values) {
      ConvSchedule c = s;
      c.*field = v;
      add(c);
    }
  };
  vary(&ConvSchedule::strategy, strategies_);
  vary(&ConvSchedule::mr, adjacent(mr_, s.mr));
  vary(&ConvSchedule::nr, adjacent(nr_, s.nr));
  // The register tile reshaped at about the same number of accumulators.
  const int vl = t_.vector_floats, accumulators = s.mr / vl * s.nr;
  for (int mr : mr_) {
    if (mr == s.mr) continue;
    ConvSchedule c = s;
    c.mr = mr;
    // The listed NR nearest that many accumulators (the larger of two as near).
    const double wanted = double(accumulators) / (mr / vl);
    c.nr = nr_.front();
    for (int nr : nr_)
      if (std::abs(nr - wanted) <= std::abs(c.nr - wanted)) c.nr = nr;
    add(c);
  }
  // The reduction's block and partitions: every value is one move. Their few values
  // (at most ten) decide what stays in which cache, which is not monotone in the value:
  // the best of 462 schedules of the 1x1 512->128 backward-weights layer has items of 2
  // rows, two adjacent steps from its default's 5, and no guided run got there in 64 trials.
  vary(&ConvSchedule::kc, kc_);
  vary(&ConvSchedule::mc, adjacent(mc_values(s), s.mc));
  vary(&ConvSchedule::nc, adjacent(nc_, s.nc));
  vary(&ConvSchedule::pack_input, pack_input_);
  vary(&ConvSchedule::loop_order, loop_order_);
  vary(&ConvSchedule::partitions, partitions_);
  vary(&ConvSchedule::output_stores, output_stores_);
  return out;
}

const std::vector<ConvSchedule>& TuningSpace::all() const {
  if (enumerated_) return all_;
  std::set<std::string> seen;
  for (Strategy st : strategies_)
    for (int mr : mr_)
      for (int nr : nr_)
        for (int kc : kc_)
          for (int nc : nc_)
            for (PackInput pi : pack_input_)
              for (LoopOrder lo : loop_order_)
                for (int parts : partitions_)
                  for (OutputStores os : output_stores_) {
                    ConvSchedule base;
                    base.strategy = st, base.mr = mr, base.nr = nr, base.kc = kc, base.nc = nc;
                    base.pack_input = pi, base.loop_order = lo, base.partitions = parts, base.output_stores = os;
                    for (int mc : mc_values(normalise(base))) {
                      ConvSchedule c = base;
                      c.mc = mc;
                      c = normalise(c);
                      if (seen.insert(describe(c)).second) all_.push_back(c);
                    }
                  }
  enumerated_ = true;
  return all_;
}

double TuningSpace::prior(const ConvSchedule& raw, const ConvSchedule& reference) const {
  const ConvSchedule s = normalise(raw), ref = normalise(reference);
  const int vl = t_.vector_floats, vectors = std::max(1, s.mr / vl);
  const ConvDescriptor& e = tiled_;
  // The two tiled extents: output channels x pixels (forward-like) or x taps (weights).
  const bool input_lanes = s.strategy == Strategy::GemmInputLanes;
  const int64_t channels = input_lanes ? e.icg() : s.strategy == Strategy::Gemm ? e.ocg() : e.oc;
  const int64_t across = input_lanes ? e.ocg() : weights_pass_ ? e.icg() * e.kh * e.kw : e.oh() * e.ow();
  double cost = double(round_up(channels, s.mr)) / channels * double(round_up(across, s.nr)) / across;
  const int accumulators = vectors * s.nr;
  // 4-cycle FMAs on two pipes want 8 independent chains.
  if (accumulators < 8) cost *= 8.0 / accumulators;
  // Accumulators, one weight vector per vector of the tile and a broadcast must fit.
  const int live = accumulators + std::min(vectors, s.nr) + 1;
  if (live > t_.vector_registers) cost *= 1.0 + 0.5 * (live - t_.vector_registers);
  // Loads per FMA: MR/vl weight vectors and NR broadcasts feed vectors * NR FMAs.
  cost *= 1.0 + 0.25 * std::max(0.0, double(vectors + s.nr) / accumulators - 0.5);
  // The default's other choices were measured: moving away from each costs a little.
  const int moved = (s.kc != ref.kc) + (s.mc != ref.mc) + (s.nc != ref.nc) + (s.pack_input != ref.pack_input) +
                    (s.loop_order != ref.loop_order) + (s.partitions != ref.partitions) +
                    (s.strategy != ref.strategy) + (s.output_stores != ref.output_stores);
  return cost * (1.0 + 0.04 * moved);
}

}  // namespace convgen
