// convgen-bench: convgen's generated forward kernel against two peers on the same layers,
// measured side by side on this machine.
//
//   convgen  JitForwardKernel with the analytic default schedule (NHWC in, NHWK out)
//   blis     explicit im2col + one BLIS SGEMM per group + bias/ReLU pass (im2col_blis.h)
//   onednn   oneDNN's forward convolution on its own blocked layouts (onednn_conv.h)
//
// Methodology (bench/README.md): one FMA probe at the start and one at the end; per layer,
// warm-up, then R interleaved runs (convgen, blis, onednn, convgen, ...), each sample at
// least 20 ms (a batch of repeats divided by its count); the median sample is reported.
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "conv_descriptor.h"
#include "conv_jit.h"
#include "conv_schedule.h"
#include "schedule_records.h"
#include "build_info.h"
#include "errors.h"
#include "fma_probe.h"
#include "im2col_blis.h"
#include "onednn_conv.h"

namespace {

using convgen::ConvDescriptor;
using convgen::Error;
using convgen::ExitCode;
namespace cb = convgen::bench;
using json = nlohmann::ordered_json;  // keeps keys in the documented order

constexpr double kMinSampleSeconds = 0.020;  // each timed sample lasts at least this long
constexpr double kCheckTolerance = 1e-4;     // max|diff| / max|ref| above this is flagged
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

enum Peer { kConvgen = 0, kBlis = 1, kOnednn = 2, kPeers = 3 };
const char* const kPeerNames[kPeers] = {"convgen", "blis", "onednn"};

// ---------------------------------------------------------------------------------------
// Command line

struct Options {
  std::vector<std::string> layer_files;
  std::vector<std::string> descriptors;
  std::string pass = "fwd";
  int64_t mb = 8;
  int threads = 1;
  int runs = 5;
  std::string json_path;
  bool peer_enabled[kPeers] = {true, true, true};
  bool schedule_verbose = false;
  std::string schedule_overrides;  // --schedule WORDS, applied over the analytic default
  bool help = false;
  bool version = false;
};

const char* const kUsage =
    R"(usage: convgen-bench [--layers FILE.tsv ...] [--descriptor D ...] [options]

Times convgen's generated forward convolution against im2col+BLIS and oneDNN on the
same layers, interleaved, and reports median GF/s, % of the measured FMA peak, ratios,
workspace and a correctness cross-check.

layers (at least one; each option may be repeated or take several values):
  --layers FILE.tsv ...   layer sets in the shared/layers TSV format; set name = file stem
  --descriptor D ...      layers in descriptor grammar (docs/descriptor.md), set "cli"
options:
  --pass P                fwd (default) | all (= fwd for now); bwd_data, bwd_weights: not yet
  --mb N                  minibatch used for every layer (overrides the file; default 8)
  --threads T             OpenMP / BLIS / oneDNN threads (default 1); with T > 1 convgen runs
                          its intra-kernel parallel variant (parallel=pixels) on T threads
  --runs R                interleaved timed runs per layer and peer (default 5)
  --json FILE             also write the results as JSON (atomically: temp file + rename)
  --peers LIST            comma-separated subset of convgen,blis,onednn (default all)
  --schedule-verbose      print the analytic schedule's reasons for every layer
  --schedule WORDS        override fields of convgen's schedule on every layer, e.g.
                          'mr=8 nr=8' (same words as convgen compile-layer --schedule)
  --help                  this text
  --version               versions of convgen, its generator sources, Halide, BLIS, oneDNN
)";

