// convgen-model-bench: times whole-model inference through the in-process executor
// (generator/model/executor.h: the compiled driver's plan, kernels and operators), JIT
// compilation excluded. Prints one JSON line; scripts/bench-models puts it beside
// PyTorch on the same model.
#include <sys/resource.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstdio>
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
executor on T threads (default 1; convolutions run their intra-kernel parallel
variant, the other layers one thread) for the kernel target T (default host, as
`convgen run` and `compile` use: the widest this CPU runs): the median of R timed runs
(default 7, each at least 50 ms of repeated passes) after a warm-up; JIT compilation is
not timed. Prints one JSON line: model, batch, threads, target, ms per pass, images/s,
peak RSS (MiB), arena and weights bytes.
)";

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
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
    exec.run(inputs);  // warm-up: first touch of the arena and weights
    std::vector<double> ms;
    for (int64_t r = 0; r < runs; ++r) {
      int reps = 0;
      const auto start = std::chrono::steady_clock::now();
      double elapsed = 0;
      do {
        exec.run(inputs);
        ++reps;
        elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      } while (elapsed < 50.0);
      ms.push_back(elapsed / reps);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    fmt::print("{{\"model\": \"{}\", \"engine\": \"convgen\", \"batch\": {}, \"threads\": {}, \"target\": \"{}\", "
               "\"ms\": {:.3f}, \"images_per_s\": {:.1f}, \"peak_rss_mib\": {:.1f}, \"arena_bytes\": {}, "
               "\"weights_bytes\": {}}}\n",
               path, batch, threads, t.target, median, 1000.0 * batch / median, peak_rss_mib(), exec.plan().arena_floats * 4,
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
