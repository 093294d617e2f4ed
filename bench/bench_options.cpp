#include "bench/bench_options.h"

#include <algorithm>
#include <exception>
#include <optional>

#include <fmt/format.h>

#include "bench/onednn_conv.h"
#include "runtime/im2col/im2col_blis.h"
#include "schedules/build_info.h"
#include "schedules/errors.h"
#include "schedules/schedule_records.h"

namespace convgen::bench {

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
                          of at most 1 MiB also splits its reduction into 4 partitions,
                          except gemm_input_lanes tiles, whose threads split input channels)
  --runs R                interleaved timed runs per layer and peer (default 5); the
                          peers run in one order in even runs and in the reverse order
                          in odd ones, so none always follows the same peer, and each
                          sample follows as many untimed calls of its peer as it times
  --json FILE             also write the results as JSON (atomically: temp file + rename)
  --peers LIST            comma-separated subset of convgen,blis,onednn,tuned (default all)
  --schedules FILE        schedule records from `convgen tune`: each layer and pass with a
                          tuned record also runs as the "tuned" peer, beside the default,
                          in the same interleaved samples (columns tuned, tn/dn, tn/cg); the
                          default then runs in the records' parallel variant (images at
                          mb >= 8, else pixels), as their consumers run it, and once more
                          as a private copy (column cg'/cg: the noise); a tuned kernel
                          slower than the better default by more than that is marked "<"
  --schedule-verbose      print the analytic schedule's reasons for every layer
  --schedule WORDS        override fields of convgen's schedule on every layer and pass, e.g.
                          'mr=8 nr=8' (same words as convgen compile-layer --schedule);
                          'pack_weights=prepacked' packs GEMM weights once, untimed, as
                          oneDNN's are reordered (what the trainer does per mini-batch)
  --weights MODE          prepacked (default) or per_call: how every convgen peer (default,
                          tuned, control) gets its GEMM forward and backward-data weights
                          (a pack_weights word of --schedule sets the same).
                          prepacked packs them once, untimed, as oneDNN's weights are
                          reordered once before its timed calls (compile's inference
                          kernels; the trainer's micro-batched layers); per_call packs them
                          inside each timed call (training at the whole batch: once per step)
  --target T              convgen's kernel target (default: the build's default, AVX2+FMA;
                          'host' = the widest this CPU runs, e.g. AVX-512). The FMA probe
                          measures the peak with the same vector width.
  --peer-isa M            matched (default): oneDNN capped at the target's ISA (avx2 or
                          avx512_core) and BLIS given a kernel set of that width when it
                          picked another (e.g. 'generic'); native: both choose for themselves
  --help                  this text
  --version               versions of convgen, its generator sources, Halide, BLIS, oneDNN
)";

namespace {

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

}  // namespace

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
  std::optional<convgen::PackWeights> weights;  // --weights as given
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
        for (int p = 0; p <= kTuned; ++p)
          if (name == kPeerNames[p]) o.peer_enabled[p] = found = true;
        if (!found)
          throw Error(ExitCode::Usage,
                      fmt::format("--peers: unknown peer '{}' (known: convgen, blis, onednn, tuned)", name));
        start = comma + 1;
      }
    } else if (a == "--schedules") {
      o.schedules = value();
    } else if (a == "--schedule-verbose") {
      o.schedule_verbose = true;
    } else if (a == "--schedule") {
      o.schedule_overrides = value();
    } else if (a == "--weights") {
      const std::string m = value();
      convgen::PackWeights w;
      if (!convgen::from_string(m, &w))
        throw Error(ExitCode::Usage, fmt::format("--weights: '{}' is neither per_call nor prepacked", m));
      weights = w;
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
  // A pack_weights word of --schedule sets the mode for every convgen peer, as --weights
  // does: the tuned peer and the control then run as the default does.
  if (o.schedule_overrides.find("pack_weights=") != std::string::npos) {
    convgen::ConvSchedule probe;
    convgen::apply_schedule_overrides(o.schedule_overrides, &probe);
    if (weights && *weights != probe.pack_weights)
      throw Error(ExitCode::Usage, fmt::format("--weights {} and --schedule pack_weights={} disagree",
                                               convgen::to_string(*weights), convgen::to_string(probe.pack_weights)));
    weights = probe.pack_weights;
  }
  if (weights) o.weights = *weights;
  if (!peers_given) o.peer_enabled[kTuned] = !o.schedules.empty();
  if (o.peer_enabled[kTuned] && o.schedules.empty())
    throw Error(ExitCode::Usage, "--peers tuned needs --schedules FILE");
  o.peer_enabled[kDefaultAgain] = o.peer_enabled[kTuned] && o.peer_enabled[kConvgen];
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
      CONVGEN_VERSION, CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION, blis_version(),
      blis_arch(), onednn_version());
}

}  // namespace convgen::bench
