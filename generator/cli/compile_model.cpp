// convgen compile: an ONNX model in, its kernels out -- one static library, a header and
// a provenance manifest. Kernels are generated one child process each (byte-
// reproducible), in parallel, through a content-addressed cache.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/cli/subprocess.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/model/batch_split.h"
#include "generator/model/driver_codegen.h"
#include "generator/model/kernels.h"
#include "generator/model/plan.h"
#include "generator/onnx/import.h"
#include "generator/train/conv_factories.h"
#include "generator/train/driver_codegen.h"
#include "generator/train/prepare_graph.h"
#include "generator/train/training_record.h"
#include "generator/train/training_requests.h"
#include "runtime/ops/weights_file.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/trainer.h"
#include "runtime/train/trainer_state.h"
#include "schedules/build_info.h"
#include "schedules/errors.h"
#include "schedules/sha256.h"

namespace fs = std::filesystem;

namespace convgen::cli {

namespace {

const char* kUsage = R"(usage: convgen compile MODEL.onnx [-o DIR] [options]

Imports an ONNX model (docs/model-import.md), fuses what inference allows (BatchNorm
folded into the Conv before it, Relu into the Conv's epilogue) and generates one forward
kernel per distinct convolution layer, shared by identical layers. Writes:

  DIR/NAME.a               the kernels, built without a Halide runtime: link
                           convgen::runtime, which owns the process's one runtime
  DIR/NAME.h               the driver class (convgen_model_NAME::Model), every kernel's
                           declaration and the layer -> kernel table
  DIR/NAME.cpp             the generated model driver: every layer in order over a static
                           memory plan (one arena, offsets fixed at compile time)
  DIR/NAME.weights         the weights the driver loads (BatchNorm already folded)
  DIR/kernels/K.h          each kernel's own header (buffer conventions: docs/architecture.md)
  DIR/NAME.manifest.json   provenance: convgen version, generator hash, Halide version,
                           target, the model's SHA-256, each kernel's layer, schedule and
                           schedule source

Build NAME.cpp with the header directory on the include path and link NAME.a and
convgen::runtime (runtime/driver/model_runtime.h, runtime/ops/ops.h); from CMake, convgen_add_model() does it all
(docs/cmake.md).

  -o, --output DIR     output directory (default: NAME in the current directory)
  --name NAME          model name, a C identifier (default: the file's stem)
  --namespace NS       the driver's C++ namespace, e.g. app::models (default:
                       convgen_model_NAME)
  --batch N            batch size bound to a dynamic batch dimension (default 1)
  --per-call-batch M   the driver runs the batch as calls of M samples, spread over
                       the OpenMP threads with an arena each (M divides N; M = N: one
                       call). Default (docs/model-import.md, Threads): the smallest M
                       giving every spatial convolution 64+ output pixels a call, at
                       most N/2, where the model provably never mixes samples (else
                       one call; --verbose says why)
  --target STRING      Halide target (default host: the widest this CPU runs, AVX-512
                       where it has it, resolved and written into the provenance); pin
                       one, e.g. x86-64-linux-avx-avx2-f16c-fma-sse41, for other CPUs.
                       The driver refuses a CPU without the target's features
  --schedules FILE     schedule records (JSON lines); a matching record wins over the
                       analytic default. With --train, a training record for the model
                       and batch (`convgen tune --train`) fixes the driver's micro-batch
                       and parallel modes
  --jobs J             kernels generated in parallel (default: the number of CPUs)
  --cache-dir DIR      kernel cache (default $CONVGEN_CACHE_DIR, else
                       $XDG_CACHE_HOME/convgen, else ~/.cache/convgen)
  --no-cache           generate every kernel afresh (and do not store it)
  --verbose            say per layer which kernel, schedule source and fusions were chosen
  --help, --version

Training driver (docs/training.md):
  --train              emit the model's training driver instead: NAME.h declares
                       convgen_model_NAME::Trainer (train_step, evaluate, forward,
                       save_weights, load_onnx_weights, save_checkpoint,
                       load_checkpoint, engine()), NAME.cpp holds the training graph and
                       the table of its forward, backward-data and backward-weights
                       kernels, NAME.weights the initial weights. It runs the same
                       batch-parallel engine as `convgen train` on the same kernels: the
                       same bits. Link NAME.a and convgen::runtime. --batch is then the
                       mini-batch size (default 64).
  --micro-batch M      samples per micro-batch (default: the largest divisor of the
                       batch that is at most batch / 4)
  --samples N[,N...]   data sizes (e.g. 60000,10000 for Fashion-MNIST's train and test
                       splits) whose last, partial batch gets kernels too
)";

struct Options {
  std::string model, output_dir, name, batch, target, schedules, jobs, cache_dir, micro_batch, samples, cpp_namespace,
      per_call_batch;
  bool no_cache = false, verbose = false, train = false;
};

std::string regenerate_command(const Options& o, const std::string& name, const std::string& target) {
  std::string cmd = fmt::format("convgen compile {}{} --name {} --batch {}", fs::path(o.model).filename().string(),
                                o.train ? " --train" : "", name, o.batch.empty() ? (o.train ? "64" : "1") : o.batch);
  if (o.train && !o.micro_batch.empty()) cmd += " --micro-batch " + o.micro_batch;
  if (o.train && !o.samples.empty()) cmd += " --samples " + o.samples;
  if (!o.per_call_batch.empty()) cmd += " --per-call-batch " + o.per_call_batch;
  cmd += " --target " + target;
  if (!o.cpp_namespace.empty() && o.cpp_namespace != "convgen_model_" + name) cmd += " --namespace " + o.cpp_namespace;
  if (!o.schedules.empty()) cmd += " --schedules <records>";
  return cmd;
}

std::string identifier_from(const std::string& stem) {
  std::string id;
  for (char c : stem) id += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "model_" + id;
  return id;
}


void make_dirs(const fs::path& p) {
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw Error(ExitCode::Io, fmt::format("{}: cannot create directory: {}", p.string(), ec.message()));
}

std::string first_line_of_file(const fs::path& p) {
  try {
    const std::string text = read_file(p.string());
    return text.substr(0, text.find('\n'));
  } catch (const Error&) {
    return "(no message)";
  }
}

// A kernel's cache entry (generator/kernel_cache): its directory holds K.a, K.h and
// K.manifest.json, and K.so when a process has loaded the same kernel.
fs::path cache_entry(const fs::path& cache, const model::PlannedKernel& k) {
  return kernel_cache_entry(cache, k.key);
}

// Generates the kernels missing from the cache (or all of them into `scratch` with
// --no-cache); returns the directory holding each kernel's files.
std::vector<fs::path> generate_kernels(const std::vector<model::PlannedKernel>& kernels, const Options& o,
                                       const std::string& target, const fs::path& scratch,
                                       std::vector<std::string>* why) {
  const fs::path cache = o.cache_dir.empty() ? default_kernel_cache_dir() : fs::path(o.cache_dir);
  std::vector<fs::path> where(kernels.size());
  std::vector<ChildJob> jobs;
  std::vector<size_t> job_kernel;
  std::vector<fs::path> job_dir;
  const std::string self = self_executable();
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& k = kernels[i];
    if (!o.no_cache) {
      where[i] = cache_entry(cache, k);
      if (fs::exists(where[i] / (k.name + ".a"))) {
        // Marks the entry used: a trim elsewhere keeps it while this compile reads it.
        std::error_code ec;
        fs::last_write_time(where[i] / (k.name + ".a"), fs::file_time_type::clock::now(), ec);
        why->push_back(fmt::format("kernel {}: from the cache ({})", k.name, where[i].string()));
        continue;
      }
    }
    const fs::path dir = scratch / ("gen-" + k.name);
    make_dirs(dir);
    ChildJob job;
    job.argv = {self, "compile-layer", k.descriptor.normalised(), "--pass", k.pass, "--name", k.name, "--target",
                target, "--no-runtime", "-o", dir.string()};
    if (!k.schedule_overrides.empty()) {
      job.argv.push_back("--schedule");
      job.argv.push_back(k.schedule_overrides);
    }
    if (!o.schedules.empty()) {
      job.argv.push_back("--schedules");
      job.argv.push_back(fs::absolute(o.schedules).string());
    }
    job.stderr_path = (scratch / ("gen-" + k.name + ".log")).string();
    jobs.push_back(job);
    job_kernel.push_back(i);
    job_dir.push_back(dir);
  }
  int parallel = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!o.jobs.empty()) parallel = static_cast<int>(parse_count("--jobs", o.jobs));
  run_jobs(jobs, parallel);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const auto& k = kernels[job_kernel[j]];
    if (jobs[j].exit_code != 0)
      throw Error(ExitCode::Internal, fmt::format("generating kernel {} for layer {} failed (exit {}): {}", k.name,
                                                  k.layers.front(), jobs[j].exit_code,
                                                  first_line_of_file(jobs[j].stderr_path)));
    why->push_back(fmt::format("kernel {}: generated", k.name));
    if (o.no_cache) {
      where[job_kernel[j]] = job_dir[j];
      continue;
    }
    // Publish into the cache file by file, each with one rename, the library last: a
    // reader that finds K.a finds K.h and the manifest too. A concurrent compile of the
    // same kernel writes the same bytes; the entry may also hold the kernel's shared
    // object already (generator/kernel_cache).
    const fs::path entry = where[job_kernel[j]];
    for (const char* suffix : {".h", ".manifest.json", ".a"}) {
      std::error_code ec;
      for (int attempt = 0; attempt < 3; ++attempt) {  // a trim may remove a new, empty entry
        make_dirs(entry);
        fs::rename(job_dir[j] / (k.name + suffix), entry / (k.name + suffix), ec);
        if (ec != std::errc::no_such_file_or_directory) break;
      }
      if (ec)
        throw Error(ExitCode::Io, fmt::format("{}: cannot store the kernel in the cache: {}", entry.string(), ec.message()));
    }
  }
  return where;
}

