// convgen-bench: convgen's generated convolution kernels (forward, backward-data,
// backward-weights) against two peers on the same layers, measured side by side on this
// machine.
//
//   convgen  the JIT kernel of the pass with its analytic default schedule (NHWC/NHWK
//            activations, ONNX OIHW weights)
//   blis     explicit im2col (col2im) + one BLIS SGEMM per group (im2col_blis.h,
//            im2col_blis_backward.h)
//   onednn   oneDNN's convolution primitive of the pass on its own blocked layouts
//            (onednn_conv.h, onednn_conv_backward.h)
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
#include <utility>
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
#include "im2col_blis_backward.h"
#include "onednn_conv.h"
#include "onednn_conv_backward.h"
#include "peer_isa.h"

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

enum class Pass { Fwd, BwdData, BwdWeights };
const char* pass_name(Pass p) {
  switch (p) {
    case Pass::Fwd: return "fwd";
    case Pass::BwdData: return "bwd_data";
    case Pass::BwdWeights: return "bwd_weights";
  }
  return "?";
}

// The layer that reads the network's input image (grey: LeNet's conv1; RGB: every other
// set's first layer). Training never computes the data gradient of that layer, so its
// bwd_data row is reported but left out of the bwd_data geomeans.
bool is_network_input(const ConvDescriptor& d) { return d.g == 1 && (d.ic == 1 || d.ic == 3); }

// ---------------------------------------------------------------------------------------
// Command line

struct Options {
  std::vector<std::string> layer_files;
  std::vector<std::string> descriptors;
  std::string pass = "fwd";  // as given: fwd, bwd_data, bwd_weights or all
  std::vector<Pass> passes;  // what it expands to, in run order
  int64_t mb = 8;
  int threads = 1;
  int runs = 5;
  std::string json_path;
  bool peer_enabled[kPeers] = {true, true, true};
  bool schedule_verbose = false;
  std::string schedule_overrides;  // --schedule WORDS, applied over the analytic default
  std::string target_name;         // --target as given ("" = the build's default target)
  convgen::TargetInfo target = convgen::default_target();
  bool peer_isa_matched = true;    // --peer-isa matched (default) | native
  bool help = false;
  bool version = false;
};

const char* const kUsage =
    R"(usage: convgen-bench [--layers FILE.tsv ...] [--descriptor D ...] [options]

Times convgen's generated convolution kernels against im2col+BLIS and oneDNN on the
same layers, interleaved, and reports per pass median GF/s, % of the measured FMA peak,
ratios, workspace and a correctness cross-check.

layers (at least one; each option may be repeated or take several values):
  --layers FILE.tsv ...   layer sets in the shared/layers TSV format; set name = file stem
  --descriptor D ...      layers in descriptor grammar (docs/descriptor.md), set "cli"
