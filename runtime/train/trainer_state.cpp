#include "runtime/train/trainer_state.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/train/onnx_weights.h"
#include "schedules/errors.h"
#include "schedules/sha256.h"

namespace convgen::model {

namespace {

std::string driver_options_key(const Trainer& trainer, const std::string& weights_key) {
  const TrainerOptions& o = trainer.options();
  return fmt::format("driver={} batch={} micro_batch={} execution={} momentum={:.9g} weight_decay={:.9g} seed={}",
                     weights_key, o.batch, o.micro_batch, trainer.execution_key(), o.momentum, o.weight_decay, o.seed);
}

}  // namespace

std::vector<float> float_constants_blob(const TrainGraph& tg) {
  std::vector<float> blob;
  for (const auto& entry : tg.graph.values)
    if (entry.second.is_float_constant()) blob.insert(blob.end(), entry.second.data.begin(), entry.second.data.end());
  return blob;
}

std::vector<float> current_weights_blob(const Trainer& trainer) {
  std::map<std::string, const std::vector<float>*> current;
  for (const Parameter& p : trainer.parameters()) current[p.name] = &p.value;
  const auto state = trainer.state_tensors();
  for (const auto& [name, data] : state) current[name] = &data;
  std::vector<float> blob;
  for (const auto& [name, v] : trainer.graph().graph.values) {
    if (!v.is_float_constant()) continue;
    auto it = current.find(name);
    const std::vector<float>& data = it == current.end() ? v.data : *it->second;
    blob.insert(blob.end(), data.begin(), data.end());
  }
  return blob;
}

void load_onnx_weights(Trainer& trainer, const std::string& path) {
  const std::map<std::string, OnnxInitializer> inits = read_onnx_initializers(path);
  auto find = [&](const std::string& name, const std::vector<int64_t>& shape, size_t elements) -> const OnnxInitializer& {
    auto it = inits.find(name);
    if (it == inits.end())
      throw Error(ExitCode::BadData, fmt::format("{}: no float initializer '{}' (a tensor the model trains)", path, name));
    // Element counts, not shapes: import may view a tensor in another shape (PRelu's
    // per-channel slope and InstanceNormalization's scale and bias as [C, 1, ...]).
    (void)shape;
    if (it->second.data.size() != elements)
      throw Error(ExitCode::BadData, fmt::format("{}: initializer '{}' has {} elements of shape [{}], the model's has {}",
                                                 path, name, it->second.data.size(),
                                                 fmt::join(it->second.shape, ","), elements));
    return it->second;
  };
  // Check everything before changing anything: a bad file leaves the trainer as it was.
  for (const Parameter& p : trainer.parameters()) find(p.name, p.shape, p.value.size());
  const auto state = trainer.state_tensors();
  for (const auto& [name, data] : state) find(name, {}, data.size());
  for (Parameter& p : trainer.parameters()) p.value = find(p.name, p.shape, p.value.size()).data;
  for (const auto& [name, data] : state) trainer.set_state_tensor(name, find(name, {}, data.size()).data);
}

train::Checkpoint make_checkpoint(const Trainer& trainer, const std::string& model_hash, const std::string& options_key,
                                  int64_t step, int64_t epoch, int64_t position, uint64_t seed, double lr) {
  train::Checkpoint c;
  c.model_sha256 = model_hash;
  c.options_text = options_key;
  c.options_hash = sha256_hex(options_key);
  c.step = step, c.epoch = epoch, c.position = position, c.seed = seed, c.lr = lr;
  for (const Parameter& p : trainer.parameters()) {
    c.tensors.push_back({p.name, "value", p.shape, p.value});
    c.tensors.push_back({p.name, "momentum", p.shape, p.momentum});
  }
  for (const auto& [name, data] : trainer.state_tensors())
    c.tensors.push_back({name, "state", {static_cast<int64_t>(data.size())}, data});
  return c;
}

void restore_checkpoint(const train::Checkpoint& c, const std::string& path, const std::string& model_hash,
                        const std::string& options_key, Trainer& trainer) {
  if (c.model_sha256 != model_hash)
    throw Error(ExitCode::BadData, fmt::format("{}: the checkpoint was written for another model file", path));
  if (c.options_hash != sha256_hex(options_key))
    throw Error(ExitCode::BadData, fmt::format("{}: the checkpoint was written with other options ({}; now {})", path,
                                               c.options_text, options_key));
  std::map<std::string, Parameter*> by_name;
  for (Parameter& p : trainer.parameters()) by_name[p.name] = &p;
  size_t restored = 0;
  for (const train::CheckpointTensor& t : c.tensors) {
    if (t.kind == "state") {
      trainer.set_state_tensor(t.name, t.data);
      ++restored;
      continue;
    }
    auto it = by_name.find(t.name);
    if (it == by_name.end() || it->second->value.size() != t.data.size())
      throw Error(ExitCode::BadData, fmt::format("{}: tensor '{}' does not match the model", path, t.name));
    (t.kind == "value" ? it->second->value : it->second->momentum) = t.data;
    ++restored;
  }
  if (restored != 2 * trainer.parameters().size() + trainer.state_tensors().size())
    throw Error(ExitCode::BadData, fmt::format("{}: the checkpoint lacks some of the model's tensors", path));
  trainer.set_steps_taken(c.step);
}

void save_driver_checkpoint(const Trainer& trainer, const std::string& dir, const std::string& weights_key,
                            int64_t epoch, int64_t position) {
  const TrainerOptions& o = trainer.options();
  train::save_checkpoint(dir, make_checkpoint(trainer, weights_key, driver_options_key(trainer, weights_key),
                                              trainer.steps_taken(), epoch, position, o.seed, o.lr));
}

std::pair<int64_t, int64_t> load_driver_checkpoint(Trainer& trainer, const std::string& dir,
                                                   const std::string& weights_key) {
  const train::Checkpoint c = train::load_checkpoint(dir);
  restore_checkpoint(c, train::checkpoint_path(dir), weights_key, driver_options_key(trainer, weights_key), trainer);
  trainer.set_learning_rate(static_cast<float>(c.lr));
  return {c.epoch, c.position};
}

}  // namespace convgen::model
