// Runs a model graph through the executor on integer-valued inputs, fused for inference or
// as written: for tests that compare a graph rewrite with the graph it replaces, where
// integer data makes every sum exact in any order.
#pragma once

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "generator/model/executor.h"
#include "generator/model/fusion.h"
#include "tests/common/integer_valued.h"
#include "tests/common/onnx_test_models.h"

namespace convgen::test {

// A float initializer of integers in [-2, 2] (weights whose products stay exact).
inline void integer_initializer(OnnxModelBuilder& b, const std::string& name, const std::vector<int64_t>& shape,
                                unsigned seed) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  b.float_initializer(name, shape, integer_floats(static_cast<size_t>(n), -2, 2, seed));
}

// Every graph input gets integers in [-3, 3] (input i from seed 7 + i); `edit` may change
// them before the run.
inline std::vector<Tensor> run_on_integers(model::Graph g, bool fuse, int threads,
                                           const std::function<void(std::map<std::string, Tensor>&)>& edit = {}) {
  if (fuse) model::fuse_for_inference(g);
  model::ModelExecutor exec(std::move(g), default_target(), "", nullptr, threads);
  std::map<std::string, Tensor> inputs;
  unsigned seed = 7;
  for (const std::string& name : exec.graph().inputs) {
    Tensor t(exec.graph().value(name).shape, false);
    const std::vector<float> data = integer_floats(t.data.size(), -3, 3, seed++);
    std::copy(data.begin(), data.end(), t.data.begin());
    inputs[name] = std::move(t);
  }
  if (edit) edit(inputs);
  return exec.run(inputs);
}

// Replaces every graph input's values by reals uniform in [-1, 1) (from `seed`): data where
// the order of float additions shows, for rewrites that must keep the bits anyway.
inline std::function<void(std::map<std::string, Tensor>&)> real_valued_inputs(unsigned seed) {
  return [seed](std::map<std::string, Tensor>& inputs) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> reals(-1.0f, 1.0f);
    for (auto& [name, t] : inputs)
      for (float& v : t.data) v = reals(rng);
  };
}

// "" when the outputs are the same bits, else the first place they differ.
inline std::string first_difference(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size()) return std::to_string(got.size()) + " outputs, want " + std::to_string(want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o].data.size() != want[o].data.size()) return "output " + std::to_string(o) + ": another size";
    for (size_t i = 0; i < got[o].data.size(); ++i)
      if (std::memcmp(&got[o].data[i], &want[o].data[i], sizeof(float)) != 0)
        return "output " + std::to_string(o) + " element " + std::to_string(i) + ": " + std::to_string(got[o].data[i]) +
               ", want " + std::to_string(want[o].data[i]);
  }
  return "";
}

// The fused and the unfused graph's outputs on integer inputs, then on real-valued ones
// (real_valued_inputs(seed)): calls check(fused, unfused, what) for each of the two.
inline void compare_fused_with_unfused(
    const model::Graph& g, int threads, unsigned seed,
    const std::function<void(const std::vector<Tensor>&, const std::vector<Tensor>&, const std::string&)>& check) {
  for (bool real : {false, true}) {
    const auto edit = real ? real_valued_inputs(seed) : std::function<void(std::map<std::string, Tensor>&)>();
    check(run_on_integers(g, true, threads, edit), run_on_integers(g, false, threads, edit),
          std::string(real ? "real-valued" : "integer") + " inputs, " + std::to_string(threads) + " thread(s)");
  }
}

}  // namespace convgen::test
