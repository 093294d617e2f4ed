// convgen compile: an ONNX model in, its kernels out -- one static library, a header and
// a provenance manifest. Kernels are generated one child process each (byte-
// reproducible), in parallel, through a content-addressed cache.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "build_info.h"
#include "cli.h"
#include "errors.h"
#include "model_fusion.h"
#include "model_driver_codegen.h"
#include "model_kernels.h"
#include "model_plan.h"
#include "onnx_import.h"
#include "sha256.h"
#include "subprocess.h"
#include "weights_file.h"

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
convgen::runtime (model_runtime.h, ops.h).

  -o, --output DIR     output directory (default: NAME in the current directory)
  --name NAME          model name, a C identifier (default: the file's stem)
  --batch N            batch size bound to a dynamic batch dimension (default 1)
  --target STRING      Halide target (default x86-64-linux-avx-avx2-f16c-fma-sse41)
  --schedules FILE     schedule records (JSON lines); a matching record wins over the
                       analytic default
  --jobs J             kernels generated in parallel (default: the number of CPUs)
  --cache-dir DIR      kernel cache (default $CONVGEN_CACHE_DIR, else
                       $XDG_CACHE_HOME/convgen, else ~/.cache/convgen)
  --no-cache           generate every kernel afresh (and do not store it)
  --verbose            say per layer which kernel, schedule source and fusions were chosen
  --help, --version
)";

struct Options {
  std::string model, output_dir, name, batch, target, schedules, jobs, cache_dir;
  bool no_cache = false, verbose = false;
};

std::string identifier_from(const std::string& stem) {
  std::string id;
  for (char c : stem) id += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id[0]))) id = "model_" + id;
  return id;
}


fs::path default_cache_dir() {
  if (const char* d = std::getenv("CONVGEN_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return fs::path(d) / "convgen";
  if (const char* d = std::getenv("HOME"); d && *d) return fs::path(d) / ".cache" / "convgen";
  return fs::temp_directory_path() / "convgen-cache";
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

// A kernel's cache entry: its directory holds K.a, K.h and K.manifest.json.
fs::path cache_entry(const fs::path& cache, const model::PlannedKernel& k) {
  return cache / "kernels" / sha256_hex(k.key).substr(0, 32);
}

// Generates the kernels missing from the cache (or all of them into `scratch` with
// --no-cache); returns the directory holding each kernel's files.
std::vector<fs::path> generate_kernels(const std::vector<model::PlannedKernel>& kernels, const Options& o,
                                       const std::string& target, const fs::path& scratch,
                                       std::vector<std::string>* why) {
  const fs::path cache = o.cache_dir.empty() ? default_cache_dir() : fs::path(o.cache_dir);
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
        why->push_back(fmt::format("kernel {}: from the cache ({})", k.name, where[i].string()));
        continue;
      }
    }
    const fs::path dir = scratch / ("gen-" + k.name);
    make_dirs(dir);
    ChildJob job;
    job.argv = {self, "compile-layer", k.descriptor.normalised(), "--pass", k.pass, "--name", k.name, "--target",
                target, "--no-runtime", "-o", dir.string()};
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
    // Publish into the cache with one rename; a concurrent compile that got there
    // first wins and this copy is dropped (both are the same bytes).
    const fs::path entry = where[job_kernel[j]];
    make_dirs(entry.parent_path());
    std::error_code ec;
    fs::rename(job_dir[j], entry, ec);
    if (ec && !fs::exists(entry / (k.name + ".a")))
      throw Error(ExitCode::Io, fmt::format("{}: cannot store the kernel in the cache: {}", entry.string(), ec.message()));
  }
  return where;
}

std::string provenance_lines(const Options& o, const std::string& name, const std::string& target) {
  return fmt::format(
      "// Generated by convgen {} -- do not edit.\n"
      "// Regenerate with: convgen compile {} --name {} --batch {} --target {}{}\n"
      "// Generator content hash: {}; Halide {}\n",
      CONVGEN_VERSION, fs::path(o.model).filename().string(), name, o.batch.empty() ? "1" : o.batch, target,
      o.schedules.empty() ? "" : " --schedules <records>", CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION);
}

std::string model_header(const std::vector<model::PlannedKernel>& kernels, const Options& o, const std::string& name,
                         const std::string& target, const std::string& driver) {
  std::string h = provenance_lines(o, name, target);
  h += fmt::format("#ifndef CONVGEN_MODEL_{0}_H\n#define CONVGEN_MODEL_{0}_H\n\n", name);
  h += driver + "\n";
  for (const auto& k : kernels) h += fmt::format("#include \"kernels/{}.h\"\n", k.name);
  h += "\n// Layers and the kernel each runs (forward pass):\n";
  for (const auto& k : kernels)
    for (const auto& layer : k.layers) h += fmt::format("//   {:<28} {}  {}\n", layer, k.name, k.descriptor.normalised());
  h += fmt::format("\n#endif  // CONVGEN_MODEL_{}_H\n", name);
  return h;
}

