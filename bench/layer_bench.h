// One layer and pass of convgen-bench: every enabled peer set up, calibrated, timed in
// interleaved samples and cross-checked (bench/README.md has the method).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_options.h"
#include "schedules/conv_descriptor.h"

namespace convgen::bench {

struct Layer {
  std::string set;
  ConvDescriptor d;
};

// The layers of --layers files and --descriptor texts, at --mb.
std::vector<Layer> load_layers(const Options& o);

struct PeerResult {
  bool enabled = false;
  std::string skipped;          // non-empty: why this peer did not run on this layer
  std::vector<double> gflops;   // one sample per run
  double median_gflops = kNaN;
  int64_t reps = 1;             // calls per sample
  int64_t workspace_bytes = 0;
  int64_t packed_weight_floats = 0;  // convgen peers: weights packed once at set-up (0: per call, or none)
  std::function<void()> call;   // the timed call
  std::function<void()> finish; // untimed, after the samples: final outputs and workspace
  bool runs() const { return enabled && skipped.empty(); }
  // (best - third-best) / best of the GF/s samples (of the slowest when fewer than three);
  // NaN without samples. The tuner's spread (schedules/tune/timing_rule.h) is the same
  // idea over times, (third - best) / best seconds, which reads a little larger.
  double spread() const;
};

struct LayerResult {
  Layer layer;
  Pass pass = Pass::Fwd;
  double flops = 0;
  PeerResult peer[kPeers];
  convgen::ConvSchedule default_schedule;  // convgen's schedule, run again by kDefaultAgain
  std::string schedule;                 // describe() of convgen's schedule
  std::string tuned_schedule;           // describe() of the tuned record's schedule (kTuned)
  int convgen_threads = 1;
  std::vector<std::string> schedule_why;
  std::string onednn_impl, onednn_layouts;
  double onednn_reorder_ms = kNaN, onednn_reorder_in_ms = kNaN, onednn_reorder_out_ms = kNaN;
  bool blis_direct = false;
  // Cross-check: every other running peer's outputs against check_ref's (fwd: oneDNN, else
  // BLIS; backward: convgen, else oneDNN, else BLIS). "" when fewer than two peers ran.
  std::string check_ref;
  double diff[kPeers] = {kNaN, kNaN, kNaN, kNaN, kNaN};  // max|peer - ref| / max|ref|
  // The check column: fwd shows convgen against the reference (BLIS against oneDNN goes
  // to stderr); backward shows the worst peer against convgen.
  double check = kNaN;
  bool checked = false;
  bool network_input = false;
  // Left out of the geomeans: bwd_data of the network input layer.
  bool in_geomean() const { return !(pass == Pass::BwdData && network_input); }
  double ratio(Peer p) const { return ratio_of(kConvgen, p); }
  // The noise a tuned kernel is judged against: the gap between the default's two copies
  // relative to the better, or any of the three kernels' sample spread, at least 1%
  // (NaN when the control did not run).
  double default_noise() const;
  // True when the tuned kernel's median is below the better default copy's by more than
  // default_noise(): slower than its default beyond noise.
  bool tuned_below_default() const;
  double ratio_of(Peer a, Peer b) const {
    if (!peer[a].runs() || !peer[b].runs()) return kNaN;
    return peer[a].median_gflops / peer[b].median_gflops;
  }
};

inline bool check_ok(const LayerResult& r) { return r.check <= kCheckTolerance; }

// Sets up the peers of one layer and pass, times them and cross-checks their outputs.
LayerResult bench_layer(const Layer& layer, Pass pass, const Options& o);

}  // namespace convgen::bench