options:
  --pass P                fwd (default) | bwd_data | bwd_weights | all (the three passes, one
                          table each). GF/s counts 2*N*K*(C/g)*R*S*P*Q flops in every pass.
                          bwd_data rows of a network input layer (ic 1 or 3) are reported
                          but left out of the geomeans
  --mb N                  minibatch used for every layer (overrides the file; default 8)
  --threads T             OpenMP / BLIS / oneDNN threads (default 1); with T > 1 convgen runs
                          its intra-kernel parallel variant on T threads (parallel=images,
                          or pixels when the minibatch is below 2*T; bwd_weights with a dW
                          of at most 1 MiB also splits its reduction into 4 partitions)
  --runs R                interleaved timed runs per layer and peer (default 5)
  --json FILE             also write the results as JSON (atomically: temp file + rename)
  --peers LIST            comma-separated subset of convgen,blis,onednn (default all)
  --schedule-verbose      print the analytic schedule's reasons for every layer
  --schedule WORDS        override fields of convgen's schedule on every layer and pass, e.g.
                          'mr=8 nr=8' (same words as convgen compile-layer --schedule)
  --target T              convgen's kernel target (default: the build's default, AVX2+FMA;
                          'host' = the widest this CPU runs, e.g. AVX-512). The FMA probe
                          measures the peak with the same vector width.
  --peer-isa M            matched (default): oneDNN capped at the target's ISA (avx2 or
                          avx512_core) and BLIS given a kernel set of that width when it
                          picked another (e.g. 'generic'); native: both choose for themselves
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
    } else if (a == "--target") {
      o.target_name = value();
    } else if (a == "--peer-isa") {
      const std::string m = value();
      if (m != "matched" && m != "native")
        throw Error(ExitCode::Usage, fmt::format("--peer-isa: '{}' is neither matched nor native", m));
      o.peer_isa_matched = m == "matched";
    } else if (a == "--help" || a == "-h") {
      o.help = true;
    } else if (a == "--version") {
      o.version = true;
    } else {
      throw Error(ExitCode::Usage, fmt::format("unknown argument '{}' (see --help)", a));
    }
  }
  if (o.help || o.version) return o;
  if (!o.target_name.empty()) o.target = convgen::target_info(o.target_name);
  if (o.pass == "all") {
    o.passes = {Pass::Fwd, Pass::BwdData, Pass::BwdWeights};
  } else {
    for (Pass p : {Pass::Fwd, Pass::BwdData, Pass::BwdWeights})
      if (o.pass == pass_name(p)) o.passes = {p};
    if (o.passes.empty())
      throw Error(ExitCode::Usage,
                  fmt::format("--pass {}: unknown pass (fwd, bwd_data, bwd_weights, all)", o.pass));
  }
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
  std::function<void()> finish; // untimed, after the samples: final outputs and workspace
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

// The largest value, or NaN as soon as one is NaN.
double worst_of(const std::vector<double>& values) {
  double worst = 0.0;
  for (double v : values) {
    if (std::isnan(v)) return kNaN;
    worst = std::max(worst, v);
  }
  return worst;
}

// A peer's output tensors of one pass: {y}, {dx}, or {dw} plus {db} when the layer has a
// bias. Compared tensor by tensor, each relative to its own max|ref|.
using Outputs = std::vector<std::vector<float>>;

double outputs_diff(const Outputs& a, const Outputs& ref) {
  std::vector<double> diffs;
  for (size_t t = 0; t < ref.size(); ++t) diffs.push_back(relative_diff(a[t], ref[t]));
  return worst_of(diffs);
}

// Outputs start as NaN so an element a kernel never writes fails the check.
std::vector<float> unwritten(int64_t size) {
  return std::vector<float>(static_cast<size_t>(size), std::numeric_limits<float>::quiet_NaN());
}

// ---------------------------------------------------------------------------------------
// Results

struct LayerResult {
  Layer layer;
  Pass pass = Pass::Fwd;
  double flops = 0;
  PeerResult peer[kPeers];
  std::string schedule;                 // describe() of convgen's schedule
  int convgen_threads = 1;
  std::vector<std::string> schedule_why;
  std::string onednn_impl, onednn_layouts;
  double onednn_reorder_ms = kNaN, onednn_reorder_in_ms = kNaN, onednn_reorder_out_ms = kNaN;
  bool blis_direct = false;
  // Cross-check: every other running peer's outputs against check_ref's (fwd: oneDNN, else
  // BLIS; backward: convgen, else oneDNN, else BLIS). "" when fewer than two peers ran.
  std::string check_ref;
  double diff[kPeers] = {kNaN, kNaN, kNaN};  // max|peer - ref| / max|ref|
  // The check column: fwd shows convgen against the reference (BLIS against oneDNN goes
  // to stderr); backward shows the worst peer against convgen.
  double check = kNaN;
  bool checked = false;
  bool network_input = false;
  // Left out of the geomeans: bwd_data of the network input layer.
  bool in_geomean() const { return !(pass == Pass::BwdData && network_input); }
  double ratio(Peer p) const {
    if (!peer[kConvgen].runs() || !peer[p].runs()) return kNaN;
    return peer[kConvgen].median_gflops / peer[p].median_gflops;
  }
};