std::string manifest(const std::vector<model::PlannedKernel>& kernels, const Options& o, const std::string& name,
                     const std::string& target, const std::string& model_sha, const model::Graph& g) {
  std::string j = "{\n";
  j += fmt::format("  \"generated_by\": \"convgen {}\",\n", CONVGEN_VERSION);
  j += fmt::format("  \"regenerate\": \"convgen compile {} --name {} --batch {} --target {}{}\",\n",
                   json_escape(fs::path(o.model).filename().string()), name, g.batch, target,
                   o.schedules.empty() ? "" : " --schedules <records>");
  j += fmt::format("  \"generator_hash\": \"{}\",\n  \"halide_version\": \"{}\",\n  \"target\": \"{}\",\n",
                   CONVGEN_GENERATOR_HASH, CONVGEN_HALIDE_VERSION, target);
  j += fmt::format("  \"model\": {{\"file\": \"{}\", \"sha256\": \"{}\", \"opset\": {}, \"batch\": {}}},\n",
                   json_escape(fs::path(o.model).filename().string()), model_sha, g.opset, g.batch);
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

}  // namespace

int compile_model(const Args& args) {
  Options o;
  OptionReader r(args);
  while (!r.done()) {
    if (r.flag("--help") || r.flag("-h")) {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (r.flag("--version")) {
      print_version();
      return 0;
    }
    if (r.value("-o", &o.output_dir) || r.value("--output", &o.output_dir) || r.value("--name", &o.name) ||
        r.value("--batch", &o.batch) || r.value("--target", &o.target) || r.value("--schedules", &o.schedules) ||
        r.value("--jobs", &o.jobs) || r.value("--cache-dir", &o.cache_dir))
      continue;
    if (r.flag("--no-cache")) { o.no_cache = true; continue; }
    if (r.flag("--verbose") || r.flag("-v")) { o.verbose = true; continue; }
    if (!o.model.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    o.model = r.positional();
  }
  if (o.model.empty()) throw Error(ExitCode::Usage, "compile: missing MODEL.onnx (see --help)");
  const std::string name = o.name.empty() ? identifier_from(fs::path(o.model).stem().string()) : o.name;
  if (!is_c_identifier(name)) throw Error(ExitCode::Usage, fmt::format("--name {}: not a C identifier", name));
  const std::string target = o.target.empty() ? default_target().target : o.target;
  const TargetInfo t = target_info(target);
  model::ImportOptions import;
  if (!o.batch.empty()) import.batch = parse_count("--batch", o.batch);

  std::vector<std::string> why;
  model::Graph g = model::import_onnx(o.model, import);
  model::fuse_for_inference(g, &why);
  const auto kernels = model::plan_kernels(g, t, o.schedules, &why);
  const std::string model_sha = sha256_file_hex(o.model);

  const fs::path out_dir = o.output_dir.empty() ? fs::path(name) : fs::path(o.output_dir);
  make_dirs(out_dir);
  const fs::path stage = fs::absolute(out_dir / fmt::format(".convgen-stage-{}", ::getpid()));
  std::error_code ec;
  fs::remove_all(stage, ec);
  make_dirs(stage / "kernels");
  make_dirs(stage / "objects");
  try {
    const auto dirs = generate_kernels(kernels, o, target, stage, &why);
    // One archive of every kernel's object, named after the kernel, in name order;
    // ar runs in deterministic mode (no timestamps, uids or modes).
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
    // The driver: the static plan as C++, its weights blob beside it.
    const model::Plan plan = model::make_plan(g, kernels);
    const std::string plan_key =
        sha256_hex(fmt::format("{}|{}|{}|{}|{}", model_sha, g.batch, CONVGEN_GENERATOR_HASH, target, name));
    write_weights_file((stage / (name + ".weights")).string(), model::weights_blob(g, plan), plan_key);
    write_file((stage / (name + ".cpp")).string(),
               model::driver_source(name, g, plan, plan_key, provenance_lines(o, name, target) + "\n"));
    write_file((stage / (name + ".h")).string(),
               model_header(kernels, o, name, target, model::driver_declaration(name, g, plan)));
    write_file((stage / (name + ".manifest.json")).string(), manifest(kernels, o, name, target, model_sha, g));
    // Move into place: the files, then the kernels directory as a whole.
    for (const std::string& f : {name + ".a", name + ".h", name + ".cpp", name + ".weights", name + ".manifest.json"})
      if (fs::exists(stage / f)) fs::rename(stage / f, out_dir / f);
    fs::remove_all(out_dir / "kernels", ec);
    fs::rename(stage / "kernels", out_dir / "kernels");
    fs::remove_all(stage, ec);
  } catch (...) {
    fs::remove_all(stage, ec);
    throw;
  }
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
