#include "generator/train/training_record.h"

#include <fmt/format.h>

#include "schedules/sha256.h"

namespace convgen::model {

TrainingKey training_key(const std::string& model_path, const TrainerOptions& options, const TargetInfo& t) {
  return TrainingKey{sha256_file_hex(model_path), options.batch, t.target};
}

std::map<std::string, ParallelMode> parallel_modes_of(const TrainingRecord& r) {
  std::map<std::string, ParallelMode> modes;
  for (const auto& [node, mode] : r.parallel_modes)
    modes[node] = mode == "whole-batch" ? ParallelMode::WholeBatch : ParallelMode::MicroBatch;
  return modes;
}

std::optional<TrainingRecord> apply_training_record(const std::string& model_path, TrainerOptions* options,
                                                    const TargetInfo& t, std::vector<std::string>* why) {
  if (options->records.empty()) return std::nullopt;
  std::vector<TrainingRecord> training;
  read_records(options->records, nullptr, &training);
  const TrainingKey key = training_key(model_path, *options, t);
  const TrainingRecord* r = find_training_record(training, key);
  if (!r) {
    if (why)
      why->push_back(fmt::format("{}: no training record for this model at batch {} on {}: the trainer's own "
                                 "micro-batch and parallel modes",
                                 options->records, key.batch, key.target));
    return std::nullopt;
  }
  if (options->micro_batch != 0 && options->micro_batch != r->micro_batch) {
    if (why)
      why->push_back(fmt::format("{}: its training record is for micro-batch {}; --micro-batch {} was given, so "
                                 "the record is not used",
                                 options->records, r->micro_batch, options->micro_batch));
    return std::nullopt;
  }
  options->micro_batch = r->micro_batch;
  options->recorded_modes = parallel_modes_of(*r);
  options->recorded_modes_source = fmt::format("the training record in {}", options->records);
  if (why)
    why->push_back(fmt::format("{}: training record applied: micro-batch {} and the parallel modes below (tuned on "
                               "{}, {} thread(s): {:.3g} GF/s per step against {:.3g} untuned)",
                               options->records, r->micro_batch, r->tuning.provenance.cpu,
                               r->tuning.provenance.threads, r->gflops, r->tuning.default_gflops));
  return *r;
}

}  // namespace convgen::model