// Deterministic inputs of one layer (fixed seeds): only those the pass reads.
struct Inputs {
  std::vector<float> x, w, bias;  // NHWC input, OIHW weights, [oc] bias
  std::vector<float> dy;          // NHWK output gradient, as the next layer hands it back
  std::vector<float> y;           // NHWK forward output, whose ReLU mask (y > 0) convgen applies
  std::vector<float> dy_masked;   // dy with that mask applied, for the peers (ReLU layers)
  // The dY the peers read: they do not fuse the ReLU mask, so it is applied once, untimed.
  const float* dy_for_peers() const { return dy_masked.empty() ? dy.data() : dy_masked.data(); }
};

Inputs make_inputs(const ConvDescriptor& d, Pass pass) {
  const int64_t x_size = d.mb * d.ih * d.iw * d.ic;
  const int64_t w_size = d.oc * d.icg() * d.kh * d.kw;
  const int64_t y_size = d.mb * d.oh() * d.ow() * d.oc;
  auto filled = [](int64_t size, uint64_t seed) {
    std::vector<float> v(static_cast<size_t>(size));
    cb::fill_uniform(v.data(), size, seed);
    return v;
  };
  Inputs in;
  if (pass != Pass::BwdData) in.x = filled(x_size, 0x5eed0001);
  if (pass != Pass::BwdWeights) in.w = filled(w_size, 0x5eed0002);
  if (pass == Pass::Fwd) {
    in.bias = filled(d.oc, 0x5eed0003);
    return in;
  }
  in.dy = filled(y_size, 0x5eed0004);
  if (d.relu) {
    // Any signs will do for the mask; uniform in [-1, 1) zeroes about half of dY.
    in.y = filled(y_size, 0x5eed0005);
    in.dy_masked = in.dy;
    for (int64_t i = 0; i < y_size; ++i)
      if (!(in.y[i] > 0.0f)) in.dy_masked[i] = 0.0f;
  }
  return in;
}

// Runs a peer's setup; a peer that cannot handle the layer (Error Unsupported, e.g. oneDNN
// has no implementation) is marked skipped with the reason instead of ending the run.
void set_up(PeerResult& r, const std::function<void()>& setup) {
  if (!r.enabled) return;
  try {
    setup();
  } catch (const Error& e) {
    if (e.code() != ExitCode::Unsupported) throw;
    r.skipped = e.what();
    r.call = r.finish = nullptr;
  }
}

// Why the BLIS peer cannot run the layer (its column buffer would not fit), or "".
std::string blis_memory_refusal(const ConvDescriptor& d) {
  const int64_t need = cb::Im2colBlisConv::workspace_bytes_for(d);
  const int64_t avail = cb::available_memory_bytes();
  if (avail > 0 && need > avail / 2)
    return fmt::format("im2col buffer {:.1f} GiB exceeds half of MemAvailable",
                       static_cast<double>(need) / (1 << 30));
  return "";
}

// convgen's analytic schedule for the pass, with the --schedule overrides and the
// threading choice of the bench applied; records it and its reasons in `res`.
convgen::ConvSchedule convgen_schedule(LayerResult& res, const convgen::TargetInfo& target,
                                       const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  convgen::ConvSchedule s =
      convgen::analytic_schedule_for_pass(d, pass_name(res.pass), target, &res.schedule_why);
  if (o.threads > 1) {
    // The intra-kernel parallel variant over the OpenMP threads: images when there are
    // enough of them to share out, else pixel blocks of each image. For fwd and bwd_data
    // these are output dimensions, never the reduction, so the result is the same as on
    // one thread; in bwd_weights they are the reduction, split into partitions fixed by
    // the schedule (convgen::parallel_variant).
    s = convgen::parallel_variant(d, pass_name(res.pass), s, d.mb >= 2 * o.threads ? convgen::Parallel::Images
                                                                    : convgen::Parallel::Pixels,
                                  &res.schedule_why);
    res.schedule_why.push_back(fmt::format("bench: parallel={} for {} threads",
                                           convgen::to_string(s.parallel), o.threads));
    res.convgen_threads = o.threads;
  }
  if (!o.schedule_overrides.empty()) {
    convgen::apply_schedule_overrides(o.schedule_overrides, &s);
    res.schedule_why.push_back(fmt::format("bench: --schedule '{}'", o.schedule_overrides));
  }
  res.schedule = convgen::describe(s);
  return s;
}