int64_t parse_int(const std::string& option, const std::string& text, int64_t lo, int64_t hi) {
  size_t used = 0;
  int64_t v = 0;
  try {
    v = std::stoll(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size())
    throw Error(ExitCode::Usage, fmt::format("{}: '{}' is not an integer", option, text));
  if (v < lo || v > hi)
    throw Error(ExitCode::Usage, fmt::format("{}: {} is out of range [{}, {}]", option, v, lo, hi));
  return v;
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  // Accept --opt=value as well as --opt value.
  std::vector<std::string> expanded;
  for (const std::string& a : args) {
    const auto eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      expanded.push_back(a.substr(0, eq));
      expanded.push_back(a.substr(eq + 1));
    } else {
      expanded.push_back(a);
    }
  }
  bool peers_given = false;
  for (size_t i = 0; i < expanded.size(); ++i) {
    const std::string& a = expanded[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= expanded.size())
        throw Error(ExitCode::Usage, fmt::format("{} needs a value (see --help)", a));
      return expanded[++i];
    };
    // Values up to the next --option.
    auto values = [&](std::vector<std::string>& into) {
      const size_t before = into.size();
      while (i + 1 < expanded.size() && expanded[i + 1].rfind("--", 0) != 0)
        into.push_back(expanded[++i]);
      if (into.size() == before)
        throw Error(ExitCode::Usage, fmt::format("{} needs a value (see --help)", a));
    };
    if (a == "--layers") {
      values(o.layer_files);
    } else if (a == "--descriptor") {
      values(o.descriptors);
    } else if (a == "--pass") {
      o.pass = value();
    } else if (a == "--mb") {
      o.mb = parse_int(a, value(), 1, 1 << 20);
    } else if (a == "--threads") {
      o.threads = static_cast<int>(parse_int(a, value(), 1, 4096));
    } else if (a == "--runs") {
      o.runs = static_cast<int>(parse_int(a, value(), 1, 1000));
    } else if (a == "--json") {
      o.json_path = value();
    } else if (a == "--peers") {
      const std::string list = value();
      if (peers_given)
        throw Error(ExitCode::Usage, "--peers given twice");
      peers_given = true;
      for (bool& e : o.peer_enabled) e = false;
      size_t start = 0;
      while (start <= list.size()) {
        const size_t comma = std::min(list.find(',', start), list.size());
        const std::string name = list.substr(start, comma - start);
        bool found = false;
        for (int p = 0; p < kPeers; ++p)
          if (name == kPeerNames[p]) o.peer_enabled[p] = found = true;
        if (!found)
          throw Error(ExitCode::Usage,
                      fmt::format("--peers: unknown peer '{}' (known: convgen, blis, onednn)", name));
        start = comma + 1;
      }
    } else if (a == "--schedule-verbose") {
      o.schedule_verbose = true;
    } else if (a == "--schedule") {
      o.schedule_overrides = value();
    } else if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else {
      throw Error(ExitCode::Usage, fmt::format("unknown argument '{}' (see --help)", a));
    }
  }
  if (o.help || o.version) return o;
  if (o.pass == "bwd_data" || o.pass == "bwd_weights" || o.pass == "bwd")
    throw Error(ExitCode::Usage, fmt::format("--pass {}: not implemented yet", o.pass));
  if (o.pass != "fwd" && o.pass != "all")
    throw Error(ExitCode::Usage,
                fmt::format("--pass {}: unknown pass (fwd, bwd_data, bwd_weights, all)", o.pass));
  if (o.layer_files.empty() && o.descriptors.empty())
    throw Error(ExitCode::Usage,
                "nothing to benchmark: give --layers FILE.tsv or --descriptor D (see --help)");
  return o;
}

std::string version_text() {
  return fmt::format(
      "convgen-bench {}\ngenerator sources {}\nHalide {}\nBLIS {} ({})\noneDNN {}\n",
      CONVGEN_VERSION, CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION, cb::blis_version(),
      cb::blis_arch(), cb::onednn_version());
}

// ---------------------------------------------------------------------------------------
// Layers

struct Layer {
  std::string set;
  ConvDescriptor d;
};

std::vector<Layer> load_layers(const Options& o) {
  std::vector<Layer> layers;
  for (const std::string& path : o.layer_files) {
    const std::string set = std::filesystem::path(path).stem().string();
    for (ConvDescriptor d : convgen::read_layer_set(path)) layers.push_back({set, d});
  }
  int cli_index = 0;
  for (const std::string& text : o.descriptors) {
    ConvDescriptor d = convgen::parse_descriptor(text);
    ++cli_index;
    if (d.name.empty()) d.name = fmt::format("cli{}", cli_index);
    layers.push_back({"cli", d});
  }
  for (Layer& l : layers) {
    l.d.mb = o.mb;
    convgen::validate(l.d);
  }
  return layers;
}

// ---------------------------------------------------------------------------------------
// Timing

struct PeerResult {
  bool enabled = false;
  std::string skipped;          // non-empty: why this peer did not run on this layer
  std::vector<double> gflops;   // one sample per run
  double median_gflops = kNaN;
  int64_t reps = 1;             // calls per sample
  int64_t workspace_bytes = 0;
  std::function<void()> call;   // the timed call
  bool runs() const { return enabled && skipped.empty(); }
};

