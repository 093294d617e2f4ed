// convgen tune: measures schedules on this CPU and appends the winners to a records file
// that compile, train, convgen_add_model and convgen-bench read (docs/tuning.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/tune/kernel_evaluator.h"
#include "generator/tune/step_search.h"
#include "generator/tune/tune_plan.h"
#include "schedules/build_info.h"
#include "schedules/errors.h"
#include "schedules/host_cpu.h"
#include "schedules/tune/timing_rule.h"
#include "schedules/tune/tune_journal.h"
#include "schedules/tune/tuner.h"

namespace convgen::cli {
namespace {

const char* kUsage = R"(usage: convgen tune (MODEL.onnx | LAYERS.tsv | DESCRIPTOR)... --records FILE.jsonl [options]

Measures candidate schedules of each layer and pass on this CPU, checks every candidate
bit for bit against the reference, and appends one "tuned" record per layer and pass
(the winner, or the default when nothing beats it beyond noise) to FILE, with a journal
line per trial. Rerunning the same command resumes: finished trials are never repeated.
compile / train / convgen_add_model / convgen-bench read FILE with --schedules.

What is tuned:
  MODEL.onnx           its inference kernels (forward, compile's fusions) at --batch,
                       at the per-call batch compile splits it into (--per-call-batch)
  MODEL.onnx --train   every kernel the trainer runs (each layer x size x pass)
  LAYERS.tsv           every row (docs/descriptor.md), --passes of each
  DESCRIPTOR           one layer, e.g. mb8ic64ih56oc64oh56kh3ph1
Candidates get their weights as the consumer hands them: GEMM kernels read them packed
once, untimed, in the forward of inference models, in both passes of layer sets and
descriptors (as convgen-bench runs them by default) and of the layers convgen train runs
per micro-batch; ConvTranspose kernels and compile --train's drivers pack per call.

Options:
  --records FILE       the records file (JSON lines), created if missing; locked while tuning
  --passes LIST        fwd,bwd_data,bwd_weights or all (default all)
  --train              tune what training runs (needs a model); --batch B (default 64),
                       --micro-batch M (default: searched). First whole training steps
                       are timed to choose the micro-batch and each Conv layer's parallel
                       mode (one "training" record, applied by train and compile --train
                       whatever the thread count), then that configuration's kernels
  --no-step-search     with --train: keep the trainer's own micro-batch and modes
  --batch B            models: the batch; layer sets and descriptors: replaces mb
  --per-call-batch M   inference models: as for compile (default: compile's)
  --trials N           trials per layer and pass, the default included (default 64)
  --budget TIME        wall time for the whole run, e.g. 45m, 2h, 900s, shared out over
                       the layers still to tune; a layer always gets its default, one
                       batch of candidates and the final re-timing (default: no limit)
  --search S           guided (default) or random (the baseline it is measured against)
  --seed S             the search's seed (default 1)
  --jobs J             candidates proposed and built at once, in threads (default 1);
                       timing is always one kernel at a time, after the builds
  --threads T          threads the candidates are timed on (default 1), in the parallel
                       variant their consumer runs (images from a batch of 8, else
                       pixels; part of every record)
  --target STRING      Halide target string, or host (default host)
  --log FILE           JSON-lines log: one line per trial and per layer
  --verbose            a line per trial and the search's decisions
  --help, --version

Comparing instead of searching (no records needed, nothing written to them):
  --compare WORDS      a schedule to check and time against the default, as field=value
                       words over the default (describe()'s form, e.g. 'mr=32 nr=4
                       pack_input=rows'); repeat for several. Each is checked (bit for bit;
                       HardSwish and SiLU epilogues within 8 ulps),
                       then all are re-timed interleaved with the default (run twice, as
                       two kernels, so code placement counts as noise): median, min and
                       spread per schedule, on stdout and as JSON lines in --log
  --rounds R           interleaved rounds of --compare (default 7)
)";

struct Options {
  std::vector<std::string> inputs;
  std::string records, passes = "all", batch, micro_batch, per_call_batch, trials = "64", budget, search = "guided", seed = "1",
              jobs = "1", threads = "1", target = "host", log, rounds = "7";
  std::vector<std::string> compare;
  bool train = false, verbose = false, step_search = true;
};

std::vector<std::string> parse_passes(const std::string& text) {
  if (text == "all") return {"fwd", "bwd_data", "bwd_weights"};
  std::vector<std::string> out;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    const std::string p = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
    if (p != "fwd" && p != "bwd_data" && p != "bwd_weights")
      throw Error(ExitCode::Usage, fmt::format("--passes {}: '{}' is not fwd, bwd_data or bwd_weights", text, p));
    out.push_back(p);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return out;
}

// "45m", "2h", "900s", "900" -> seconds.
double parse_budget(const std::string& text) {
  if (text.empty()) return std::numeric_limits<double>::infinity();
  const char unit = text.back();
  const double scale = unit == 'h' ? 3600 : unit == 'm' ? 60 : 1;
  const std::string number = (unit == 'h' || unit == 'm' || unit == 's') ? text.substr(0, text.size() - 1) : text;
  return static_cast<double>(parse_count("--budget", number)) * scale;
}

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds)) return "-";
  const int s = static_cast<int>(std::lround(seconds));
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, s / 60 % 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

// The --verbose tail naming the search's transfer seeds.
std::string seeds_said(const TuneKeyRequest& rq) {
  std::string text;
  if (rq.previous_winner) text += ", seeded with its winner under an earlier generator";
  if (!rq.search.transfer.empty())
    text += fmt::format(", {} seed(s) from similar tuned layers", rq.search.transfer.size());
  return text;
}

// What tuning and comparing a layer's pass share: the parallel field its consumer
// records and the consumer's weights mode (candidates are timed with both), the space,
// and the analytic default in its normal form (with both).
struct KeySetup {
  Parallel variant;
  TuningSpace space;
  ConvSchedule def;
  KeySetup(const TuneItem& item, const TargetInfo& t)
      : variant(recorded_parallel(item.descriptor)),
        space(item.descriptor, item.pass, t, variant, item.weights),
        def(space.normalise(analytic_schedule_for_pass(item.descriptor, item.pass, t))) {}
  EvaluatorOptions evaluator_options(int threads, int jobs) const {
    EvaluatorOptions eo;
    eo.threads = threads;
    eo.jobs = jobs;
    return eo;
  }
};

// The --log file, appended to; null without --log.
std::unique_ptr<std::ofstream> open_log(const std::string& path) {
  if (path.empty()) return nullptr;
  auto log = std::make_unique<std::ofstream>(path, std::ios::app);
  if (!*log) throw Error(ExitCode::Io, fmt::format("{}: cannot write", path));
  return log;
}

// --compare: each schedule checked, then re-timed interleaved with the default.
int compare(const Options& o, const std::vector<TuneItem>& items, const TargetInfo& t, int threads, int rounds) {
  const std::unique_ptr<std::ofstream> log = open_log(o.log);
  for (const TuneItem& item : items) {
    const ConvDescriptor& d = item.descriptor;
    const KeySetup key(item, t);
    const ConvSchedule& def = key.def;
    std::vector<ConvSchedule> schedules;
    for (const std::string& words : o.compare) {
      ConvSchedule s = def;
      apply_schedule_overrides(words, &s);
      schedules.push_back(s);
    }
    KernelEvaluator evaluator(d, item.pass, t, def, key.evaluator_options(threads, 1));
    const Comparison c = compare_with_default(key.space, def, schedules, evaluator, rounds);
    const double flops = d.flops();
    auto gf = [&](double seconds) { return seconds > 0 ? flops / seconds * 1e-9 : 0.0; };
    fmt::print("{} {}: {} rounds interleaved, median GF/s (min-time GF/s, spread)\n", d.normalised(), item.pass, rounds);
    fmt::print("  default  {:7.1f} ({:.1f}, {:.1f}%)  {}\n", gf(c.default_stats.median_seconds),
               gf(c.default_stats.min_seconds), 100 * c.default_stats.spread, describe(def));
    auto emit = [&](const std::string& role, const ConvSchedule& s, const std::string& status, const std::string& error,
                    const TimingStats& st) {
      if (log)
        *log << fmt::format(R"({{"event":"compare","descriptor":"{}","pass":"{}","role":"{}","schedule":"{}",)"
                            R"("status":"{}","error":"{}","median_gflops":{:.3f},"min_gflops":{:.3f},"spread":{:.4f},)"
                            R"("count":{},"rounds":{}}})",
                            d.normalised(), item.pass, role, describe(s), status, json_escape(error),
                            gf(st.median_seconds), gf(st.min_seconds), st.spread, st.count, rounds)
             << std::endl;
    };
    emit("default", def, "ok", "", c.default_stats);
    for (const ComparedSchedule& s : c.schedules) {
      if (s.check.status != "ok")
        fmt::print("  {:<8} {}: {}  {}\n", s.check.status, "not timed", s.check.error, describe(s.schedule));
      else
        fmt::print("  {:.3f}x  {:7.1f} ({:.1f}, {:.1f}%)  {}\n", c.default_stats.median_seconds / s.retimed.median_seconds,
                   gf(s.retimed.median_seconds), gf(s.retimed.min_seconds), 100 * s.retimed.spread, describe(s.schedule));
      emit("candidate", s.schedule, s.check.status, s.check.error, s.retimed);
    }
  }
  return 0;
}

}  // namespace

