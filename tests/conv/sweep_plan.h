// The forward correctness sweep as data: edge classes of layer shapes, each shape paired
// with a schedule so that, within every class, every value of every ConvSchedule field
// is exercised. Tests execute the plan; a coverage test checks the plan itself.
#pragma once

#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen::test {

struct SweepCase {
  std::string edge_class;
  ConvDescriptor descriptor;
  ConvSchedule schedule;
};

// The edge classes, in a fixed order.
const std::vector<std::string>& edge_classes();

// Every case of one class (deterministic: same plan on every run).
// The target the sweeps generate for: $CONVGEN_SWEEP_TARGET when set (e.g. an AVX-512
// target on a machine that has it: ctest sweep_avx512), else convgen's default.
TargetInfo sweep_target();

std::vector<SweepCase> sweep_cases(const std::string& edge_class);

// The strategies the sweep cycles through: every one but gemm_input_lanes, which only
// backward-weights of unpadded 1x1 layers runs (its own cases: test_backward_sweep.cpp).
std::vector<Strategy> sweep_strategies(const TargetInfo& t);

// All cases of all classes.
std::vector<SweepCase> full_sweep();

}  // namespace convgen::test
