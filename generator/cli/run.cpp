// convgen run / convgen check: execute a model in-process (generator/model/executor.h) on ONNX
// TensorProto files, with no C++ compile per model.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/model/batch_split.h"
#include "generator/model/executor.h"
#include "generator/onnx/import.h"
#include "generator/onnx/tensor_io.h"
#include "runtime/probe/fma_probe.h"
#include "schedules/errors.h"

namespace fs = std::filesystem;

namespace convgen::cli {

namespace {

const char* kRunUsage = R"(usage: convgen run MODEL.onnx --input FILE.pb [--input FILE.pb ...] --output-dir DIR [options]

Runs a model in-process on ONNX TensorProto files (the format of ONNX's backend test
data) and writes its outputs as DIR/output_0.pb, output_1.pb, ... Convolutions run
convgen's generated kernels (from the kernel cache, else JIT-compiled; the code and schedules of `convgen
compile`); other layers the runtime's operators. Inputs are matched to the model's
inputs by the name stored in each file, else by position; int64 inputs (shapes, pads)
are bound as constants. The batch is the first input's leading dimension.

  --target STRING      Halide target (default host: the widest this CPU runs)
  --schedules FILE     schedule records (JSON lines)
  --threads T          threads (default 1): a batch that splits runs its calls on
                       them, else the convolutions' and operators' own loops do;
                       the outputs are the same bits for every T
  --per-call-batch M   run the batch as calls of M samples each, spread over the
                       threads (M divides the batch; M = the batch: one call). Default:
                       the smallest M giving every spatial convolution 64+ output
                       pixels a call, at most half the batch, where the model provably
                       never mixes samples (else one call; --verbose says why;
                       docs/model-import.md, Threads)
  --verbose            say per layer which kernel and schedule source were chosen
  --profile            per layer: ms, and for convolutions GF/s, % of the FMA peak
                       (measured in the same run) and workspace bytes (on stderr);
                       each step's median over the timed runs after a warm-up run
  --profile-runs N     timed runs for --profile (default 20)
)";

const char* kCheckUsage = R"(usage: convgen check DIR [options]

DIR holds model.onnx and test_data_set_*/{input,output}_*.pb, as ONNX's backend test
cases do. Runs the model on every data set (as `convgen run`) and compares each output
with the expected one. An output passes when either rule holds:
  per element   |got - want| <= atol + rtol * |want| for every element, with the case's
                own tolerances when DIR/tolerances says ("rtol X" and "atol Y" lines),
                else ONNX's runner defaults (rtol 1e-3, atol 1e-7);
  scale         max |got - want| <= S * max |want|: float32 rounding in a deep model
                is relative to the output's scale, not to each element (logits near 0).
Prints, per output, the largest error, the same relative to max |want|, and which rule
held; exits 0 only if every output of every data set passes (9 otherwise,
docs/exit-codes.md).

  --rtol R, --atol A        per-element tolerances
  --scale-tolerance S       the scale rule's bound (default 1e-5; 0 turns the rule off)
  --target STRING, --schedules FILE, --threads T, --per-call-batch M, --verbose,
  --profile, --profile-runs N
                            as for `convgen run`
)";

struct RunSetup {
  std::string target, schedules;
  int threads = 1;
  int64_t per_call_batch = 0;  // 0: split_batch's default
  bool verbose = false, profile = false;
  int profile_runs = 20;
};

// The model imported with the given input data: int64 inputs, and inputs the importer
// needs as constants (Clip bounds, Dropout ratio, ...), are bound into the graph; the
// others become the executor's feeds.
struct Prepared {
  model::Graph graph;  // at the per-call batch
  std::map<std::string, Tensor> feeds;
  int64_t calls = 1;
};

// `names`: the model's graph inputs in order (model::onnx_input_names).
Prepared prepare(const std::string& model_path, const std::vector<std::string>& names, std::vector<model::Value> values,
                 int64_t per_call_batch, std::vector<std::string>* why) {
  if (values.size() > names.size())
    throw Error(ExitCode::BadData, fmt::format("{}: {} inputs given, the model has {}", model_path, values.size(),
                                               names.size()));
  std::map<std::string, model::Value> by_name;
  for (size_t i = 0; i < values.size(); ++i) {
    model::Value& v = values[i];
    if (std::find(names.begin(), names.end(), v.name) == names.end()) v.name = names[i];
    by_name[v.name] = v;
  }
  model::ImportOptions options;
  for (const auto& [name, v] : by_name) {
    if (v.is_int64) options.constant_inputs[name] = v;
    else if (!v.shape.empty() && options.batch == 1 && name == names.front()) options.batch = std::max<int64_t>(1, v.shape[0]);
  }
  // First at the data's batch, binding what the importer needs as constants.
  model::Graph whole;
  for (;;) {
    try {
      whole = model::import_onnx(model_path, options);
      break;
    } catch (const model::ConstantInputNeeded& e) {
      if (!by_name.count(e.input()) || options.constant_inputs.count(e.input())) throw;
      options.constant_inputs[e.input()] = by_name[e.input()];  // data for it was given: bind it
    }
  }
  const int64_t batch = whole.batch;
  auto import_at = [&](int64_t b) {
    model::ImportOptions at = options;
    at.batch = b;
    return b == batch ? std::move(whole) : model::import_onnx(model_path, at);
  };
  model::SplitModel split = model::split_batch(import_at, batch, per_call_batch, why);
  Prepared p{std::move(split.graph), {}, split.calls};
  for (const auto& name : p.graph.inputs) {
    auto it = by_name.find(name);
    if (it == by_name.end()) throw Error(ExitCode::BadData, fmt::format("{}: no data for input '{}'", model_path, name));
    p.feeds[name] = model::tensor_of(it->second);
  }
  return p;
}

// --profile: per step ms, and for convolutions GF/s, % of the FMA peak measured here
// and the kernel's workspace. A step of a few microseconds varies by more than itself
// from run to run: each step's median over `runs` warm runs.
std::vector<model::ModelExecutor::StepTiming> median_profile(const std::vector<std::vector<model::ModelExecutor::StepTiming>>& runs) {
  std::vector<model::ModelExecutor::StepTiming> median = runs.front();
  std::vector<double> ms(runs.size());
  for (size_t step = 0; step < median.size(); ++step) {
    for (size_t r = 0; r < runs.size(); ++r) ms[r] = runs[r][step].ms;
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    median[step].ms = ms[ms.size() / 2];
  }
  return median;
}

void print_profile(const std::vector<model::ModelExecutor::StepTiming>& profile, const TargetInfo& target, int threads,
                   int runs, int64_t calls) {
  const double peak = measure_fma_peak_gflops(threads, target.vector_floats);
  double total_ms = 0, total_flops = 0;
  fmt::print(stderr, "convgen: profile ({} thread{}, FMA peak {:.1f} GFLOP/s measured now on as many; medians of {} warm runs)\n",
             threads, threads > 1 ? "s" : "", peak, runs);
  if (calls > 1)
    fmt::print(stderr, "convgen: the batch runs as {} calls: per step, the first thread's time over its calls "
                       "(GF/s and %pk of that thread; the peak is the threads'; ws bytes not measured)\n", calls);
  fmt::print(stderr, "{:<28} {:<18} {:>9} {:>8} {:>5} {:>10}\n", "layer", "op", "ms", "GF/s", "%pk", "ws bytes");
  for (const auto& t : profile) {
    total_ms += t.ms;
    total_flops += t.flops;
    if (t.flops > 0) {
      const double gflops = t.flops / (t.ms * 1e6);
      fmt::print(stderr, "{:<28} {:<18} {:>9.3f} {:>8.1f} {:>5.0f} {:>10}\n", t.node, model::op_name(t.op), t.ms, gflops,
                 100.0 * gflops / peak, t.workspace_bytes);
    } else {
      fmt::print(stderr, "{:<28} {:<18} {:>9.3f}\n", t.node, model::op_name(t.op), t.ms);
    }
  }
  fmt::print(stderr, "{:<28} {:<18} {:>9.3f} {:>8.1f}   (convolutions {:.1f} GFLOP; sum of medians)\n", "total", "",
             total_ms, total_flops / (total_ms * 1e6), total_flops / 1e9);
}

std::vector<Tensor> execute(Prepared p, const RunSetup& s, std::vector<std::string>* why) {
  const TargetInfo target = target_info(s.target.empty() ? "host" : s.target);
  model::ModelExecutor exec(std::move(p.graph), target, s.schedules, why, s.threads, p.calls);
  if (!s.profile) return exec.run(p.feeds);
  exec.run(p.feeds);  // warm-up: first touch
  exec.set_profiling(true);
  std::vector<std::vector<model::ModelExecutor::StepTiming>> runs;
  std::vector<Tensor> out;
  for (int r = 0; r < s.profile_runs; ++r) {
    out = exec.run(p.feeds);
    runs.push_back(exec.profile());
  }
  print_profile(median_profile(runs), target, s.threads, s.profile_runs, exec.calls());
  return out;
}

void print_why(const std::vector<std::string>& why) {
  for (const auto& l : why) fmt::print(stderr, "convgen: {}\n", l);
  fmt::print(stderr, "convgen: {}\n", kernel_cache_summary());
}

double parse_double(const std::string& option, const std::string& text) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw Error(ExitCode::Usage, fmt::format("{} {}: expected a non-negative number", option, text));
}

// Files named <prefix>_<k>.pb in dir, in order of k.
std::vector<std::string> numbered_files(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, std::string>> found;
  const std::regex pattern(prefix + R"(_(\d+)\.pb)");
  for (const auto& e : fs::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoi(m[1]), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (const auto& f : found) out.push_back(f.second);
  return out;
}

}  // namespace

int run_model(const Args& args) {
  RunSetup s;
  std::string model, output_dir;
  std::vector<std::string> input_files;
  OptionReader r(args);
  while (!r.done()) {
    if (r.help_or_version(std::string(kRunUsage) + kKernelCacheHelp)) return 0;
    if (kernel_cache_option(r)) continue;
    std::string v;
    if (r.value("--input", &v)) {
      input_files.push_back(v);
      continue;
    }
    if (r.value("--output-dir", &output_dir) || r.value("--target", &s.target) || r.value("--schedules", &s.schedules))
      continue;
    if (r.flag("--verbose") || r.flag("-v")) { s.verbose = true; continue; }
    if (r.flag("--profile")) { s.profile = true; continue; }
    if (r.value("--profile-runs", &v)) { s.profile_runs = static_cast<int>(parse_count("--profile-runs", v)); continue; }
    if (r.value("--threads", &v)) { s.threads = static_cast<int>(parse_count("--threads", v)); continue; }
    if (r.value("--per-call-batch", &v)) { s.per_call_batch = parse_count("--per-call-batch", v); continue; }
    if (!model.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    model = r.positional();
  }
  if (model.empty()) throw Error(ExitCode::Usage, "run: missing MODEL.onnx (see --help)");
  if (output_dir.empty()) throw Error(ExitCode::Usage, "run: missing --output-dir DIR (see --help)");
  // Refuses the model itself (ops, input types) before any data is read.
  const std::vector<std::string> names = model::onnx_input_names(model);
  std::vector<model::Value> values;
  for (const auto& f : input_files) values.push_back(model::read_tensor_file(f));
  std::vector<std::string> why;
  Prepared p = prepare(model, names, values, s.per_call_batch, &why);
  const std::vector<std::string> output_names = p.graph.outputs;
  const std::vector<Tensor> outputs = execute(std::move(p), s, &why);
  if (s.verbose) print_why(why);
  std::error_code ec;
  fs::create_directories(output_dir, ec);
  if (ec) throw Error(ExitCode::Io, fmt::format("{}: cannot create directory: {}", output_dir, ec.message()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path = (fs::path(output_dir) / fmt::format("output_{}.pb", i)).string();
    model::write_tensor_file(path, output_names[i], outputs[i]);
    fmt::print("{}\n", path);
  }
  return 0;
}

int check_model(const Args& args) {
  RunSetup s;
  std::string dir, rtol_text, atol_text, scale_text;
  OptionReader r(args);
  while (!r.done()) {
    if (r.help_or_version(std::string(kCheckUsage) + kKernelCacheHelp)) return 0;
    if (kernel_cache_option(r)) continue;
    if (r.value("--rtol", &rtol_text) || r.value("--atol", &atol_text) || r.value("--scale-tolerance", &scale_text) ||
        r.value("--target", &s.target) ||
        r.value("--schedules", &s.schedules))
      continue;
    if (r.flag("--verbose") || r.flag("-v")) { s.verbose = true; continue; }
    if (r.flag("--profile")) { s.profile = true; continue; }
    if (std::string t; r.value("--profile-runs", &t)) {
      s.profile_runs = static_cast<int>(parse_count("--profile-runs", t));
      continue;
    }
    if (std::string t; r.value("--threads", &t)) { s.threads = static_cast<int>(parse_count("--threads", t)); continue; }
    if (std::string t; r.value("--per-call-batch", &t)) { s.per_call_batch = parse_count("--per-call-batch", t); continue; }
    if (!dir.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    dir = r.positional();
  }
  if (dir.empty()) throw Error(ExitCode::Usage, "check: missing DIR (see --help)");
  // The case's own tolerances (DIR/tolerances: lines "rtol X" / "atol Y"), else ONNX's
  // runner defaults; the command line wins over both.
  double rtol = 1e-3, atol = 1e-7;
  const fs::path own = fs::path(dir) / "tolerances";
  if (fs::exists(own)) {
    std::istringstream in(read_file(own.string()));
    std::string key, value;
    while (in >> key >> value) {
      if (key == "rtol") rtol = parse_double(own.string() + ": rtol", value);
      else if (key == "atol") atol = parse_double(own.string() + ": atol", value);
      else throw Error(ExitCode::BadData, fmt::format("{}: unknown key '{}' (rtol, atol)", own.string(), key));
    }
  }
  if (!rtol_text.empty()) rtol = parse_double("--rtol", rtol_text);
  if (!atol_text.empty()) atol = parse_double("--atol", atol_text);
  const double scale_tolerance = scale_text.empty() ? 1e-5 : parse_double("--scale-tolerance", scale_text);
  const std::string model = (fs::path(dir) / "model.onnx").string();
  if (!fs::exists(model)) throw Error(ExitCode::Io, fmt::format("{}: cannot read", model));
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) sets.push_back(e.path());
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) throw Error(ExitCode::BadData, fmt::format("{}: no test_data_set_* directories", dir));
  // Refuses the model itself (ops, input types) before any data is read.
  const std::vector<std::string> names = model::onnx_input_names(model);
  int failed = 0, total = 0;
  for (const fs::path& set : sets) {
    std::vector<model::Value> values;
    for (const auto& f : numbered_files(set, "input")) values.push_back(model::read_tensor_file(f));
    std::vector<std::string> why;
    Prepared p = prepare(model, names, values, s.per_call_batch, &why);
    const std::vector<std::string> output_names = p.graph.outputs;
    const std::vector<Tensor> got = execute(std::move(p), s, &why);
    if (s.verbose) print_why(why);
    const auto expected_files = numbered_files(set, "output");
    if (expected_files.size() != got.size())
      throw Error(ExitCode::BadData, fmt::format("{}: {} expected outputs, the model has {}", set.string(),
                                                 expected_files.size(), got.size()));
    for (size_t i = 0; i < got.size(); ++i) {
      const Tensor want = model::tensor_of(model::read_tensor_file(expected_files[i]));
      ++total;
      double max_error = 0.0, max_reference = 0.0;
      const bool same_size = want.shape == got[i].shape || want.elements() == got[i].elements();
      bool per_element = same_size;
      if (same_size) {
        for (size_t j = 0; j < want.data.size(); ++j) {
          const double g = got[i].data[j], w = want.data[j];
          if (std::isnan(w) && std::isnan(g)) continue;
          const double err = std::fabs(g - w);
          max_error = std::max(max_error, std::isnan(err) ? INFINITY : err);
          if (!std::isnan(w)) max_reference = std::max(max_reference, std::fabs(w));
          if (!(err <= atol + rtol * std::fabs(w))) per_element = false;
        }
      }
      const double relative = max_error == 0.0 ? 0.0 : max_reference > 0.0 ? max_error / max_reference : INFINITY;
      const bool scale = same_size && scale_tolerance > 0.0 && relative <= scale_tolerance;
      const bool ok = per_element || scale;
      if (!ok) ++failed;
      fmt::print("{} output {} '{}': max |error| {:.3g} ({:.3g} of max |want| {:.3g}); {}\n", set.filename().string(), i,
                 output_names[i], max_error, relative, max_reference,
                 !same_size ? "FAIL (shape)"
                 : per_element ? fmt::format("pass (per element: rtol {} atol {})", rtol, atol)
                 : scale ? fmt::format("pass (scale: {:.3g} <= {}; per element rtol {} atol {} fails)", relative,
                                       scale_tolerance, rtol, atol)
                         : fmt::format("FAIL (per element rtol {} atol {}{})", rtol, atol,
                                       scale_tolerance > 0.0 ? fmt::format(", scale {}", scale_tolerance) : ""));
    }
  }
  if (failed > 0)
    throw Error(ExitCode::CheckFailed, fmt::format("{}: {} of {} outputs differ beyond rtol {} atol {}{}", dir, failed,
                                                   total, rtol, atol,
                                                   scale_tolerance > 0.0
                                                       ? fmt::format(" and {} of max |want|", scale_tolerance)
                                                       : ""));
  fmt::print("{}: all {} outputs pass\n", dir, total);
  return 0;
}

}  // namespace convgen::cli