int tune(const Args& args) {
  Options o;
  OptionReader r(args);
  while (!r.done()) {
    if (r.help_or_version(std::string(kUsage) + "\nKernel cache (candidates and winners are compiled once per machine):\n" +
                          kKernelCacheHelp))
      return 0;
    if (kernel_cache_option(r)) continue;
    if (r.value("--records", &o.records) || r.value("--passes", &o.passes) || r.value("--batch", &o.batch) ||
        r.value("--micro-batch", &o.micro_batch) || r.value("--trials", &o.trials) || r.value("--budget", &o.budget) ||
        r.value("--search", &o.search) || r.value("--seed", &o.seed) || r.value("--jobs", &o.jobs) ||
        r.value("--threads", &o.threads) || r.value("--target", &o.target) || r.value("--log", &o.log) ||
        r.value("--rounds", &o.rounds) || r.value("--per-call-batch", &o.per_call_batch))
      continue;
    if (std::string words; r.value("--compare", &words)) {
      o.compare.push_back(words);
      continue;
    }
    if (r.flag("--train")) { o.train = true; continue; }
    if (r.flag("--no-step-search")) { o.step_search = false; continue; }
    if (r.flag("--verbose") || r.flag("-v")) { o.verbose = true; continue; }
    o.inputs.push_back(r.positional());
  }
  if (o.inputs.empty()) throw Error(ExitCode::Usage, "tune: nothing to tune: give a model, a layer set or a descriptor (see --help)");
  if (o.records.empty() && o.compare.empty())
    throw Error(ExitCode::Usage, "tune: --records FILE is required (the records file to append to)");
  if (!o.train && !o.micro_batch.empty()) throw Error(ExitCode::Usage, "tune: --micro-batch needs --train");
  if (o.train && !o.per_call_batch.empty())
    throw Error(ExitCode::Usage, "tune: --per-call-batch is for inference models (--train takes --micro-batch)");
  if (!o.train && !o.step_search) throw Error(ExitCode::Usage, "tune: --no-step-search needs --train");
  if (o.search != "guided" && o.search != "random")
    throw Error(ExitCode::Usage, fmt::format("--search {}: expected guided or random", o.search));

  TuneSources sources;
  sources.inputs = o.inputs;
  sources.passes = parse_passes(o.passes);
  sources.train = o.train;
  if (!o.batch.empty()) sources.batch = parse_count("--batch", o.batch);
  if (!o.micro_batch.empty()) sources.micro_batch = parse_count("--micro-batch", o.micro_batch);
  if (!o.per_call_batch.empty()) sources.per_call_batch = parse_count("--per-call-batch", o.per_call_batch);
  auto bounded = [](const std::string& option, const std::string& text, int64_t most) {
    const int64_t v = parse_count(option, text);
    if (v > most) throw Error(ExitCode::Usage, fmt::format("{} {}: at most {}", option, text, most));
    return static_cast<int>(v);
  };
  const int trials = bounded("--trials", o.trials, 100000);
  const double budget = parse_budget(o.budget);
  const uint64_t seed = static_cast<uint64_t>(parse_count("--seed", o.seed));
  const int jobs = bounded("--jobs", o.jobs, 64);
  const int threads = bounded("--threads", o.threads, 1024);
  const TargetInfo t = target_info(o.target);

  std::vector<std::string> why;
  std::vector<TuneItem> items = tune_items(sources, t, &why);  // also checks the inputs
  if (!o.compare.empty()) {
    if (o.verbose)
      for (const auto& line : why) fmt::print(stderr, "convgen: {}\n", line);
    return compare(o, items, t, threads, bounded("--rounds", o.rounds, 1000));
  }
  TuneJournal journal(o.records);
  if (journal.repaired_bytes() > 0)
    fmt::print(stderr, "convgen: {}: cut off an incomplete last line ({} bytes, a write interrupted by a crash)\n",
               o.records, journal.repaired_bytes());
  const std::unique_ptr<std::ofstream> log = open_log(o.log);
  const bool terminal = ::isatty(STDERR_FILENO);

  Provenance base;
  const HostCpu& cpu = host_cpu();
  base.cpu = cpu.model;
  base.l1_bytes = cpu.l1d_bytes;
  base.l2_bytes = cpu.l2_bytes;
  base.l3_bytes = cpu.l3_bytes;
  base.halide = CONVGEN_HALIDE_VERSION;
  base.threads = threads;

  const double start = monotonic_seconds();
  if (o.train && o.step_search) {
    // The trainer's configuration first: it decides which kernels training runs.
    for (const std::string& model : o.inputs) {
      StepSearchRequest sr;
      sr.model = model;
      sr.batch = sources.batch > 0 ? sources.batch : 64;
      sr.micro_batch = sources.micro_batch;
      sr.records = o.records;
      sr.threads = threads;
      sr.seed = seed;
      sr.seconds = budget / 4 / static_cast<double>(o.inputs.size());
      sr.provenance = base;
      const StepSearchOutcome s = search_training_step(sr, t, journal, [&](const std::string& line) {
        if (o.verbose || line.rfind("training step: trial", 0) != 0) fmt::print(stderr, "convgen: {}: {}\n", model, line);
      });
      if (log)
        *log << fmt::format(R"({{"event":"training_step","model":"{}","skipped":{},"accepted":{},"micro_batch":{},)"
                            R"("whole_batch_layers":{},"default_gflops":{:.3f},"tuned_gflops":{:.3f},"trials":{},)"
                            R"("seconds":{:.1f}}})",
                            json_escape(model), s.skipped, s.accepted, s.chosen.micro_batch,
                            std::count_if(s.chosen.parallel_modes.begin(), s.chosen.parallel_modes.end(),
                                          [](const auto& e) { return e.second == "whole-batch"; }),
                            s.default_gflops, s.tuned_gflops, s.trials.size(), s.seconds)
             << std::endl;
    }
  }
  if (o.train) {
    // The kernels of the configuration the records file's training record fixes (the one
    // just chosen, or an earlier run's).
    sources.records = o.records;
    why.clear();
    items = tune_items(sources, t, &why);
  }
  if (o.verbose)
    for (const auto& line : why) fmt::print(stderr, "convgen: {}\n", line);

  struct Row {
    std::string layer, pass;
    TuneKeyOutcome outcome;
  };
  std::vector<Row> rows;
  for (size_t i = 0; i < items.size(); ++i) {
    const TuneItem& item = items[i];
    const ConvDescriptor& d = item.descriptor;
    TuneKeyRequest rq;
    rq.key = {d.normalised(), item.pass, t.target, CONVGEN_GENERATOR_HASH};
    const KeySetup key(item, t);
    const TuningSpace& space = key.space;
    const ConvSchedule& def = key.def;
    rq.default_schedule = def;
    rq.provenance = base;
    rq.provenance.variant = to_string(key.variant);
    rq.provenance.micro_batch = o.train ? d.mb : 0;
    rq.search.method = o.search;
    rq.search.seed = seed;
    if (o.search == "guided") {
      // tune_key seeds this layer's earlier winner (re-checked: the generator changed) first.
      rq.previous_winner = previous_tuned_schedule(journal.records(), rq.key);
      rq.search.transfer = similar_tuned_schedules(journal.records(), rq.key);
    }
    rq.max_trials = trials;
    rq.jobs = jobs;
    const double left = budget - (monotonic_seconds() - start);
    rq.seconds = std::isfinite(budget) ? std::max(0.0, left / static_cast<double>(items.size() - i)) : left;

    const std::string what = fmt::format("{} {}", d.normalised(), item.pass);
    if (o.verbose)
      fmt::print(stderr, "convgen: [{}/{}] {} ({}): space of {} schedules, default {}{}\n", i + 1, items.size(), what,
                 item.layers.front(), space.all().size(), describe(def),
                 seeds_said(rq));
    const EvaluatorOptions eo = key.evaluator_options(threads, jobs);
    std::unique_ptr<KernelEvaluator> evaluator;
    auto progress = [&](const TuneProgress& p) {
      const double elapsed = monotonic_seconds() - start;
      const double done = static_cast<double>(i) + static_cast<double>(p.trial + 1) / trials;
      const double eta = std::isfinite(budget) ? budget - elapsed : elapsed / done * (items.size() - done);
      const double gain = p.default_gflops > 0 ? p.best_gflops / p.default_gflops : 1;
      if (o.verbose)
        fmt::print(stderr, "convgen:   trial {}{}: {} {:.1f} GF/s, best {:.1f} ({:.2f}x default)\n", p.trial,
                   p.replayed ? " (from the journal)" : "", p.status, p.gflops, p.best_gflops, gain);
      else if (terminal)
        fmt::print(stderr, "\r\033[K[{}/{}] {} trial {}/{} best {:.1f} GF/s ({:.2f}x default) ETA {}", i + 1,
                   items.size(), what, p.trial + 1, trials, p.best_gflops, gain, duration_text(eta));
      if (log)
        *log << fmt::format(R"({{"event":"trial","descriptor":"{}","pass":"{}","trial":{},"replayed":{},)"
                            R"("status":"{}","gflops":{:.3f},"best_gflops":{:.3f},"default_gflops":{:.3f},)"
                            R"("schedule":"{}"}})",
                            d.normalised(), item.pass, p.trial, p.replayed, p.status, p.gflops, p.best_gflops,
                            p.default_gflops, describe(p.schedule))
             << std::endl;
    };
    // The evaluator is built lazily: a key an earlier run finished needs no kernels.
    struct LazyEvaluator : CandidateEvaluator {
      std::function<KernelEvaluator&()> get;
      void prepare(const std::vector<ConvSchedule>& b) override { get().prepare(b); }
      CandidateResult evaluate(const ConvSchedule& s, double best) override { return get().evaluate(s, best); }
      std::vector<TimingStats> retime_interleaved(const std::vector<ConvSchedule>& s, int rounds) override {
        return get().retime_interleaved(s, rounds);
      }
      double flops() const override { return d.flops(); }
      ConvDescriptor d;
    } lazy;
    lazy.d = d;
    lazy.get = [&]() -> KernelEvaluator& {
      if (!evaluator) evaluator = std::make_unique<KernelEvaluator>(d, item.pass, t, def, eo);
      return *evaluator;
    };
    TuneKeyOutcome out = tune_key(rq, space, lazy, journal, progress);
    if (terminal && !o.verbose) fmt::print(stderr, "\r\033[K");
    fmt::print(stderr, "convgen: [{}/{}] {}: {}{:.1f} -> {:.1f} GF/s ({:.2f}x), {} trials{}{}\n", i + 1, items.size(),
               what, out.skipped ? "already tuned, " : "", out.default_gflops, out.tuned_gflops,
               out.default_gflops > 0 ? out.tuned_gflops / out.default_gflops : 1.0, out.trials,
               out.replayed ? fmt::format(" ({} from the journal)", out.replayed) : "",
               out.accepted ? "" : ", default kept");
    if (log)
      *log << fmt::format(R"({{"event":"tuned","descriptor":"{}","pass":"{}","default_gflops":{:.3f},)"
                          R"("tuned_gflops":{:.3f},"trials":{},"replayed":{},"best_trial":{},"accepted":{},)"
                          R"("skipped":{},"transferred":{},"seconds":{:.1f},"schedule":"{}","best_so_far":[{}]}})",
                          d.normalised(), item.pass, out.default_gflops, out.tuned_gflops, out.trials, out.replayed,
                          out.best_trial, out.accepted, out.skipped, out.transferred, out.seconds,
                          describe(out.chosen.schedule), fmt::join(out.best_so_far_gflops, ","))
           << std::endl;
    rows.push_back({item.layers.front(), item.pass, std::move(out)});
  }

  // The final table: one row per layer and pass. A long label keeps its end: a model's
  // layers differ in their node names, not in the model's path.
  auto fit = [](const std::string& label) {
    return label.size() <= 40 ? label : "..." + label.substr(label.size() - 37);
  };
  fmt::print("{:<40} {:<11} {:>9} {:>9} {:>6} {:>7} {:>6} {:>8}\n", "layer", "pass", "default", "tuned", "gain",
             "trials", "best@", "time");
  double log_gain = 0;
  int seeded = 0, seed_found_best = 0;
  for (const Row& row : rows) {
    const TuneKeyOutcome& out = row.outcome;
    const double gain = out.default_gflops > 0 ? out.tuned_gflops / out.default_gflops : 1.0;
    log_gain += std::log(gain);
    seeded += out.transferred > 0;
    seed_found_best += out.transfer_won;
    fmt::print("{:<40} {:<11} {:>9.1f} {:>9.1f} {:>5.2f}x {:>7} {:>6} {:>8}\n", fit(row.layer), row.pass,
               out.default_gflops, out.tuned_gflops, gain, out.trials,
               out.skipped ? std::string("-") : std::to_string(out.best_trial),
               out.skipped ? "done" : duration_text(out.seconds));
  }
  if (seeded)
    fmt::print("transfer: {} kernel(s) seeded from earlier winners or similar tuned layers; in {} of them a seed won\n",
               seeded, seed_found_best);
  if (o.verbose) fmt::print(stderr, "convgen: {}\n", kernel_cache_summary());
  fmt::print("geomean gain {:.3f}x over {} kernels in {}; records: {}\n",
             rows.empty() ? 1.0 : std::exp(log_gain / rows.size()), rows.size(), duration_text(monotonic_seconds() - start),
             o.records);
  return 0;
}

}  // namespace convgen::cli
