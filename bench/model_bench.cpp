// convgen-model-bench: times whole-model inference through the in-process executor
// (generator/model/executor.h: the compiled driver's plan, kernels and operators), JIT
// compilation excluded. Prints one JSON line; scripts/bench-models puts it beside
// PyTorch on the same model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "schedules/errors.h"

namespace {

const char* kUsage = R"(usage: convgen-model-bench MODEL.onnx [--batch N] [--runs R] [--threads T] [--target T]

Times MODEL's forward pass at batch N (default 1) through convgen's in-process
executor on T threads (default 1: the convolutions' parallel loops, element-wise ops
and pooling; the same bits for every T) for the kernel target T (default host, as
`convgen run` and `compile` use: the widest this CPU runs): the median of R timed runs
(default 7, each at least 50 ms of repeated passes) after a warm-up; JIT compilation is
not timed. Prints one JSON line: model, batch, threads, target, median ms per pass,
images/s, p50 and p99 latency over every timed pass, the RSS after loading (JIT and
weights), the peak RSS while running (the kernel's high-water mark is reset after
loading, so the peak belongs to the runs) and their difference, arena and weights bytes.
)";

// VmRSS or VmHWM of /proc/self/status in MiB (NaN where absent).
double proc_status_mib(const char* field) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return std::nan("");
  char line[256];
  double mib = std::nan("");
  const size_t n = std::strlen(field);
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, field, n) == 0 && line[n] == ':') mib = std::strtod(line + n + 1, nullptr) / 1024.0;
  std::fclose(f);
  return mib;
}

// Resets the peak-RSS mark (Linux >= 4.0); without it the peak includes loading.
void reset_peak_rss() {
  if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);
    std::fclose(f);
  }
}

double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<int64_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size()))) - 1;
  return sorted[static_cast<size_t>(std::clamp<int64_t>(rank, 0, static_cast<int64_t>(sorted.size()) - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string path, target = "host";
    int64_t batch = 1, runs = 7, threads = 1;
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "--help" || a == "-h") {
        std::printf("%s", kUsage);
        return 0;
      }
      if (a == "--batch" && i + 1 < argc) batch = std::stoll(argv[++i]);
      else if (a == "--runs" && i + 1 < argc) runs = std::stoll(argv[++i]);
      else if (a == "--threads" && i + 1 < argc) threads = std::stoll(argv[++i]);
      else if (a == "--target" && i + 1 < argc) target = argv[++i];
      else if (path.empty() && a[0] != '-') path = a;
      else throw convgen::Error(convgen::ExitCode::Usage, "unknown argument " + a + " (see --help)");
    }
    if (path.empty() || batch < 1 || runs < 1) throw convgen::Error(convgen::ExitCode::Usage, "see --help");
    convgen::model::ImportOptions options;
    options.batch = batch;
    convgen::model::Graph g = convgen::model::import_onnx(path, options);
    convgen::model::fuse_for_inference(g);
    const convgen::TargetInfo t = convgen::target_info(target);
    convgen::model::ModelExecutor exec(std::move(g), t, "", nullptr, static_cast<int>(threads));
    std::map<std::string, convgen::Tensor> inputs;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& name : exec.graph().inputs) {
      convgen::Tensor t(exec.graph().value(name).shape, false);
      for (float& v : t.data) v = normal(rng);
      inputs[name] = std::move(t);
    }
    const double load_rss = proc_status_mib("VmRSS");
    reset_peak_rss();
    exec.run(inputs);  // warm-up: first touch of the arena
    std::vector<double> ms, passes;
    using Clock = std::chrono::steady_clock;
    for (int64_t r = 0; r < runs; ++r) {
      int reps = 0;
      const auto start = Clock::now();
      double elapsed = 0;
      do {
        const auto t0 = Clock::now();
        exec.run(inputs);
        const auto t1 = Clock::now();
        passes.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        ++reps;
        elapsed = std::chrono::duration<double, std::milli>(t1 - start).count();
      } while (elapsed < 50.0);
      ms.push_back(elapsed / reps);
    }
    std::sort(ms.begin(), ms.end());
    std::sort(passes.begin(), passes.end());
    const double median = ms[ms.size() / 2];
    const double peak_rss = std::max(proc_status_mib("VmHWM"), load_rss);
    fmt::print("{{\"model\": \"{}\", \"engine\": \"convgen\", \"batch\": {}, \"threads\": {}, \"target\": \"{}\", "
               "\"ms\": {:.3f}, \"images_per_s\": {:.1f}, \"p50_ms\": {:.3f}, \"p99_ms\": {:.3f}, "
               "\"load_rss_mib\": {:.1f}, \"peak_rss_mib\": {:.1f}, \"run_rss_mib\": {:.1f}, \"arena_bytes\": {}, "
               "\"weights_bytes\": {}}}\n",
               path, batch, threads, t.target, median, 1000.0 * batch / median, percentile(passes, 50),
               percentile(passes, 99), load_rss, peak_rss, peak_rss - load_rss, exec.plan().arena_floats * 4,
               exec.plan().weights_floats * 4);
    return 0;
  } catch (const convgen::Error& e) {
    std::fprintf(stderr, "convgen-model-bench: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgen-model-bench: %s\n", e.what());
    return 1;
  }
}