template <class OnednnPeer>
void record_onednn(LayerResult& res, const OnednnPeer& onednn) {
  res.onednn_impl = onednn.impl_name();
  res.onednn_layouts = onednn.layouts();
  res.onednn_reorder_in_ms = onednn.reorder_in_ms();
  res.onednn_reorder_out_ms = onednn.reorder_out_ms();
  res.onednn_reorder_ms = onednn.reorder_ms();
  res.peer[kOnednn].workspace_bytes = onednn.workspace_bytes();
}

// Each set_up_<pass> fills every enabled peer's timed call and its finish step; the
// calls read `in` and write `out[peer]`, which outlive them (bench_layer's frame).

void set_up_forward(LayerResult& res, const Inputs& in, Outputs* out, const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const int64_t y_size = d.mb * d.oh() * d.ow() * d.oc;
  const float* bias = d.bias ? in.bias.data() : nullptr;
  set_up(res.peer[kConvgen], [&] {
    const convgen::TargetInfo& target = o.target;
    const convgen::ConvSchedule s = convgen_schedule(res, target, o);
    auto kernel = std::make_shared<convgen::JitForwardKernel>(d, s, target);
    out[kConvgen] = {unwritten(y_size)};
    float* y = out[kConvgen][0].data();
    PeerResult& r = res.peer[kConvgen];
    r.call = [kernel, &in, bias, y] { kernel->run(in.x.data(), in.w.data(), bias, y); };
    r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
  });
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisConv>(d, o.threads, in.w.data());
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    out[kBlis] = {unwritten(y_size)};
    float* y = out[kBlis][0].data();
    r.call = [blis, &in, y] { blis->run(in.x.data(), in.bias.data(), y); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConv>(d, o.threads);
    onednn->prepare(in.x.data(), in.w.data(), in.bias.data());  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, y_size] {
      out[kOnednn] = {unwritten(y_size)};
      onednn->run_and_fetch(in.x.data(), in.w.data(), in.bias.data(), out[kOnednn][0].data());
    };
  });
}

void set_up_backward_data(LayerResult& res, const Inputs& in, Outputs* out, const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const int64_t dx_size = d.mb * d.ih * d.iw * d.ic;
  const float* y = d.relu ? in.y.data() : nullptr;
  const float* dy_peers = in.dy_for_peers();
  set_up(res.peer[kConvgen], [&] {
    const convgen::TargetInfo& target = o.target;
    const convgen::ConvSchedule s = convgen_schedule(res, target, o);
    auto kernel = std::make_shared<convgen::JitBackwardDataKernel>(d, s, target);
    out[kConvgen] = {unwritten(dx_size)};
    float* dx = out[kConvgen][0].data();
    PeerResult& r = res.peer[kConvgen];
    r.call = [kernel, &in, y, dx] { kernel->run(in.dy.data(), in.w.data(), y, dx); };
    r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
  });
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisBackwardData>(d, o.threads);
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    out[kBlis] = {unwritten(dx_size)};
    float* dx = out[kBlis][0].data();
    r.call = [blis, &in, dy_peers, dx] { blis->run(dy_peers, in.w.data(), dx); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConvBackwardData>(d, o.threads);
    onednn->prepare(dy_peers, in.w.data());  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, dy_peers, dx_size] {
      out[kOnednn] = {unwritten(dx_size)};
      onednn->run_and_fetch(dy_peers, in.w.data(), out[kOnednn][0].data());
    };
  });
}

// Allocates a peer's weight gradients, {dw} or {dw, db}; returns (dw, db), db null for a
// layer without bias.
std::pair<float*, float*> weight_gradients(const ConvDescriptor& d, Outputs& out) {
  out = {unwritten(d.oc * d.icg() * d.kh * d.kw)};
  if (!d.bias) return {out[0].data(), nullptr};
  out.push_back(unwritten(d.oc));
  return {out[0].data(), out[1].data()};
}

