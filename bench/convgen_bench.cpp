// convgen-bench: convgen's generated convolution kernels (forward, backward-data,
// backward-weights) against two peers on the same layers, measured side by side on this
// machine.
//
//   convgen  the JIT kernel of the pass with its analytic default schedule (NHWC/NHWK
//            activations, ONNX OIHW weights)
//   blis     explicit im2col (col2im) + one BLIS SGEMM per group (runtime/im2col/im2col_blis.h,
//            runtime/im2col/im2col_blis_backward.h)
//   onednn   oneDNN's convolution primitive of the pass on its own blocked layouts
//            (onednn_conv.h, onednn_conv_backward.h)
//
// Methodology (bench/README.md): one FMA probe at the start and one at the end; per layer,
// warm-up, then R interleaved runs (convgen, blis, onednn, convgen, ...), each sample at
// least 20 ms (a batch of repeats divided by its count); the median sample is reported.
#include <omp.h>

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/bench_options.h"
#include "bench/bench_report.h"
#include "bench/bench_util.h"
#include "bench/layer_bench.h"
#include "bench/onednn_conv.h"
#include "bench/onednn_util.h"
#include "bench/peer_isa.h"
#include "runtime/im2col/im2col_blis.h"
#include "runtime/memory/page_allocation.h"
#include "runtime/probe/fma_probe.h"
#include "schedules/build_info.h"
#include "schedules/durable_file.h"
#include "schedules/errors.h"
#include "schedules/host_cpu.h"

namespace {

using convgen::Error;
using convgen::ExitCode;
using namespace convgen::bench;
namespace cb = convgen::bench;

int run_bench(const Options& o) {
  const std::vector<Layer> layers = load_layers(o);
  // Before any BLIS or oneDNN call: both fix their kernel choice on first use.
  const cb::PeerIsa peer_isa = cb::select_peer_isa(o.target.vector_floats, o.peer_isa_matched);
  omp_set_num_threads(o.threads);

  const std::string cpu = convgen::host_cpu().model;
  fmt::print("convgen-bench {}  pass {}  mb {}  threads {}  runs {}  cpu \"{}\"\n", CONVGEN_VERSION,
             o.pass, o.mb, o.threads, o.runs, cpu);
  fmt::print("convgen weights {}\n", o.weights == convgen::PackWeights::Prepacked ? "prepacked (packed once, untimed, as oneDNN's are reordered)"
                                                         : "packed per call (inside the timed call)");
  fmt::print("convgen target {}; peers {}: oneDNN ISA {}, BLIS kernels {} ({})\n", o.target.target,
             o.peer_isa_matched ? "matched" : "native", peer_isa.onednn_isa, peer_isa.blis_arch,
             peer_isa.blis_how);
  if (o.threads > 1 && o.peer_enabled[kConvgen])
    fmt::print("note: convgen runs its intra-kernel parallel variant (parallel=images, or pixels when the\n"
               "      minibatch is small; bwd_weights of a small dW in 4 partitions unless its tile runs\n"
               "      along the input channels) on {} OpenMP threads\n",
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
  fmt::print("buffers of every peer: {}\n", convgen::huge_page_policy());

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
    doc["weights"] = convgen::to_string(o.weights);
    doc["buffers"] = convgen::huge_page_policy();
    doc["min_sample_seconds"] = kMinSampleSeconds;
    doc["convgen_threads"] = o.threads;
    json layers_json = json::array();
    for (const LayerResult& r : results) layers_json.push_back(layer_json(r, peak));
    doc["layers"] = layers_json;
    json sums = json::array();
    for (const SetSummary& s : summaries) sums.push_back(summary_json(s));
    doc["summary"] = sums;
    doc["peak_rss_bytes"] = rss;
    convgen::write_file_durably(o.json_path, doc.dump(2) + "\n");
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
