// convgen-bench's output: the human tables (one per set and pass, with geomean rows and a
// summary) and the JSON document (bench/README.md documents its fields).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_options.h"
#include "bench/layer_bench.h"

namespace convgen::bench {

using json = nlohmann::ordered_json;  // keeps keys in the documented order

struct SetSummary {
  Pass pass = Pass::Fwd;
  std::string set;
  int layers = 0;    // rows in the geomeans
  int excluded = 0;  // rows reported but left out (bwd_data of a network input layer)
  double geomean[kPeers] = {kNaN, kNaN, kNaN, kNaN, kNaN};
  double ratio_vs_onednn = kNaN, ratio_vs_blis = kNaN;
  double tuned_vs_onednn = kNaN, tuned_vs_default = kNaN;  // with --schedules
  int tuned_compared = 0;  // layers whose tuned kernel ran beside both default copies
  int tuned_below = 0;     // ... and read below the better copy beyond noise
};

// Prints the tables of one pass: one per set, each with its geomean row, then the pass's
// summary over the sets. Returns the summaries (per set, plus "all" when there are several).
std::vector<SetSummary> print_pass(Pass pass, const std::vector<LayerResult>& results, double peak,
                                   const Options& o);

// A number, or null when it is not finite.
json num(double v);
json layer_json(const LayerResult& r, double peak);
json summary_json(const SetSummary& s);

}  // namespace convgen::bench