// Warm-up call, then one timed call to size the batch so a sample lasts >= 20 ms.
void calibrate(PeerResult& r) {
  r.call();
  cb::Timer t;
  r.call();
  const double s = t.seconds();
  r.reps = s >= kMinSampleSeconds
               ? 1
               : static_cast<int64_t>(std::ceil(kMinSampleSeconds / std::max(s, 1e-9)));
  r.reps = std::min<int64_t>(r.reps, 1000000);
}

void sample(PeerResult& r, double flops) {
  cb::Timer t;
  for (int64_t i = 0; i < r.reps; ++i) r.call();
  const double seconds = t.seconds() / static_cast<double>(r.reps);
  r.gflops.push_back(flops / seconds * 1e-9);
}

// max|a - b| / max|ref|; NaN if any value is NaN (e.g. an output never written).
double relative_diff(const std::vector<float>& a, const std::vector<float>& ref) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(diff <= max_diff)) max_diff = diff;  // also catches NaN
    if (std::isnan(max_diff)) return kNaN;
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  if (max_ref == 0.0) return max_diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return max_diff / max_ref;
}

// ---------------------------------------------------------------------------------------
// Results

struct LayerResult {
  Layer layer;
  double flops = 0;
  PeerResult peer[kPeers];
  std::string schedule;                 // describe() of convgen's schedule
  int convgen_threads = 1;
  std::vector<std::string> schedule_why;
  std::string onednn_impl, onednn_layouts;
  double onednn_reorder_ms = kNaN, onednn_reorder_in_ms = kNaN, onednn_reorder_out_ms = kNaN;
  bool blis_direct = false;
  std::string check_ref;                // "onednn", "blis" or "" (no check)
  double convgen_diff = kNaN;           // convgen vs check_ref
  double blis_vs_onednn_diff = kNaN;    // sanity check of the two peers
  double ratio(Peer p) const {
    if (!peer[kConvgen].runs() || !peer[p].runs()) return kNaN;
    return peer[kConvgen].median_gflops / peer[p].median_gflops;
  }
};