std::string provenance_lines(const Options& o, const std::string& name, const std::string& target) {
  return fmt::format(
      "// Generated by convgen {} -- do not edit.\n"
      "// Regenerate with: {}\n"
      "// Generator content hash: {}; Halide {}\n",
      CONVGEN_VERSION, regenerate_command(o, name, target), CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION);
}

std::string model_header(const std::vector<model::PlannedKernel>& kernels, const Options& o, const std::string& name,
                         const std::string& target, const std::string& driver) {
  const char* pass_title = o.train ? "training: every pass at every size" : "forward pass";
  std::string h = provenance_lines(o, name, target);
  h += fmt::format("#ifndef CONVGEN_MODEL_{0}_H\n#define CONVGEN_MODEL_{0}_H\n\n", name);
  h += driver + "\n";
  for (const auto& k : kernels) h += fmt::format("#include \"kernels/{}.h\"\n", k.name);
  h += fmt::format("\n// Layers and the kernel each runs ({}):\n", pass_title);
  for (const auto& k : kernels)
    for (const auto& layer : k.layers)
      h += o.train ? fmt::format("//   {:<28} {:<11} {}  {}\n", layer, k.pass, k.name, k.descriptor.normalised())
                   : fmt::format("//   {:<28} {}  {}\n", layer, k.name, k.descriptor.normalised());
  h += fmt::format("\n#endif  // CONVGEN_MODEL_{}_H\n", name);
  return h;
}