void set_up_backward_weights(LayerResult& res, const Inputs& in, Outputs* out,
                             const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const float* y = d.relu ? in.y.data() : nullptr;
  const float* dy_peers = in.dy_for_peers();
  set_up(res.peer[kConvgen], [&] {
    const convgen::TargetInfo& target = o.target;
    const convgen::ConvSchedule s = convgen_schedule(res, target, o);
    auto kernel = std::make_shared<convgen::JitBackwardWeightsKernel>(d, s, target);
    const auto [dw, db] = weight_gradients(d, out[kConvgen]);
    PeerResult& r = res.peer[kConvgen];
    r.call = [kernel, &in, y, dw = dw, db = db] {
      kernel->run(in.x.data(), in.dy.data(), y, dw, db);
    };
    r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
  });
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisBackwardWeights>(d, o.threads);
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    const auto [dw, db] = weight_gradients(d, out[kBlis]);
    r.call = [blis, &in, dy_peers, dw = dw, db = db] { blis->run(in.x.data(), dy_peers, dw, db); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConvBackwardWeights>(d, o.threads);
    onednn->prepare(in.x.data(), dy_peers);  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, dy_peers, d] {
      const auto [dw, db] = weight_gradients(d, out[kOnednn]);
      onednn->run_and_fetch(in.x.data(), dy_peers, dw, db);
    };
  });
}

// Compares the peers' outputs (see LayerResult::check_ref).
void cross_check(LayerResult& res, const Outputs* out) {
  const bool forward = res.pass == Pass::Fwd;
  const std::vector<Peer> order = forward ? std::vector<Peer>{kOnednn, kBlis}
                                          : std::vector<Peer>{kConvgen, kOnednn, kBlis};
  Peer ref = kPeers;
  for (Peer p : order)
    if (ref == kPeers && res.peer[p].runs()) ref = p;
  if (ref == kPeers) return;
  std::vector<double> checked;
  for (int p = 0; p < kPeers; ++p) {
    if (p == ref || !res.peer[p].runs()) continue;
    res.diff[p] = outputs_diff(out[p], out[ref]);
    if (!forward || p == kConvgen) checked.push_back(res.diff[p]);
  }
  res.check_ref = kPeerNames[ref];
  res.checked = !checked.empty();
  if (res.checked) res.check = worst_of(checked);
}

LayerResult bench_layer(const Layer& layer, Pass pass, const Options& o) {
  LayerResult res;
  res.layer = layer;
  res.pass = pass;
  res.flops = layer.d.flops();  // the forward's count in every pass (bench/README.md)
  res.network_input = is_network_input(layer.d);
  for (int p = 0; p < kPeers; ++p) res.peer[p].enabled = o.peer_enabled[p];

  const Inputs in = make_inputs(layer.d, pass);
  Outputs out[kPeers];
  switch (pass) {
    case Pass::Fwd: set_up_forward(res, in, out, o); break;
    case Pass::BwdData: set_up_backward_data(res, in, out, o); break;
    case Pass::BwdWeights: set_up_backward_weights(res, in, out, o); break;
  }

  omp_set_num_threads(o.threads);
  for (PeerResult& p : res.peer)
    if (p.runs()) calibrate(p);
  for (int run = 0; run < o.runs; ++run)
    for (PeerResult& p : res.peer)
      if (p.runs()) sample(p, res.flops);
  for (PeerResult& p : res.peer) {
    if (!p.runs()) continue;
    p.median_gflops = cb::median(p.gflops);
    if (p.finish) p.finish();
  }
  cross_check(res, out);
  for (PeerResult& p : res.peer) p.call = p.finish = nullptr;  // they capture this frame
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

bool check_ok(const LayerResult& r) { return r.check <= kCheckTolerance; }

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
  fmt::print("{:<22} {} | {} {} | {} {} | {} {} | {} {} | {} {} {} | {}\n", name,
             cell(r.flops * 1e-9, 8, 3), cell(gf(kConvgen), 7, 1), cell(pct(kConvgen), 4, 0),
             cell(gf(kBlis), 7, 1), cell(pct(kBlis), 4, 0), cell(gf(kOnednn), 7, 1),
             cell(pct(kOnednn), 4, 0), cell(r.ratio(kOnednn), 6, 2), cell(r.ratio(kBlis), 6, 2),
             mib(r.peer[kConvgen]), mib(r.peer[kBlis]), mib(r.peer[kOnednn]), check_cell(r));
}