LayerResult bench_layer(const Layer& layer, const Options& o) {
  const ConvDescriptor& d = layer.d;
  LayerResult res;
  res.layer = layer;
  res.flops = d.flops();
  for (int p = 0; p < kPeers; ++p) res.peer[p].enabled = o.peer_enabled[p];

  const int64_t x_size = d.mb * d.ih * d.iw * d.ic;
  const int64_t w_size = d.oc * d.icg() * d.kh * d.kw;
  const int64_t y_size = d.mb * d.oh() * d.ow() * d.oc;
  std::vector<float> x(x_size), w(w_size), bias(d.oc);
  cb::fill_uniform(x.data(), x_size, 0x5eed0001);
  cb::fill_uniform(w.data(), w_size, 0x5eed0002);
  cb::fill_uniform(bias.data(), d.oc, 0x5eed0003);
  const float* bias_ptr = d.bias ? bias.data() : nullptr;
  // Outputs start as NaN so an element a kernel never writes fails the check.
  std::vector<float> y[kPeers];

  std::unique_ptr<convgen::JitForwardKernel> convgen_kernel;
  std::unique_ptr<cb::Im2colBlisConv> blis;
  std::unique_ptr<cb::OnednnConv> onednn;

  if (res.peer[kConvgen].enabled) {
    const convgen::TargetInfo target = convgen::default_target();
    convgen::ConvSchedule s = convgen::analytic_schedule(d, target, &res.schedule_why);
    if (!o.schedule_overrides.empty()) {
      convgen::apply_schedule_overrides(o.schedule_overrides, &s);
      res.schedule_why.push_back(fmt::format("bench: --schedule '{}'", o.schedule_overrides));
    }
    if (o.threads > 1) {
      // The intra-kernel parallel variant over the OpenMP threads (never the reduction,
      // so the result is the same as on one thread): images when there are enough of
      // them to share out, else pixel blocks of each image.
      s.parallel = d.mb >= 2 * o.threads ? convgen::Parallel::Images : convgen::Parallel::Pixels;
      res.schedule_why.push_back(fmt::format("bench: parallel={} for {} threads", convgen::to_string(s.parallel), o.threads));
      res.convgen_threads = o.threads;
    }
    res.schedule = convgen::describe(s);
    convgen_kernel = std::make_unique<convgen::JitForwardKernel>(d, s, target);
    y[kConvgen].assign(y_size, std::numeric_limits<float>::quiet_NaN());
    float* out = y[kConvgen].data();
    res.peer[kConvgen].call = [&, out] { convgen_kernel->run(x.data(), w.data(), bias_ptr, out); };
  }
  if (res.peer[kBlis].enabled) {
    const int64_t need = cb::Im2colBlisConv::workspace_bytes_for(d);
    const int64_t avail = cb::available_memory_bytes();
    if (avail > 0 && need > avail / 2) {
      res.peer[kBlis].skipped = fmt::format("im2col buffer {:.1f} GiB exceeds half of MemAvailable",
                                            static_cast<double>(need) / (1 << 30));
    } else {
      blis = std::make_unique<cb::Im2colBlisConv>(d, o.threads, w.data());
      res.blis_direct = blis->direct();
      res.peer[kBlis].workspace_bytes = blis->workspace_bytes();
      y[kBlis].assign(y_size, std::numeric_limits<float>::quiet_NaN());
      float* out = y[kBlis].data();
      res.peer[kBlis].call = [&, out] { blis->run(x.data(), bias.data(), out); };
    }
  }
  if (res.peer[kOnednn].enabled) {
    onednn = std::make_unique<cb::OnednnConv>(d, o.threads);
    onednn->prepare(x.data(), w.data(), bias.data());  // untimed reorders into its layouts
    res.onednn_impl = onednn->impl_name();
    res.onednn_layouts = onednn->layouts();
    res.onednn_reorder_in_ms = onednn->reorder_in_ms();
    res.onednn_reorder_out_ms = onednn->reorder_out_ms();
    res.onednn_reorder_ms = onednn->reorder_ms();
    res.peer[kOnednn].workspace_bytes = onednn->workspace_bytes();
    res.peer[kOnednn].call = [&] { onednn->run(); };
  }

  omp_set_num_threads(o.threads);
  for (PeerResult& p : res.peer)
    if (p.runs()) calibrate(p);
  for (int run = 0; run < o.runs; ++run)
    for (PeerResult& p : res.peer)
      if (p.runs()) sample(p, res.flops);
  for (PeerResult& p : res.peer)
    if (p.runs()) p.median_gflops = cb::median(p.gflops);
  if (convgen_kernel) res.peer[kConvgen].workspace_bytes = convgen_kernel->last_workspace_bytes();

  // Correctness cross-check against oneDNN (or BLIS when oneDNN is not run).
  if (onednn) {
    y[kOnednn].assign(y_size, std::numeric_limits<float>::quiet_NaN());
    onednn->run_and_fetch(x.data(), w.data(), bias.data(), y[kOnednn].data());
  }
  const Peer ref = res.peer[kOnednn].runs() ? kOnednn : res.peer[kBlis].runs() ? kBlis : kPeers;
  if (ref != kPeers) {
    res.check_ref = kPeerNames[ref];
    if (res.peer[kConvgen].runs()) res.convgen_diff = relative_diff(y[kConvgen], y[ref]);
    if (ref == kOnednn && res.peer[kBlis].runs())
      res.blis_vs_onednn_diff = relative_diff(y[kBlis], y[kOnednn]);
  }
  for (PeerResult& p : res.peer) p.call = nullptr;  // they capture this frame's locals
  return res;
}

// ---------------------------------------------------------------------------------------
// Human table

std::string cell(double v, int width, int precision) {
  if (std::isnan(v)) return fmt::format("{:>{}}", "-", width);
  return fmt::format("{:>{}.{}f}", v, width, precision);
}

std::string mib(const PeerResult& p) {
  if (!p.runs()) return fmt::format("{:>7}", "-");
  return fmt::format("{:>7.1f}", static_cast<double>(p.workspace_bytes) / (1 << 20));
}

void print_header() {
  fmt::print("{:<22} {:>8} | {:>7} {:>4} | {:>7} {:>4} | {:>7} {:>4} | {:>6} {:>6} | {:>7} {:>7} "
             "{:>7} | {:>8}\n",
             "layer", "GFLOP", "convgen", "%pk", "blis", "%pk", "onednn", "%pk", "cg/dn", "cg/bl",
             "ws cg", "ws bl", "ws dn", "check");
  fmt::print("{:-<22} {:->8} | {:->7} {:->4} | {:->7} {:->4} | {:->7} {:->4} | {:->6} {:->6} | "
             "{:->7} {:->7} {:->7} | {:->8}\n",
             "", "", "", "", "", "", "", "", "", "", "", "", "", "");
}

