// The tuner's search space for one layer and pass: every schedule the generator builds
// differently, as per-field value lists, with a normal form so that schedules the
// generator turns into the same kernel count once (docs/tuning.md, "The space").
//
// Which fields a pass reads (generator/conv): forward and backward-data (the forward
// convolution of each residue class) tile with mr x nr, block with mc / nc / kc, stage
// by pack_input, order by loop_order and store by output_stores (searched where the
// output per call is at least a third of the last-level cache); backward-weights tiles
// channels x taps with mr x nr, takes kc as its reduction item's pixels, nc as the taps
// of a packed panel block, and splits its reduction into `partitions` -- or, as
// gemm_input_lanes (unpadded 1x1 layers), tiles input x output channels, takes kc as
// pixels across images and loop_order as items or channel tiles outermost. `parallel`
// and `pack_weights` are never searched: the consumers fix them
// (generator/tune/tune_plan.h: recorded_parallel, and how each consumer hands its
// kernels their weights), and they are part of every candidate.
#pragma once

#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

class TuningSpace {
 public:
  // `variant` is the parallel field every candidate carries (the consumer's), `weights`
  // how the consumer hands GEMM kernels their weights (forward and backward-data; other
  // strategies and backward-weights read ONNX weights or none, and stay per_call).
  TuningSpace(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t, Parallel variant,
              PackWeights weights = PackWeights::PerCall);

  // The canonical schedule the generator builds `s` as: clamped tiles, blocks that
  // cover everything written as 0, fields the pass does not read at their defaults.
  ConvSchedule normalise(ConvSchedule s) const;

  // Normalised schedules one move away from `s`: one field to a neighbouring value (an
  // enum, the reduction block kc or the partitions to any other), or the register tile
  // reshaped at about the same accumulator count. Distinct, without `s`, in a fixed order.
  std::vector<ConvSchedule> neighbours(const ConvSchedule& s) const;

  // Every distinct normalised schedule of the space, in a fixed order.
  const std::vector<ConvSchedule>& all() const;

  // Estimated relative cost of a schedule (>= 1, lower is better): padding waste of the
  // register tile over channels and pixels (or taps), accumulator chains too few to
  // hide FMA latency, registers spilled, and a small charge per field the search moved
  // away from `reference` (the analytic default). Orders candidates; never decides.
  double prior(const ConvSchedule& s, const ConvSchedule& reference) const;

  // The convolution whose loops the fields tile: the layer, or for backward-data the
  // forward convolution of its residue class with the most work.
  const ConvDescriptor& tiled() const { return tiled_; }
  const std::string& pass() const { return pass_; }
  const TargetInfo& target() const { return t_; }

 private:
  ConvDescriptor d_, tiled_;
  std::string pass_;
  TargetInfo t_;
  Parallel variant_;
  PackWeights weights_;
  bool weights_pass_;
  bool output_staged_ = false;  // backward-data over several residue classes
  std::vector<Strategy> strategies_;
  std::vector<int> mr_, nr_, kc_, nc_, partitions_;
  std::vector<int> mc_tiles_;  // channel-block sizes in whole register tiles (0 = all)
  std::vector<PackInput> pack_input_;
  std::vector<LoopOrder> loop_order_;
  std::vector<OutputStores> output_stores_;
  mutable std::vector<ConvSchedule> all_;
  mutable bool enumerated_ = false;

  int64_t pixels_ = 0;  // output pixels per image the tiles clamp to (backward-data: its largest class)

  // The output channels one register tile covers and the tiles per image (and group),
  // as generator/conv/loop_nest.cpp counts them for the strategy.
  struct ChannelTiling {
    int tile_channels, tiles;
  };
  ChannelTiling channel_tiling(const ConvSchedule& s) const;
  std::vector<int> mc_values(const ConvSchedule& s) const;
};

}  // namespace convgen
