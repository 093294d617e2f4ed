// convgen-train-bench: times training steps of the batch-parallel trainer
// (runtime/train/trainer.h) on pre-decoded synthetic data, JIT compilation and data decoding
// excluded. Prints one JSON line; scripts/bench-train runs it beside PyTorch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "generator/train/trainer_from_model.h"
#include "runtime/data/train_data.h"
#include "runtime/memory/page_allocation.h"
#include "runtime/probe/fma_probe.h"
#include "runtime/train/trainer.h"
#include "schedules/errors.h"

namespace {

const char* kUsage = R"(usage: convgen-train-bench MODEL.onnx [options]

Trains MODEL on random data (4 pre-decoded mini-batches, cycled) and times it: W warm-up
steps, then R timed runs of S steps each (median reported). Prints one JSON line:
images/s, ms per step, the step's efficiency -- the nominal flops of the convolution and
GEMM passes it executes / step time / (FMA peak x T), the peak measured in the same
process -- RSS after the model and data are set up and peak RSS above it.

  --batch B          mini-batch (default 64)
  --micro-batch M    (default: the trainer's)
  --threads T        (default 1)
  --steps S          steps per timed run (default 20)
  --runs R           (default 3)
  --warmup W         (default 5)
  --conv-impl I      generated (default) or im2col-blis
  --target STRING    Halide target of the generated kernels (default convgen's AVX2
                     one), or host (efficiency stays against the AVX2 FMA probe)
  --schedules FILE   schedule records (convgen tune --train) for the generated kernels
  --intra-kernel     micro-batches in sequence, kernels parallel inside
  --parallel-mode S  Conv layers' parallel modes, NODE=MODE,... (convgen train --help)
  --profile          per node and pass: thread-seconds per step, then the step's parts
                     (phases, combines, whole-batch dW, reduce+update, idle) (on stderr)
)";

double status_mib(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0.0;
}

// Resets the peak RSS (VmHWM) to the current RSS, so later peaks exclude set-up (JIT).
void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string path;
    convgen::model::TrainerOptions o;
    o.lr = 0.001f;
    o.momentum = 0.9f;
    o.weight_decay = 5e-4f;
    int64_t steps = 20, runs = 3, warmup = 5;
    std::string target;  // "" = convgen's default
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw convgen::Error(convgen::ExitCode::Usage, a + " needs a value (see --help)");
        return argv[++i];
      };
      if (a == "--help" || a == "-h") {
        std::printf("%s", kUsage);
        return 0;
      }
      if (a == "--batch") o.batch = std::stoll(next());
      else if (a == "--micro-batch") o.micro_batch = std::stoll(next());
      else if (a == "--threads") o.threads = std::stoi(next());
      else if (a == "--steps") steps = std::stoll(next());
      else if (a == "--runs") runs = std::stoll(next());
      else if (a == "--warmup") warmup = std::stoll(next());
      else if (a == "--conv-impl") o.conv_impl = next();
      else if (a == "--target") target = next();
      else if (a == "--schedules") o.records = next();
      else if (a == "--intra-kernel") o.intra_kernel = true;
      else if (a == "--parallel-mode") o.parallel_modes = convgen::model::parse_parallel_modes(next());
      else if (a == "--profile") o.profile = true;
      else if (path.empty() && a[0] != '-') path = a;
      else throw convgen::Error(convgen::ExitCode::Usage, "unknown argument " + a + " (see --help)");
    }
    if (path.empty() || steps < 1 || runs < 1) throw convgen::Error(convgen::ExitCode::Usage, "see --help");
    const convgen::TargetInfo target_info =
        target.empty() ? convgen::default_target() : convgen::target_info(target);
    // The peak of the same vector width as the kernels (AVX-512 targets: 16 lanes).
    const double peak = convgen::measure_fma_peak_gflops(o.threads, target_info.vector_floats);
    auto trainer_owned = convgen::model::make_trainer(path, o, target_info);
    convgen::model::Trainer& trainer = *trainer_owned;
    const auto& tg = trainer.graph();
    convgen::data::SampleSpec spec;
    spec.channels = tg.sample_shape[0], spec.height = tg.sample_shape[1], spec.width = tg.sample_shape[2];
    spec.classes = tg.classes;
    const int64_t batches = 4;
    const convgen::data::Dataset set = convgen::data::synthetic_dataset(spec, batches * o.batch, 1, "synthetic");
    const std::vector<int64_t> order = convgen::data::epoch_order(set.count(), 0, false, 0);
    std::vector<convgen::data::Batch> data(batches);
    for (int64_t b = 0; b < batches; ++b)
      convgen::data::decode_batch(set, order, b * o.batch, o.batch, convgen::data::Normalization{}, &data[b]);
    trainer.prepare(o.batch);  // kernels are part of the model's set-up, not of training
    reset_peak_rss();
    const double base = status_mib("VmRSS");
    int64_t k = 0;
    auto step = [&] {
      const auto& b = data[k++ % batches];
      trainer.train_step(b.pixels.data(), b.labels.data(), b.count);
    };
    for (int64_t i = 0; i < warmup; ++i) step();
    std::vector<double> seconds;
    for (int64_t r = 0; r < runs; ++r) {
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < steps; ++i) step();
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps);
    }
    if (o.profile) {
      const double total_steps = double(warmup + runs * steps);
      for (const auto& t : trainer.profile())
        fmt::print(stderr, "{:<24} {:<20} {:<10} {:8.3f} ms/step\n", t.node, t.op, t.pass, 1e3 * t.seconds / total_steps);
    }
    std::sort(seconds.begin(), seconds.end());
    const double per_step = seconds[seconds.size() / 2];
    const double flops = trainer.step_flops(o.batch);
    fmt::print("{{\"model\": \"{}\", \"engine\": \"convgen\", \"conv_impl\": \"{}\", \"schedules\": \"{}\", "
               "\"batch\": {}, \"micro_batch\": {}, "
               "\"threads\": {}, \"steps\": {}, \"runs\": {}, \"ms_per_step\": {:.3f}, \"images_per_s\": {:.1f}, "
               "\"step_gflop\": {:.4f}, \"fma_peak_gflops\": {:.1f}, \"efficiency\": {:.3f}, "
               "\"rss_after_load_mib\": {:.1f}, \"peak_rss_above_load_mib\": {:.1f}, \"buffers\": \"{}\"}}\n",
               path, o.conv_impl, o.records, o.batch, trainer.micro_batch(), o.threads, steps, runs, per_step * 1e3,
               double(o.batch) / per_step, flops * 1e-9, peak, flops / per_step / (peak * 1e9), base,
               status_mib("VmHWM") - base, convgen::huge_page_policy());
    return 0;
  } catch (const convgen::Error& e) {
    std::fprintf(stderr, "convgen-train-bench: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convgen-train-bench: %s\n", e.what());
    return 1;
  }
}