std::string check_cell(const LayerResult& r) {
  if (std::isnan(r.convgen_diff) && (r.check_ref.empty() || !r.peer[kConvgen].runs()))
    return fmt::format("{:>8}", "-");
  std::string s = fmt::format("{:>8.1e}", r.convgen_diff);
  if (!(r.convgen_diff <= kCheckTolerance)) s += " WARN";
  return s;
}

void print_row(const LayerResult& r, double peak) {
  auto gf = [&](Peer p) { return r.peer[p].runs() ? r.peer[p].median_gflops : kNaN; };
  auto pct = [&](Peer p) { return gf(p) / peak * 100.0; };
  std::string name = r.layer.d.name;
  if (name.size() > 22) name = name.substr(0, 21) + "~";
  fmt::print("{:<22} {} | {} {} | {} {} | {} {} | {} {} | {} {} {} | {}\n", name,
             cell(r.flops * 1e-9, 8, 3), cell(gf(kConvgen), 7, 1), cell(pct(kConvgen), 4, 0),
             cell(gf(kBlis), 7, 1), cell(pct(kBlis), 4, 0), cell(gf(kOnednn), 7, 1),
             cell(pct(kOnednn), 4, 0), cell(r.ratio(kOnednn), 6, 2), cell(r.ratio(kBlis), 6, 2),
             mib(r.peer[kConvgen]), mib(r.peer[kBlis]), mib(r.peer[kOnednn]), check_cell(r));
}

struct SetSummary {
  std::string set;
  int layers = 0;
  double geomean[kPeers] = {kNaN, kNaN, kNaN};
  double ratio_vs_onednn = kNaN, ratio_vs_blis = kNaN;
};

SetSummary summarize(const std::string& set, const std::vector<const LayerResult*>& rows) {
  SetSummary s;
  s.set = set;
  s.layers = static_cast<int>(rows.size());
  for (int p = 0; p < kPeers; ++p) {
    std::vector<double> v;
    for (const LayerResult* r : rows)
      if (r->peer[p].runs()) v.push_back(r->peer[p].median_gflops);
    s.geomean[p] = cb::geomean(v);
  }
  std::vector<double> vs_dn, vs_bl;
  for (const LayerResult* r : rows) {
    vs_dn.push_back(r->ratio(kOnednn));
    vs_bl.push_back(r->ratio(kBlis));
  }
  s.ratio_vs_onednn = cb::geomean(vs_dn);
  s.ratio_vs_blis = cb::geomean(vs_bl);
  return s;
}

void print_summary_row(const SetSummary& s, double peak) {
  std::string label = "geomean " + s.set;
  if (label.size() > 22) label = label.substr(0, 21) + "~";
  fmt::print("{:<22} {:>8} | {} {} | {} {} | {} {} | {} {} |\n", label, "", cell(s.geomean[0], 7, 1),
             cell(s.geomean[0] / peak * 100, 4, 0), cell(s.geomean[1], 7, 1),
             cell(s.geomean[1] / peak * 100, 4, 0), cell(s.geomean[2], 7, 1),
             cell(s.geomean[2] / peak * 100, 4, 0), cell(s.ratio_vs_onednn, 6, 2),
             cell(s.ratio_vs_blis, 6, 2));
}

// ---------------------------------------------------------------------------------------
// JSON

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

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
  if (p == kConvgen) {
    j["schedule"] = r.schedule;
    j["schedule_why"] = r.schedule_why;
    j["threads"] = r.convgen_threads;
    j["max_rel_diff"] = num(r.convgen_diff);
    j["check_ref"] = r.check_ref;
  } else if (p == kBlis) {
    j["direct_1x1"] = r.blis_direct;
    if (!std::isnan(r.blis_vs_onednn_diff)) j["max_rel_diff_vs_onednn"] = num(r.blis_vs_onednn_diff);
  } else {
    j["impl"] = r.onednn_impl;
    j["layouts"] = r.onednn_layouts;
    j["reorder_ms"] = num(r.onednn_reorder_ms);
    j["reorder_in_ms"] = num(r.onednn_reorder_in_ms);
    j["reorder_out_ms"] = num(r.onednn_reorder_out_ms);
  }
  return j;
}