std::string manifest(const std::vector<model::PlannedKernel>& kernels, const Options& o, const std::string& name,
                     const std::string& target, const std::string& model_sha, const model::Graph& g,
                     const std::string& training = "", int64_t calls = 1) {
  std::string j = "{\n";
  j += fmt::format("  \"generated_by\": \"convgen {}\",\n", CONVGEN_VERSION);
  j += fmt::format("  \"regenerate\": \"{}\",\n", json_escape(regenerate_command(o, name, target)));
  j += fmt::format("  \"generator_hash\": \"{}\",\n  \"halide_version\": \"{}\",\n  \"target\": \"{}\",\n",
                   CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION, target);
  // Inference: the batch, and the per-call batch its calls run at (generator/model/batch_split.h).
  j += fmt::format("  \"model\": {{\"file\": \"{}\", \"sha256\": \"{}\", \"opset\": {}, \"batch\": {}{}}},\n",
                   json_escape(fs::path(o.model).filename().string()), model_sha, g.opset, g.batch * calls,
                   training.empty() ? fmt::format(", \"per_call_batch\": {}", g.batch) : std::string());
  if (!training.empty()) j += "  \"training\": " + training + ",\n";
  j += "  \"kernels\": [\n";
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& k = kernels[i];
    std::string layers;
    for (const auto& l : k.layers) layers += (layers.empty() ? "\"" : ", \"") + json_escape(l) + "\"";
    j += fmt::format("    {{\"name\": \"{}\", \"pass\": \"{}\", \"descriptor\": \"{}\", \"schedule\": \"{}\", "
                     "\"schedule_source\": \"{}\", \"layers\": [{}]}}{}\n",
                     k.name, k.pass, k.descriptor.normalised(), describe(k.selection.schedule),
                     json_escape(k.selection.source), layers, i + 1 < kernels.size() ? "," : "");
  }
  j += "  ]\n}\n";
  return j;
}