struct SetSummary {
  Pass pass = Pass::Fwd;
  std::string set;
  int layers = 0;    // rows in the geomeans
  int excluded = 0;  // rows reported but left out (bwd_data of a network input layer)
  double geomean[kPeers] = {kNaN, kNaN, kNaN};
  double ratio_vs_onednn = kNaN, ratio_vs_blis = kNaN;
};

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

json summary_json(const SetSummary& s) {
  json g;
  for (int p = 0; p < kPeers; ++p) g[kPeerNames[p]] = num(s.geomean[p]);
  return {{"pass", pass_name(s.pass)},
          {"set", s.set},
          {"layers", s.layers},
          {"excluded_layers", s.excluded},
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

// The tables of one pass: one per set, each with its geomean row, then the pass's summary
// over the sets. Returns the summaries (per set, plus "all" when there are several sets).
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
    print_header();
    for (const LayerResult* r : rows) {
      print_row(*r, peak);
      any_excluded = any_excluded || !r->in_geomean();
      if (o.schedule_verbose && r->peer[kConvgen].enabled) {
        fmt::print("    schedule: {}\n", r->schedule);
        for (const std::string& why : r->schedule_why) fmt::print("      {}\n", why);
      }
      for (int p = 0; p < kPeers; ++p)
        if (r->peer[p].enabled && !r->peer[p].skipped.empty())
          fmt::print("    {} skipped: {}\n", kPeerNames[p], r->peer[p].skipped);
    }
    summaries.push_back(summarize(pass, set, rows));
    print_summary_row(summaries.back(), peak);
  }
  if (set_order.size() > 1) summaries.push_back(summarize(pass, "all", pass_rows));
  if (any_excluded)
    fmt::print("* the network's input layer (ic 1 or 3): training never computes its data "
               "gradient,\n  so the row is reported but left out of the {} geomeans\n",
               pass_name(pass));

  fmt::print("\nsummary {}: geomean over each set of the per-layer medians (GF/s), geomean of "
             "the per-layer ratios\n",
             pass_name(pass));
  print_header();
  for (const SetSummary& s : summaries) print_summary_row(s, peak);
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
          {"ratio_vs_onednn", num(r.ratio(kOnednn))},
          {"ratio_vs_blis", num(r.ratio(kBlis))},
          {"check_ref", r.check_ref},
          {"max_rel_diff", num(r.check)},
          {"check_ok", r.checked ? json(check_ok(r)) : json(nullptr)}};
}