json summary_json(const SetSummary& s) {
  json g;
  for (int p = 0; p < kPeers; ++p) g[kPeerNames[p]] = num(s.geomean[p]);
  return {{"set", s.set},
          {"layers", s.layers},
          {"geomean", g},
          {"ratio_vs_onednn", num(s.ratio_vs_onednn)},
          {"ratio_vs_blis", num(s.ratio_vs_blis)}};
}

void write_json_atomically(const std::string& path, const json& doc) {
  const std::string tmp = fmt::format("{}.tmp.{}", path, static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error(ExitCode::Io, fmt::format("cannot write {}", tmp));
    out << doc.dump(2) << '\n';
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error(ExitCode::Io, fmt::format("cannot write {}", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error(ExitCode::Io, fmt::format("cannot rename {} to {}", tmp, path));
  }
}

// ---------------------------------------------------------------------------------------

int run_bench(const Options& o) {
  const std::vector<Layer> layers = load_layers(o);
  omp_set_num_threads(o.threads);

  const std::string cpu = cb::cpu_model_name();
  fmt::print("convgen-bench {}  pass fwd  mb {}  threads {}  runs {}  cpu \"{}\"\n", CONVGEN_VERSION,
             o.mb, o.threads, o.runs, cpu);
  if (o.pass == "all")
    fmt::print("note: --pass all runs fwd only for now (backward passes are not implemented yet)\n");
  if (o.threads > 1 && o.peer_enabled[kConvgen])
    fmt::print("note: convgen runs its intra-kernel parallel variant (parallel=images, or pixels when the\n"
               "      minibatch is small) on {} OpenMP threads\n",
               o.threads);
  std::fflush(stdout);
  const double peak_start = cb::measure_fma_peak_gflops(o.threads);
  fmt::print(stderr, "convgen-bench: FMA probe at start {:.1f} GFLOP/s\n", peak_start);

  // Progress goes to stderr; the table is printed at the end, when the mean probe is known.
  std::vector<LayerResult> results;
  results.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers[i];
    fmt::print(stderr, "convgen-bench: [{}/{}] {}/{} {} ...", i + 1, layers.size(), layer.set,
               layer.d.name, layer.d.normalised());
    std::fflush(stderr);
    cb::Timer t;
    results.push_back(bench_layer(layer, o));
    const LayerResult& r = results.back();
    std::string line;
    for (int p = 0; p < kPeers; ++p)
      if (r.peer[p].runs()) line += fmt::format(" {} {:.1f}", kPeerNames[p], r.peer[p].median_gflops);
    fmt::print(stderr, "{} GF/s ({:.1f} s)\n", line, t.seconds());
    if (r.blis_vs_onednn_diff > kCheckTolerance || std::isinf(r.blis_vs_onednn_diff))
      fmt::print(stderr, "convgen-bench: warning: {}: blis and onednn disagree ({:.1e})\n",
                 r.layer.d.name, r.blis_vs_onednn_diff);
  }

  const double peak_end = cb::measure_fma_peak_gflops(o.threads);
  const double peak = 0.5 * (peak_start + peak_end);
  fmt::print("FMA probe ({} thread{}): {:.1f} GFLOP/s at start, {:.1f} at end; %pk uses the mean "
             "{:.1f}\n",
             o.threads, o.threads > 1 ? "s" : "", peak_start, peak_end, peak);
  fmt::print("GF/s = nominal 2*N*K*(C/g)*R*S*P*Q / median of {} interleaved samples; ws in MiB; "
             "check = max|convgen-ref|/max|ref|\n",
             o.runs);

  std::vector<std::string> set_order;
  for (const LayerResult& r : results)
    if (std::find(set_order.begin(), set_order.end(), r.layer.set) == set_order.end())
      set_order.push_back(r.layer.set);

  std::vector<SetSummary> summaries;
  for (const std::string& set : set_order) {
    std::vector<const LayerResult*> rows;
    for (const LayerResult& r : results)
      if (r.layer.set == set) rows.push_back(&r);
    fmt::print("\n== {} ({} layer{}, mb {}) ==\n", set, rows.size(), rows.size() == 1 ? "" : "s",
               o.mb);
    print_header();
    for (const LayerResult* r : rows) {
      print_row(*r, peak);
      if (o.schedule_verbose && r->peer[kConvgen].enabled) {
        fmt::print("    schedule: {}\n", r->schedule);
        for (const std::string& why : r->schedule_why) fmt::print("      {}\n", why);
      }
      for (int p = 0; p < kPeers; ++p)
        if (r->peer[p].enabled && !r->peer[p].skipped.empty())
          fmt::print("    {} skipped: {}\n", kPeerNames[p], r->peer[p].skipped);
    }
    summaries.push_back(summarize(set, rows));
    print_summary_row(summaries.back(), peak);
  }
  if (set_order.size() > 1) {
    std::vector<const LayerResult*> rows;
    for (const LayerResult& r : results) rows.push_back(&r);
    summaries.push_back(summarize("all", rows));
  }

  fmt::print("\nsummary: geomean over each set of the per-layer medians (GF/s), geomean of the "
             "per-layer ratios\n");
  print_header();
  for (const SetSummary& s : summaries) print_summary_row(s, peak);
  int warnings = 0;
  for (const LayerResult& r : results)
    if (r.peer[kConvgen].runs() && !r.check_ref.empty() && !(r.convgen_diff <= kCheckTolerance))
      ++warnings;
  if (warnings > 0)
    fmt::print("WARNING: {} layer(s) where convgen differs from the reference by more than {:.0e} "
               "(relative to max|y|)\n",
               warnings, kCheckTolerance);
  const int64_t rss = cb::peak_rss_bytes();
  fmt::print("peak RSS {:.1f} MiB\n", static_cast<double>(rss) / (1 << 20));

  if (!o.json_path.empty()) {
    json doc;
    doc["machine"] = {{"cpu", cpu},
                      {"threads", o.threads},
                      {"fma_peak_gflops_start", num(peak_start)},
                      {"fma_peak_gflops_end", num(peak_end)},
                      {"fma_peak_gflops_mean", num(peak)}};
    doc["build"] = {{"convgen", CONVGEN_VERSION},
                    {"generator_hash", CONVGEN_GENERATOR_HASH},
                    {"halide", CONVGEN_HALIDE_VERSION},
                    {"blis", cb::blis_version()},
                    {"blis_arch", cb::blis_arch()},
                    {"onednn", cb::onednn_version()}};
    doc["pass"] = "fwd";
    doc["mb"] = o.mb;
    doc["runs"] = o.runs;
    doc["min_sample_seconds"] = kMinSampleSeconds;
    doc["convgen_threads"] = o.threads;
    json layers_json = json::array();
    for (const LayerResult& r : results) {
      layers_json.push_back({{"set", r.layer.set},
                             {"name", r.layer.d.name},
                             {"descriptor", r.layer.d.normalised()},
                             {"flops", r.flops},
                             {"convgen", peer_json(r, kConvgen, peak)},
                             {"blis", peer_json(r, kBlis, peak)},
                             {"onednn", peer_json(r, kOnednn, peak)},
                             {"ratio_vs_onednn", num(r.ratio(kOnednn))},
                             {"ratio_vs_blis", num(r.ratio(kBlis))},
                             {"max_rel_diff", num(r.convgen_diff)},
                             {"check_ok", r.check_ref.empty() || !r.peer[kConvgen].runs()
                                              ? json(nullptr)
                                              : json(r.convgen_diff <= kCheckTolerance)}});
    }
    doc["layers"] = layers_json;
    json sums = json::array();
    for (const SetSummary& s : summaries) sums.push_back(summary_json(s));
    doc["summary"] = sums;
    doc["peak_rss_bytes"] = rss;
    write_json_atomically(o.json_path, doc);
    fmt::print("wrote {}\n", o.json_path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse_options(argc, argv);
    if (o.help) {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (o.version) {
      fmt::print("{}", version_text());
      return 0;
    }
    return run_bench(o);
  } catch (const Error& e) {
    fmt::print(stderr, "convgen-bench: {}\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "convgen-bench: out of memory\n");
    return static_cast<int>(ExitCode::Internal);
  } catch (const std::exception& e) {
    fmt::print(stderr, "convgen-bench: internal error: {}\n", e.what());
    return static_cast<int>(ExitCode::Internal);
  }
}