void run_tool(const std::vector<std::string>& argv, const fs::path& cwd, const fs::path& log) {
  std::vector<ChildJob> jobs(1);
  jobs[0].argv = argv;
  jobs[0].cwd = cwd.string();
  jobs[0].stderr_path = log.string();
  run_jobs(jobs, 1);
  if (jobs[0].exit_code != 0)
    throw Error(ExitCode::MissingDependency,
                fmt::format("{} failed (exit {}): {}", argv[0], jobs[0].exit_code, first_line_of_file(log)));
}

// Generates the kernels and stages them: DIR/NAME.a (one archive of every kernel's
// object, named after the kernel, in name order; ar in deterministic mode: no
// timestamps, uids or modes) and DIR/kernels/K.h.
void stage_kernels(const std::vector<model::PlannedKernel>& kernels, const Options& o, const std::string& target,
                   const std::string& name, const fs::path& stage, std::vector<std::string>* why) {
  const auto dirs = generate_kernels(kernels, o, target, stage, why);
  std::vector<std::string> objects;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const auto& k = kernels[i];
    fs::copy_file(dirs[i] / (k.name + ".h"), stage / "kernels" / (k.name + ".h"), fs::copy_options::overwrite_existing);
    const fs::path unpack = stage / "objects" / k.name;
    make_dirs(unpack);
    run_tool({"/usr/bin/ar", "x", fs::absolute(dirs[i] / (k.name + ".a")).string()}, unpack, stage / "ar.log");
    for (const auto& entry : fs::directory_iterator(unpack)) {
      if (entry.path().extension() != ".o") continue;
      const fs::path object = stage / "objects" / (k.name + ".o");
      fs::rename(entry.path(), object);
      objects.push_back(object.filename().string());
    }
  }
  std::sort(objects.begin(), objects.end());
  std::vector<std::string> ar = {"/usr/bin/ar", "rcsD", (stage / (name + ".a")).string()};
  ar.insert(ar.end(), objects.begin(), objects.end());
  if (!objects.empty()) run_tool(ar, stage / "objects", stage / "ar.log");
}

