// convgen-bench's vocabulary and command line: the peers, the passes, the options
// (--help text in bench_options.cpp), and the constants every part of the bench shares.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "schedules/conv_schedule.h"

namespace convgen::bench {

inline constexpr double kMinSampleSeconds = 0.020;  // each timed sample lasts at least this long
inline constexpr double kCheckTolerance = 1e-4;     // max|diff| / max|ref| above this is flagged
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// kTuned: convgen with the schedule of a tuned record (--schedules), beside the default.
// kDefaultAgain: the default once more, a private copy of its code (other addresses) in
// another place of each round, on the layers that run the tuned peer. Its gap to the
// default is the noise a tuned kernel must exceed to count as slower than its default.
// Not a peer of --peers: it runs whenever the tuned peer runs.
enum Peer { kConvgen = 0, kBlis = 1, kOnednn = 2, kTuned = 3, kDefaultAgain = 4, kPeers = 5 };
inline const char* const kPeerNames[kPeers] = {"convgen", "blis", "onednn", "tuned", "default_again"};

enum class Pass { Fwd, BwdData, BwdWeights };
inline const char* pass_name(Pass p) {
  switch (p) {
    case Pass::Fwd: return "fwd";
    case Pass::BwdData: return "bwd_data";
    case Pass::BwdWeights: return "bwd_weights";
  }
  return "?";
}

struct Options {
  std::vector<std::string> layer_files;
  std::vector<std::string> descriptors;
  std::string pass = "fwd";  // as given: fwd, bwd_data, bwd_weights or all
  std::vector<Pass> passes;  // what it expands to, in run order
  int64_t mb = 8;
  int threads = 1;
  int runs = 5;
  std::string json_path;
  bool peer_enabled[kPeers] = {true, true, true, false, false};
  std::string schedules;           // --schedules FILE: tuned records, run as the "tuned" peer
  bool schedule_verbose = false;
  std::string schedule_overrides;  // --schedule WORDS, applied over the analytic default
  // --weights (or a pack_weights word of --schedule): how every convgen peer's GEMM
  // forward and backward-data weights are packed, once at set-up (as oneDNN's are
  // reordered, and as compile and the trainer's micro-batched layers run) or per call.
  convgen::PackWeights weights = convgen::PackWeights::Prepacked;
  std::string target_name;         // --target as given ("" = the build's default target)
  convgen::TargetInfo target = convgen::default_target();
  bool peer_isa_matched = true;    // --peer-isa matched (default) | native
  bool help = false;
  bool version = false;
};

// The --help text.
extern const char* const kUsage;

// Usage error (exit 2) for an unknown or malformed option, or nothing to benchmark.
Options parse_options(int argc, char** argv);

// --version: convgen, its generator sources, Halide, BLIS, oneDNN.
std::string version_text();

}  // namespace convgen::bench
