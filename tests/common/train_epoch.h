// One epoch of synthetic data through a trainer built from a model file, and the
// thread-count invariance check over it: shared by the trainer's tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "generator/train/trainer_from_model.h"
#include "runtime/data/train_data.h"
#include "runtime/train/trainer.h"
#include "tests/common/train_compare.h"

namespace convgen::test {

// The synthetic data of a training graph: a label per sample, or a label map per sample
// of a segmentation model's [N, K, H, W] logits.
inline data::SampleSpec sample_spec(const model::TrainGraph& tg) {
  data::SampleSpec spec;
  spec.channels = tg.sample_shape[0], spec.height = tg.sample_shape[1], spec.width = tg.sample_shape[2];
  spec.classes = tg.classes;
  if (tg.label_elements > 1) {
    const std::vector<int64_t>& logits = tg.graph.value(tg.logits).shape;
    spec.label_height = logits[2], spec.label_width = logits[3];
  }
  return spec;
}

// The options every epoch below trains with.
// batched_from_weight_bytes < 0 keeps the trainer's default.
inline model::TrainerOptions epoch_options(int64_t batch, int threads, bool intra, int64_t micro_batch = 0,
                                           const std::map<std::string, model::ParallelMode>& modes = {},
                                           int64_t batched_from_weight_bytes = -1) {
  model::TrainerOptions o;
  o.parallel_modes = modes;
  if (batched_from_weight_bytes >= 0) o.batched_from_weight_bytes = batched_from_weight_bytes;
  o.batch = batch;
  o.micro_batch = micro_batch;
  o.threads = threads;
  o.intra_kernel = intra;
  o.lr = 0.01f;
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  o.seed = 7;
  return o;
}

// One epoch over `samples` synthetic samples, shuffled, in mini-batches of the trainer's batch.
inline TrainRun train_epoch(model::Trainer& trainer, int64_t samples) {
  const int64_t batch = trainer.options().batch;
  const auto& tg = trainer.graph();
  const data::SampleSpec spec = sample_spec(tg);
  const data::Dataset set = data::synthetic_dataset(spec, samples, 11, "synthetic");
  const std::vector<int64_t> order = data::epoch_order(samples, 0, true, 7);
  TrainRun run;
  data::Batch b;
  for (int64_t first = 0; first < samples; first += batch) {
    data::decode_batch(set, order, first, std::min(batch, samples - first), data::Normalization{}, &b);
    const model::StepStats s = trainer.train_step(b.pixels.data(), b.labels.data(), b.count);
    run.losses.push_back(s.loss);
    run.correct.push_back(s.correct);
  }
  run.parameters = trainer.parameters();
  run.state = trainer.state_tensors();
  return run;
}

inline TrainRun train_epoch(const std::string& model, int64_t samples, int64_t batch, int threads, bool intra,
                            int64_t micro_batch = 0, const std::map<std::string, model::ParallelMode>& modes = {},
                            int64_t batched_from_weight_bytes = -1) {
  auto trainer = model::make_trainer(
      model, epoch_options(batch, threads, intra, micro_batch, modes, batched_from_weight_bytes), default_target());
  return train_epoch(*trainer, samples);
}

// Every thread count, and intra-kernel parallelism, against one thread.
inline void require_thread_invariance(const std::string& model, int64_t samples, int64_t batch,
                                      int64_t micro_batch = 0, int64_t batched_from_weight_bytes = -1) {
  const TrainRun one = train_epoch(model, samples, batch, 1, false, micro_batch, {}, batched_from_weight_bytes);
  for (double l : one.losses) REQUIRE(std::isfinite(l));
  for (int threads : {2, 3, 4}) {
    INFO("threads " << threads);
    require_identical(one, train_epoch(model, samples, batch, threads, false, micro_batch, {}, batched_from_weight_bytes));
  }
  INFO("intra-kernel parallelism on 2 threads");
  require_identical(one, train_epoch(model, samples, batch, 2, true, micro_batch, {}, batched_from_weight_bytes));
}

}  // namespace convgen::test
