// Times a generated model driver (`convgen compile`'s Model::forward, built by
// convgen_add_model) with bench/pass_timing.h's method and prints one JSON line in
// convgen-model-bench's format, engine "convgen-driver". Threads: OMP_NUM_THREADS.
//   usage: driver_bench --runs R --threads T
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "bench/pass_timing.h"
#include "bench_model.h"

int main(int argc, char** argv) try {
  long runs = 7, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--runs") runs = std::atol(argv[i + 1]);
    else if (a == "--threads") threads = std::atol(argv[i + 1]);
    else {
      std::fprintf(stderr, "driver_bench: unknown argument %s (usage: driver_bench --runs R --threads T)\n", a.c_str());
      return 2;
    }
  }
  using bench_model::Model;
  Model model(BENCH_MODEL_WEIGHTS_FILE);
  std::vector<std::vector<float>> inputs, outputs;
  std::vector<const float*> in_ptrs;
  std::vector<float*> out_ptrs;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t n : Model::kInputElements) {
    inputs.emplace_back(static_cast<size_t>(n));
    for (float& v : inputs.back()) v = normal(rng);
    in_ptrs.push_back(inputs.back().data());
  }
  for (int64_t n : Model::kOutputElements) {
    outputs.emplace_back(static_cast<size_t>(n));
    out_ptrs.push_back(outputs.back().data());
  }
  const long batch = BENCH_BATCH;
  const convgen::bench::PassTiming t =
      convgen::bench::time_passes(runs, [&] { model.forward(in_ptrs.data(), out_ptrs.data()); });
  std::printf("{\"model\": \"%s\", \"engine\": \"convgen-driver\", \"batch\": %ld, \"threads\": %ld, \"target\": \"%s\", "
              "\"ms\": %.3f, \"images_per_s\": %.1f, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"load_rss_mib\": %.1f, "
              "\"peak_rss_mib\": %.1f, \"run_rss_mib\": %.1f}\n",
              BENCH_MODEL_PATH, batch, threads, BENCH_TARGET, t.ms, 1000.0 * batch / t.ms, t.p50_ms, t.p99_ms,
              t.load_rss_mib, t.peak_rss_mib, t.peak_rss_mib - t.load_rss_mib);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "driver_bench: %s\n", e.what());
  return 1;
}
