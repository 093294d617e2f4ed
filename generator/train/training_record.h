// Applying a training record (`convgen tune --train`, schedules/schedule_records.h): the
// micro-batch size and Conv layers' parallel modes tuned for one model file, batch and
// target. `convgen train`, `compile --train` and `tune --train` all set their trainer
// options through this, so they run the configuration the record chose.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/train/trainer.h"
#include "schedules/schedule_records.h"

namespace convgen::model {

// The key of `model_path` (its bytes' SHA-256) at options.batch on target t.
TrainingKey training_key(const std::string& model_path, const TrainerOptions& options, const TargetInfo& t);

// Reads options.records (nothing to do when it is ""); if it holds a training record for
// this key, sets options->micro_batch and options->recorded_modes from it -- unless the
// caller fixed another micro-batch (options->micro_batch != 0 and different), in which
// case the record is not used and `why` says so. Returns the record applied, or nothing.
// Errors: Io / BadRecord naming the records file and line.
std::optional<TrainingRecord> apply_training_record(const std::string& model_path, TrainerOptions* options,
                                                    const TargetInfo& t, std::vector<std::string>* why);

// The record's modes as the trainer takes them.
std::map<std::string, ParallelMode> parallel_modes_of(const TrainingRecord& r);

}  // namespace convgen::model
