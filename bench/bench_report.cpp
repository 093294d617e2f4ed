#include "bench/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "schedules/errors.h"

namespace convgen::bench {

namespace cb = convgen::bench;

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

namespace {

std::string cell(double v, int width, int precision) {
  if (std::isnan(v)) return fmt::format("{:>{}}", "-", width);
  return fmt::format("{:>{}.{}f}", v, width, precision);
}

std::string mib(const PeerResult& p) {
  if (!p.runs()) return fmt::format("{:>7}", "-");
  return fmt::format("{:>7.1f}", static_cast<double>(p.workspace_bytes) / (1 << 20));
}

// With --schedules the tuned peer's columns follow: GF/s, %pk, tuned / oneDNN, tuned /
// default, the default's private copy / the default (the noise control), and "<" where
// the tuned kernel is below the better default copy beyond noise (the summary: how many
// of the layers with a tuned kernel).
void print_header(bool tuned) {
  fmt::print("{:<22} {:>8} | {:>7} {:>4} | {:>7} {:>4} | {:>7} {:>4} | {:>6} {:>6} | {:>7} {:>7} "
             "{:>7} | {:>8}",
             "layer", "GFLOP", "convgen", "%pk", "blis", "%pk", "onednn", "%pk", "cg/dn", "cg/bl",
             "ws cg", "ws bl", "ws dn", "check");
  if (tuned) fmt::print(" | {:>7} {:>4} {:>6} {:>6} {:>6} {:>5}", "tuned", "%pk", "tn/dn", "tn/cg", "cg'/cg", "below");
  fmt::print("\n{:-<22} {:->8} | {:->7} {:->4} | {:->7} {:->4} | {:->7} {:->4} | {:->6} {:->6} | "
             "{:->7} {:->7} {:->7} | {:->8}",
             "", "", "", "", "", "", "", "", "", "", "", "", "", "");
  if (tuned) fmt::print(" | {:->7} {:->4} {:->6} {:->6} {:->6} {:->5}", "", "", "", "", "", "");
  fmt::print("\n");
}

std::string check_cell(const LayerResult& r) {
  if (!r.checked) return fmt::format("{:>8}", "-");
  std::string s = fmt::format("{:>8.1e}", r.check);
  if (!check_ok(r)) s += " WARN";
  return s;
}

void print_row(const LayerResult& r, double peak) {
  auto gf = [&](Peer p) { return r.peer[p].runs() ? r.peer[p].median_gflops : kNaN; };
  auto pct = [&](Peer p) { return gf(p) / peak * 100.0; };
  // '*' marks a row left out of the geomeans (explained under the table).
  const std::string mark = r.in_geomean() ? "" : "*";
  std::string name = r.layer.d.name;
  if (name.size() + mark.size() > 22) name = name.substr(0, 21 - mark.size()) + "~";
  name += mark;
  fmt::print("{:<22} {} | {} {} | {} {} | {} {} | {} {} | {} {} {} | {}", name,
             cell(r.flops * 1e-9, 8, 3), cell(gf(kConvgen), 7, 1), cell(pct(kConvgen), 4, 0),
             cell(gf(kBlis), 7, 1), cell(pct(kBlis), 4, 0), cell(gf(kOnednn), 7, 1),
             cell(pct(kOnednn), 4, 0), cell(r.ratio(kOnednn), 6, 2), cell(r.ratio(kBlis), 6, 2),
             mib(r.peer[kConvgen]), mib(r.peer[kBlis]), mib(r.peer[kOnednn]), check_cell(r));
  if (r.peer[kTuned].enabled)
    fmt::print(" | {} {} {} {} {} {:>5}", cell(gf(kTuned), 7, 1), cell(pct(kTuned), 4, 0),
               cell(r.ratio_of(kTuned, kOnednn), 6, 2), cell(r.ratio_of(kTuned, kConvgen), 6, 2),
               cell(r.ratio_of(kDefaultAgain, kConvgen), 6, 2), r.tuned_below_default() ? "<" : "");
  fmt::print("\n");
}

SetSummary summarize(Pass pass, const std::string& set,
                     const std::vector<const LayerResult*>& all_rows) {
  SetSummary s;
  s.pass = pass;
  s.set = set;
  std::vector<const LayerResult*> rows;
  for (const LayerResult* r : all_rows) {
    if (r->in_geomean())
      rows.push_back(r);
    else
      ++s.excluded;
  }
  s.layers = static_cast<int>(rows.size());
  for (int p = 0; p < kPeers; ++p) {
    std::vector<double> v;
    for (const LayerResult* r : rows)
      if (r->peer[p].runs()) v.push_back(r->peer[p].median_gflops);
    s.geomean[p] = cb::geomean(v);
  }
  std::vector<double> vs_dn, vs_bl, tn_dn, tn_cg;
  for (const LayerResult* r : rows) {
    vs_dn.push_back(r->ratio(kOnednn));
    vs_bl.push_back(r->ratio(kBlis));
    // A layer without a tuned record runs the default: its tuned ratio is the default's.
    const Peer tuned = r->peer[kTuned].runs() ? kTuned : kConvgen;
    if (r->peer[kTuned].enabled) {
      tn_dn.push_back(r->ratio_of(tuned, kOnednn));
      tn_cg.push_back(r->ratio_of(tuned, kConvgen));
    }
    if (!std::isnan(r->default_noise())) {
      ++s.tuned_compared;
      s.tuned_below += r->tuned_below_default();
    }
  }
  s.ratio_vs_onednn = cb::geomean(vs_dn);
  s.ratio_vs_blis = cb::geomean(vs_bl);
  if (!tn_dn.empty()) {
    s.tuned_vs_onednn = cb::geomean(tn_dn);
    s.tuned_vs_default = cb::geomean(tn_cg);
  }
  return s;
}

void print_summary_row(const SetSummary& s, double peak, bool tuned) {
  std::string label = "geomean " + s.set;
  if (label.size() > 22) label = label.substr(0, 21) + "~";
  fmt::print("{:<22} {:>8} | {} {} | {} {} | {} {} | {} {} |", label, "", cell(s.geomean[0], 7, 1),
             cell(s.geomean[0] / peak * 100, 4, 0), cell(s.geomean[1], 7, 1),
             cell(s.geomean[1] / peak * 100, 4, 0), cell(s.geomean[2], 7, 1),
             cell(s.geomean[2] / peak * 100, 4, 0), cell(s.ratio_vs_onednn, 6, 2),
             cell(s.ratio_vs_blis, 6, 2));
  if (tuned)
    fmt::print(" {:>7} {:>7} {:>7} {:>8} | {} {} {} {} {:>6} {:>5}", "", "", "", "", cell(s.geomean[kTuned], 7, 1),
               cell(s.geomean[kTuned] / peak * 100, 4, 0), cell(s.tuned_vs_onednn, 6, 2),
               cell(s.tuned_vs_default, 6, 2), "", fmt::format("{}/{}", s.tuned_below, s.tuned_compared));
  fmt::print("\n");
}

json peer_json(const LayerResult& r, Peer p, double peak) {
  const PeerResult& pr = r.peer[p];
  if (!pr.enabled) return nullptr;
  json j;
  if (!pr.skipped.empty()) {
    j["skipped"] = pr.skipped;
    return j;
  }
  j["gflops_median"] = num(pr.median_gflops);
  json all = json::array();
  for (double g : pr.gflops) all.push_back(num(g));
  j["gflops_all"] = all;
  j["pct_peak"] = num(pr.median_gflops / peak * 100.0);
  j["reps_per_sample"] = pr.reps;
  j["workspace_bytes"] = pr.workspace_bytes;
  if (p == kConvgen || p == kTuned || p == kDefaultAgain) j["packed_weight_floats"] = pr.packed_weight_floats;
  if (p == kTuned) {
    j["schedule"] = r.tuned_schedule;
  } else if (p == kDefaultAgain) {
    j["schedule"] = r.schedule;
  } else if (p == kConvgen) {
    j["schedule"] = r.schedule;
    j["schedule_why"] = r.schedule_why;
    j["threads"] = r.convgen_threads;
    if (r.pass == Pass::Fwd) j["max_rel_diff"] = num(r.diff[kConvgen]);
    j["check_ref"] = r.check_ref;
  } else if (p == kBlis) {
    j["direct_1x1"] = r.blis_direct;
  } else {
    j["impl"] = r.onednn_impl;
    j["layouts"] = r.onednn_layouts;
    j["reorder_ms"] = num(r.onednn_reorder_ms);
    j["reorder_in_ms"] = num(r.onednn_reorder_in_ms);
    j["reorder_out_ms"] = num(r.onednn_reorder_out_ms);
  }
  // Forward keeps convgen's difference in "max_rel_diff" above; every other compared
  // peer names its reference.
  if (!std::isnan(r.diff[p]) && !(r.pass == Pass::Fwd && p == kConvgen))
    j[fmt::format("max_rel_diff_vs_{}", r.check_ref)] = num(r.diff[p]);
  return j;
}

}  // namespace

json summary_json(const SetSummary& s) {
  json g;
  for (int p = 0; p < kPeers; ++p) g[kPeerNames[p]] = num(s.geomean[p]);
  return {{"pass", pass_name(s.pass)},
          {"set", s.set},
          {"layers", s.layers},
          {"excluded_layers", s.excluded},
          {"geomean", g},
          {"ratio_vs_onednn", num(s.ratio_vs_onednn)},
          {"ratio_vs_blis", num(s.ratio_vs_blis)},
          {"tuned_vs_onednn", num(s.tuned_vs_onednn)},
          {"tuned_vs_default", num(s.tuned_vs_default)},
          {"tuned_compared", s.tuned_compared},
          {"tuned_below_default", s.tuned_below}};
}

std::vector<SetSummary> print_pass(Pass pass, const std::vector<LayerResult>& results,
                                   double peak, const Options& o) {
  std::vector<const LayerResult*> pass_rows;
  for (const LayerResult& r : results)
    if (r.pass == pass) pass_rows.push_back(&r);
  std::vector<std::string> set_order;
  for (const LayerResult* r : pass_rows)
    if (std::find(set_order.begin(), set_order.end(), r->layer.set) == set_order.end())
      set_order.push_back(r->layer.set);

  if (o.passes.size() > 1) fmt::print("\n######## pass {} ########\n", pass_name(pass));
  std::vector<SetSummary> summaries;
  bool any_excluded = false;
  for (const std::string& set : set_order) {
    std::vector<const LayerResult*> rows;
    for (const LayerResult* r : pass_rows)
      if (r->layer.set == set) rows.push_back(r);
    fmt::print("\n== {} {} ({} layer{}, mb {}) ==\n", set, pass_name(pass), rows.size(),
               rows.size() == 1 ? "" : "s", o.mb);
    const bool tuned = o.peer_enabled[kTuned];
    print_header(tuned);
    for (const LayerResult* r : rows) {
      print_row(*r, peak);
      any_excluded = any_excluded || !r->in_geomean();
      if (o.schedule_verbose && r->peer[kConvgen].enabled) {
        fmt::print("    schedule: {}\n", r->schedule);
        for (const std::string& why : r->schedule_why) fmt::print("      {}\n", why);
      }
      for (int p = 0; p < kPeers; ++p)
        if (r->peer[p].enabled && !r->peer[p].skipped.empty() && p != kDefaultAgain)
          fmt::print("    {} skipped: {}\n", kPeerNames[p], r->peer[p].skipped);
    }
    summaries.push_back(summarize(pass, set, rows));
    print_summary_row(summaries.back(), peak, tuned);
  }
  if (set_order.size() > 1) summaries.push_back(summarize(pass, "all", pass_rows));
  if (any_excluded)
    fmt::print("* the network's input layer (ic 1 or 3): training never computes its data "
               "gradient,\n  so the row is reported but left out of the {} geomeans\n",
               pass_name(pass));

  fmt::print("\nsummary {}: geomean over each set of the per-layer medians (GF/s), geomean of "
             "the per-layer ratios\n",
             pass_name(pass));
  print_header(o.peer_enabled[kTuned]);
  for (const SetSummary& s : summaries) print_summary_row(s, peak, o.peer_enabled[kTuned]);
  return summaries;
}

json layer_json(const LayerResult& r, double peak) {
  return {{"pass", pass_name(r.pass)},
          {"set", r.layer.set},
          {"name", r.layer.d.name},
          {"descriptor", r.layer.d.normalised()},
          {"flops", r.flops},
          {"network_input", r.network_input},
          {"in_geomean", r.in_geomean()},
          {"convgen", peer_json(r, kConvgen, peak)},
          {"blis", peer_json(r, kBlis, peak)},
          {"onednn", peer_json(r, kOnednn, peak)},
          {"tuned", peer_json(r, kTuned, peak)},
          {"ratio_vs_onednn", num(r.ratio(kOnednn))},
          {"default_again", peer_json(r, kDefaultAgain, peak)},
          {"tuned_vs_onednn", num(r.ratio_of(kTuned, kOnednn))},
          {"tuned_vs_default", num(r.ratio_of(kTuned, kConvgen))},
          {"default_noise", num(r.default_noise())},
          {"tuned_below_default", r.tuned_below_default()},
          {"ratio_vs_blis", num(r.ratio(kBlis))},
          {"check_ref", r.check_ref},
          {"max_rel_diff", num(r.check)},
          {"check_ok", r.checked ? json(check_ok(r)) : json(nullptr)}};
}


}  // namespace convgen::bench
