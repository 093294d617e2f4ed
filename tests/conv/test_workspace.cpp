// The no-im2col promise, measured: with the analytic default schedule, the heap the
// kernel allocates per call (staged input, packed weights) stays within
// max(5% of the im2col buffer, 1 MiB) on every layer of the benchmark sets, at
// minibatch 1 (where the budget is tightest).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "generator/conv/jit.h"

using namespace convgen;

namespace {

void check_layer_set(const std::string& file) {
  const TargetInfo t = default_target();
  for (ConvDescriptor d : read_layer_set(std::string(CONVGEN_LAYERS_DIR) + "/" + file)) {
    d.mb = 1;
    const ConvSchedule s = analytic_schedule(d, t);
    JitForwardKernel kernel(d, s, t);
    std::vector<float> x(d.mb * d.ih * d.iw * d.ic, 1.0f), w(d.oc * d.icg() * d.kh * d.kw, 1.0f);
    std::vector<float> y(d.mb * d.oh() * d.ow() * d.oc);
    kernel.run(x.data(), w.data(), nullptr, y.data());
    const int64_t budget = std::max<int64_t>(d.im2col_bytes() / 20, int64_t(1) << 20);
    INFO(file << " " << d.to_string() << "  schedule: " << describe(s));
    INFO("workspace " << kernel.last_workspace_bytes() << " bytes, budget " << budget);
    CHECK(kernel.last_workspace_bytes() <= budget);
  }
}

}  // namespace

TEST_CASE("workspace within budget: resnet50_v15", "[workspace]") { check_layer_set("resnet50_v15.tsv"); }
TEST_CASE("workspace within budget: vgg16", "[workspace]") { check_layer_set("vgg16.tsv"); }
TEST_CASE("workspace within budget: alexnet", "[workspace]") { check_layer_set("alexnet.tsv"); }
TEST_CASE("workspace within budget: lenet and cifar10_full", "[workspace]") {
  check_layer_set("lenet.tsv");
  check_layer_set("cifar10_full.tsv");
}
TEST_CASE("workspace within budget: odd_shapes", "[workspace]") { check_layer_set("odd_shapes.tsv"); }
