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

#include "bench/pass_timing.h"
#include "generator/model/batch_split.h"
#include "generator/model/executor.h"
#include "generator/onnx/import.h"
#include "runtime/memory/page_allocation.h"
#include "runtime/probe/fma_probe.h"
#include "schedules/errors.h"

namespace {

const char* kUsage = R"(usage: convgen-model-bench MODEL.onnx [--batch N] [--runs R] [--threads T] [--target T]
                            [--per-call-batch M]

Times MODEL's forward pass at batch N (default 1) through convgen's in-process
executor on T threads (default 1: the convolutions' parallel loops, element-wise ops
and pooling; the same bits for every T) for the kernel target T (default host, as
`convgen run` and `compile` use: the widest this CPU runs): the median of R timed runs
(default 7, each at least 50 ms of repeated passes) after a warm-up; JIT compilation is
not timed. Prints one JSON line: model, batch, threads, target, median ms per pass,
images/s, p50 and p99 latency over every timed pass, the RSS after loading (JIT and
weights), the peak RSS while running (the kernel's high-water mark is reset after
loading, so the peak belongs to the runs) and their difference, arena and weights bytes,
and the FMA probe's GFLOP/s on T threads measured right after (thread scaling's yardstick).
)";

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string path, target = "host";
    int64_t batch = 1, runs = 7, threads = 1, per_call_batch = 0;
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
      else if (a == "--per-call-batch" && i + 1 < argc) per_call_batch = std::stoll(argv[++i]);
      else if (path.empty() && a[0] != '-') path = a;
      else throw convgen::Error(convgen::ExitCode::Usage, "unknown argument " + a + " (see --help)");
    }
    if (path.empty() || batch < 1 || runs < 1 || per_call_batch < 0)
      throw convgen::Error(convgen::ExitCode::Usage, "see --help");
    auto import_at = [&](int64_t b) {
      convgen::model::ImportOptions options;
      options.batch = b;
      return convgen::model::import_onnx(path, options);
    };
    convgen::model::SplitModel split = convgen::model::split_batch(import_at, batch, per_call_batch, nullptr);
    const convgen::TargetInfo t = convgen::target_info(target);
    convgen::model::ModelExecutor exec(std::move(split.graph), t, "", nullptr, static_cast<int>(threads), split.calls);
    std::map<std::string, convgen::Tensor> inputs;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& name : exec.graph().inputs) {
      convgen::Tensor t(exec.batch_shape(name), false);
      for (float& v : t.data) v = normal(rng);
      inputs[name] = std::move(t);
    }
    const convgen::bench::PassTiming timing = convgen::bench::time_passes(runs, [&] { exec.run(inputs); });
    // The machine's own FMA rate on as many threads, right after: the yardstick of thread scaling.
    const double fma_peak = convgen::measure_fma_peak_gflops(static_cast<int>(threads), t.vector_floats);
    fmt::print("{{\"model\": \"{}\", \"engine\": \"convgen\", \"batch\": {}, \"threads\": {}, \"target\": \"{}\", "
               "\"ms\": {:.3f}, \"images_per_s\": {:.1f}, \"p50_ms\": {:.3f}, \"p99_ms\": {:.3f}, "
               "\"load_rss_mib\": {:.1f}, \"peak_rss_mib\": {:.1f}, \"run_rss_mib\": {:.1f}, "
               "\"per_call_batch\": {}, \"calls\": {}, \"arena_bytes\": {}, "
               "\"weights_bytes\": {}, \"fma_peak_gflops\": {:.1f}, \"buffers\": \"{}\"}}\n",
               path, batch, threads, t.target, timing.ms, 1000.0 * batch / timing.ms, timing.p50_ms, timing.p99_ms,
               timing.load_rss_mib, timing.peak_rss_mib, timing.peak_rss_mib - timing.load_rss_mib,
               batch / split.calls, split.calls, exec.arena_floats_allocated() * 4,
               exec.plan().weights_floats * 4, fma_peak, convgen::huge_page_policy());
    return 0;
  } catch (const convgen::Error& e) {
    std::fprintf(stderr, "convgen-model-bench: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgen-model-bench: %s\n", e.what());
    return 1;
  }
}