// Runs `write` into a staging directory inside out_dir, then moves its files into place
// (the files, then the kernels directory as a whole); nothing is left behind on error.
template <typename Write>
void emit_outputs(const fs::path& out_dir, const std::string& name, Write&& write) {
  make_dirs(out_dir);
  const fs::path stage = fs::absolute(out_dir / fmt::format(".convgen-stage-{}", ::getpid()));
  std::error_code ec;
  fs::remove_all(stage, ec);
  make_dirs(stage / "kernels");
  make_dirs(stage / "objects");
  try {
    write(stage);
    for (const std::string& f : {name + ".a", name + ".h", name + ".cpp", name + ".weights", name + ".manifest.json"})
      if (fs::exists(stage / f)) fs::rename(stage / f, out_dir / f);
    fs::remove_all(out_dir / "kernels", ec);
    fs::rename(stage / "kernels", out_dir / "kernels");
    fs::remove_all(stage, ec);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
}

std::vector<int64_t> parse_counts(const std::string& option, const std::string& text) {
  std::vector<int64_t> counts;
  if (text.empty()) return counts;
  size_t begin = 0;
  while (true) {
    const size_t comma = text.find(',', begin);
    counts.push_back(parse_count(option, text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  return counts;
}

int compile_training_driver(const Options& o, const std::string& name, const std::string& target, const TargetInfo& t) {
  model::TrainerOptions topt;
  topt.batch = o.batch.empty() ? 64 : parse_count("--batch", o.batch);
  if (!o.micro_batch.empty()) topt.micro_batch = parse_count("--micro-batch", o.micro_batch);
  std::vector<std::string> why;
  // A training record (`convgen tune --train`) fixes the micro-batch and the modes.
  topt.records = o.schedules;
  const std::optional<TrainingRecord> record = model::apply_training_record(o.model, &topt, t, &why);
  const int64_t m = model::checked_micro_batch(topt);
  const std::vector<int64_t> counts = parse_counts("--samples", o.samples);
  const model::TrainGraph tg = model::prepare_training_graph(o.model, m, &why);

  // The kernels are exactly those the engine asks for (the same requests `convgen
  // train` JIT-compiles).
  const auto requests = model::training_conv_requests(tg, topt, t, counts);

  std::vector<model::PlannedKernel> kernels;
  model::TrainDriverSpec spec;
  spec.name = name;
  spec.cpp_namespace = o.cpp_namespace;
  spec.batch = topt.batch;
  spec.micro_batch = m;
  spec.sample_counts = counts;
  spec.target = target;
  spec.regenerate = regenerate_command(o, name, target);
  if (record) spec.recorded_modes = record->parallel_modes;
  for (const auto& [key, r] : requests) {
    model::TrainKernelRow row;
    row.descriptor = r.descriptor;
    validate(row.descriptor);
    for (const char* pass : {"fwd", "bwd_data", "bwd_weights"}) {
      if (std::string(pass) == "bwd_data" && !r.needs_backward_data) continue;
      if (std::string(pass) == "fwd" && !r.needs_forward) continue;
      std::vector<std::string> lines;
      model::PlannedKernel k;
      k.pass = pass;
      k.descriptor = r.descriptor;
      k.selection = model::training_schedule(r.descriptor, pass, t, o.schedules, &lines);
      k.schedule_overrides = "parallel=" + to_string(k.selection.schedule.parallel);
      k.key = kernel_cache_key(r.descriptor, pass, k.selection.schedule, target);
      k.name = kernel_function_name(pass, k.key);
      k.layers = model::training_layers_of(tg, r.descriptor);
      why.push_back(fmt::format("{} {}: kernel {} (schedule: {})", key, pass, k.name, k.selection.source));
      for (const auto& l : lines) why.push_back("  " + l);
      (std::string(pass) == "fwd" ? row.forward : std::string(pass) == "bwd_data" ? row.backward_data
                                                                                  : row.backward_weights) = k.name;
      kernels.push_back(std::move(k));
    }
    spec.kernels.push_back(row);
  }
  const std::string model_sha = sha256_file_hex(o.model);
  std::string counts_json;
  for (int64_t c : counts) counts_json += (counts_json.empty() ? "" : ", ") + std::to_string(c);
  spec.weights_key = sha256_hex(fmt::format("train|{}|{}|{}|{}|{}|{}|{}", model_sha, topt.batch, m, counts_json,
                                            CONVGEN_GENERATOR_HASH, target, name));

  const fs::path out_dir = o.output_dir.empty() ? fs::path(name) : fs::path(o.output_dir);
  emit_outputs(out_dir, name, [&](const fs::path& stage) {
    stage_kernels(kernels, o, target, name, stage, &why);
    write_weights_file((stage / (name + ".weights")).string(), model::float_constants_blob(tg), spec.weights_key);
    write_file((stage / (name + ".cpp")).string(),
               model::training_driver_source(tg, spec, provenance_lines(o, name, target) + "\n"));
    write_file((stage / (name + ".h")).string(),
               model_header(kernels, o, name, target, model::training_driver_declaration(tg, spec)));
    write_file((stage / (name + ".manifest.json")).string(),
               manifest(kernels, o, name, target, model_sha, tg.graph,
                        fmt::format("{{\"batch\": {}, \"micro_batch\": {}, \"sample_counts\": [{}]}}", topt.batch, m,
                                    counts_json)));
  });
  if (o.verbose)
    for (const auto& line : why) fmt::print(stderr, "convgen: {}\n", line);
  fmt::print("{}: training driver, {} layer shapes x sizes, {} kernels -> {}\n", o.model, spec.kernels.size(),
             kernels.size(), (out_dir / (name + ".a")).string());
  return 0;
}

}  // namespace

int compile_model(const Args& args) {
  Options o;
  OptionReader r(args);
  while (!r.done()) {
    if (r.help_or_version(kUsage)) return 0;
    if (r.value("-o", &o.output_dir) || r.value("--output", &o.output_dir) || r.value("--name", &o.name) ||
        r.value("--batch", &o.batch) || r.value("--target", &o.target) || r.value("--schedules", &o.schedules) ||
        r.value("--jobs", &o.jobs) || r.value("--cache-dir", &o.cache_dir) ||
        r.value("--micro-batch", &o.micro_batch) || r.value("--samples", &o.samples) ||
        r.value("--namespace", &o.cpp_namespace) || r.value("--per-call-batch", &o.per_call_batch))
      continue;
    if (r.flag("--no-cache")) { o.no_cache = true; continue; }
    if (r.flag("--train")) { o.train = true; continue; }
    if (r.flag("--verbose") || r.flag("-v")) { o.verbose = true; continue; }
    if (!o.model.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    o.model = r.positional();
  }
  if (o.model.empty()) throw Error(ExitCode::Usage, "compile: missing MODEL.onnx (see --help)");
  if (!o.train && (!o.micro_batch.empty() || !o.samples.empty()))
    throw Error(ExitCode::Usage, "compile: --micro-batch and --samples need --train");
  if (o.train && !o.per_call_batch.empty())
    throw Error(ExitCode::Usage, "compile: --per-call-batch is for inference drivers (--train takes --micro-batch)");
  const std::string name = o.name.empty() ? identifier_from(fs::path(o.model).stem().string()) : o.name;
  if (!is_c_identifier(name)) throw Error(ExitCode::Usage, fmt::format("--name {}: not a C identifier", name));
  if (o.cpp_namespace.empty()) o.cpp_namespace = "convgen_model_" + name;
  for (size_t begin = 0;;) {
    const size_t sep = o.cpp_namespace.find("::", begin);
    if (!is_c_identifier(o.cpp_namespace.substr(begin, sep == std::string::npos ? std::string::npos : sep - begin)))
      throw Error(ExitCode::Usage, fmt::format("--namespace {}: not a C++ namespace name (identifiers joined by ::)",
                                               o.cpp_namespace));
    if (sep == std::string::npos) break;
    begin = sep + 2;
  }
  // "host" (the default) is resolved here, so provenance, kernel keys and child
  // processes see the actual feature set.
  const TargetInfo t = target_info(o.target.empty() ? "host" : o.target);
  const std::string target = t.target;
  if (o.train) return compile_training_driver(o, name, target, t);
  const int64_t batch = o.batch.empty() ? 1 : parse_count("--batch", o.batch);
  const int64_t per_call_batch = o.per_call_batch.empty() ? 0 : parse_count("--per-call-batch", o.per_call_batch);

  std::vector<std::string> why;
  auto import_at = [&](int64_t b) {
    model::ImportOptions options;
    options.batch = b;
    return model::import_onnx(o.model, options);
  };
  // The batch as calls of a per-call batch where the model allows: g is the per-call model.
  model::SplitModel split = model::split_batch(import_at, batch, per_call_batch, &why);
  const model::Graph& g = split.graph;
  const int64_t calls = split.calls;
  const auto kernels = model::plan_kernels(g, t, o.schedules, &why);
  const std::string model_sha = sha256_file_hex(o.model);

  const fs::path out_dir = o.output_dir.empty() ? fs::path(name) : fs::path(o.output_dir);
  emit_outputs(out_dir, name, [&](const fs::path& stage) {
    stage_kernels(kernels, o, target, name, stage, &why);
    // The driver: the static plan as C++, its weights blob beside it.
    const model::Plan plan = model::make_plan(g, kernels);
    // The kernels' keys too: their schedules (records) decide how packed weights are laid out.
    std::string kernel_keys;
    for (const auto& k : kernels) kernel_keys += k.key + ";";
    const std::string batch_key = calls == 1 ? std::to_string(g.batch) : fmt::format("{}x{}", calls, g.batch);
    const std::string plan_key = sha256_hex(
        fmt::format("{}|{}|{}|{}|{}|{}", model_sha, batch_key, CONVGEN_GENERATOR_HASH, target, name, kernel_keys));
    write_weights_file((stage / (name + ".weights")).string(), model::weights_blob(g, plan), plan_key);
    write_file((stage / (name + ".cpp")).string(),
               model::driver_source(name, g, plan, plan_key, target, provenance_lines(o, name, target) + "\n",
                                     o.cpp_namespace, calls));
    write_file((stage / (name + ".h")).string(),
               model_header(kernels, o, name, target, model::driver_declaration(name, g, plan, o.cpp_namespace, calls)));
    write_file((stage / (name + ".manifest.json")).string(), manifest(kernels, o, name, target, model_sha, g, "", calls));
  });
  if (o.verbose)
    for (const auto& line : why) fmt::print(stderr, "convgen: {}\n", line);
  fmt::print("{}: {} layers, {} kernels -> {}\n", o.model, [&] {
    size_t n = 0;
    for (const auto& k : kernels) n += k.layers.size();
    return n;
  }(), kernels.size(), (out_dir / (name + ".a")).string());
  return 0;
}

}  // namespace convgen::cli
