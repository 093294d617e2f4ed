// What a training run produced, and the bit-for-bit comparison of two runs: the
// trainer's contract (docs/training.md) in one place, for the thread-count tests and the
// generated-driver tests alike.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runtime/train/trainer.h"

namespace convgen::test {

struct TrainRun {
  std::vector<double> losses;
  std::vector<int64_t> correct;
  std::vector<model::Parameter> parameters;
  std::vector<std::pair<std::string, std::vector<float>>> state;  // BatchNormalization running statistics
  model::StepStats evaluated;  // a forward-only pass after training, when the test makes one
};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every loss and correct count, every parameter's value and momentum and every state
// tensor equal bit for bit.
inline void require_identical(const TrainRun& a, const TrainRun& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i) {
    INFO("step " << i);
    CHECK(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)) == 0);
    CHECK(a.correct[i] == b.correct[i]);
  }
  CHECK(std::memcmp(&a.evaluated.loss, &b.evaluated.loss, sizeof(double)) == 0);
  CHECK(a.evaluated.correct == b.evaluated.correct);
  REQUIRE(a.parameters.size() == b.parameters.size());
  for (size_t p = 0; p < a.parameters.size(); ++p) {
    INFO("parameter " << a.parameters[p].name);
    CHECK(a.parameters[p].name == b.parameters[p].name);
    CHECK(same_bits(a.parameters[p].value, b.parameters[p].value));
    CHECK(same_bits(a.parameters[p].momentum, b.parameters[p].momentum));
  }
  REQUIRE(a.state.size() == b.state.size());
  for (size_t i = 0; i < a.state.size(); ++i) {
    INFO("state " << a.state[i].first);
    CHECK(a.state[i].first == b.state[i].first);
    CHECK(same_bits(a.state[i].second, b.state[i].second));
  }
}

}  // namespace convgen::test