int run_bench(const Options& o) {
  const std::vector<Layer> layers = load_layers(o);
  // Before any BLIS or oneDNN call: both fix their kernel choice on first use.
  const cb::PeerIsa peer_isa = cb::select_peer_isa(o.target.vector_floats, o.peer_isa_matched);
  omp_set_num_threads(o.threads);

  const std::string cpu = cb::cpu_model_name();
  fmt::print("convgen-bench {}  pass {}  mb {}  threads {}  runs {}  cpu \"{}\"\n", CONVGEN_VERSION,
             o.pass, o.mb, o.threads, o.runs, cpu);
  fmt::print("convgen target {}; peers {}: oneDNN ISA {}, BLIS kernels {} ({})\n", o.target.target,
             o.peer_isa_matched ? "matched" : "native", peer_isa.onednn_isa, peer_isa.blis_arch,
             peer_isa.blis_how);
  if (o.threads > 1 && o.peer_enabled[kConvgen])
    fmt::print("note: convgen runs its intra-kernel parallel variant (parallel=images, or pixels when the\n"
               "      minibatch is small; bwd_weights of a small dW in 4 partitions) on {} OpenMP threads\n",
               o.threads);
  std::fflush(stdout);
  const double peak_start = convgen::measure_fma_peak_gflops(o.threads, o.target.vector_floats);
  fmt::print(stderr, "convgen-bench: FMA probe at start {:.1f} GFLOP/s\n", peak_start);

  // Progress goes to stderr; the tables are printed at the end, when the mean probe is known.
  std::vector<LayerResult> results;
  results.reserve(layers.size() * o.passes.size());
  const size_t total = layers.size() * o.passes.size();
  for (Pass pass : o.passes) {
    for (const Layer& layer : layers) {
      fmt::print(stderr, "convgen-bench: [{}/{}] {} {}/{} {} ...", results.size() + 1, total,
                 pass_name(pass), layer.set, layer.d.name, layer.d.normalised());
      std::fflush(stderr);
      cb::Timer t;
      results.push_back(bench_layer(layer, pass, o));
      const LayerResult& r = results.back();
      std::string line;
      for (int p = 0; p < kPeers; ++p)
        if (r.peer[p].runs())
          line += fmt::format(" {} {:.1f}", kPeerNames[p], r.peer[p].median_gflops);
      fmt::print(stderr, "{} GF/s ({:.1f} s)\n", line, t.seconds());
      // Disagreements the check column does not show: forward BLIS against oneDNN; backward
      // names the peer behind a WARN.
      for (int p = 0; p < kPeers; ++p) {
        if (std::isnan(r.diff[p]) || (pass == Pass::Fwd && p == kConvgen)) continue;
        if (!(r.diff[p] <= kCheckTolerance))
          fmt::print(stderr, "convgen-bench: warning: {} {}: {} and {} disagree ({:.1e})\n",
                     r.layer.d.name, pass_name(pass), kPeerNames[p], r.check_ref, r.diff[p]);
      }
    }
  }

  const double peak_end = convgen::measure_fma_peak_gflops(o.threads, o.target.vector_floats);
  const double peak = 0.5 * (peak_start + peak_end);
  fmt::print("FMA probe ({} thread{}, {}-lane FMAs): {:.1f} GFLOP/s at start, {:.1f} at end; %pk "
             "uses the mean {:.1f}\n",
             o.threads, o.threads > 1 ? "s" : "", convgen::fma_probe_lanes(o.target.vector_floats), peak_start,
             peak_end, peak);
  fmt::print("GF/s = nominal 2*N*K*(C/g)*R*S*P*Q (the same count in every pass) / median of {} "
             "interleaved samples; ws in MiB\n",
             o.runs);
  fmt::print("check = fwd: max|convgen-ref|/max|ref| (ref oneDNN); bwd_*: the worst peer's "
             "max|peer-convgen|/max|convgen|\n");

  std::vector<SetSummary> summaries;
  for (Pass pass : o.passes) {
    const std::vector<SetSummary> s = print_pass(pass, results, peak, o);
    summaries.insert(summaries.end(), s.begin(), s.end());
  }
  int warnings = 0;
  for (const LayerResult& r : results)
    if (r.checked && !check_ok(r)) ++warnings;
  if (warnings > 0)
    fmt::print("\nWARNING: {} row(s) whose check is above {:.0e}: the peers disagree (see the "
               "check column)\n",
               warnings, kCheckTolerance);
  const int64_t rss = cb::peak_rss_bytes();
  fmt::print("peak RSS {:.1f} MiB\n", static_cast<double>(rss) / (1 << 20));

  if (!o.json_path.empty()) {
    json doc;
    doc["machine"] = {{"cpu", cpu},
                      {"threads", o.threads},
                      {"fma_peak_gflops_start", num(peak_start)},
                      {"fma_peak_gflops_end", num(peak_end)},
                      {"fma_peak_gflops_mean", num(peak)},
                      {"fma_probe_lanes", convgen::fma_probe_lanes(o.target.vector_floats)}};
    doc["build"] = {{"convgen", CONVGEN_VERSION},
                    {"generator_hash", CONVGEN_GENERATOR_HASH},
                    {"halide", CONVGEN_HALIDE_VERSION},
                    {"blis", cb::blis_version()},
                    {"blis_arch", peer_isa.blis_arch},
                    {"blis_arch_how", peer_isa.blis_how},
                    {"onednn", cb::onednn_version()},
                    {"onednn_isa", peer_isa.onednn_isa},
                    {"convgen_target", o.target.target}};
    doc["pass"] = o.pass;
    doc["mb"] = o.mb;
    doc["runs"] = o.runs;
    doc["min_sample_seconds"] = kMinSampleSeconds;
    doc["convgen_threads"] = o.threads;
    json layers_json = json::array();
    for (const LayerResult& r : results) layers_json.push_back(layer_json(r, peak));
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
