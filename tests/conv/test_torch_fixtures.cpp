// The PyTorch fixtures of tests/conv/fixtures/torch (scripts/make-torch-fixtures): small
// layers computed by PyTorch in float64, with autograd's gradients. convgen's kernels
// must reproduce them, and so must the double references, which shows that PyTorch,
// the references and the kernels agree on strides, dilation, asymmetric padding,
// groups and the ReLU mask. PyTorch itself is not needed here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <sstream>

#include "generator/conv/jit.h"
#include "schedules/conv_schedule.h"
#include "tests/common/guarded_output.h"
#include "tests/common/reference_conv_backward.h"
#include "tests/conv/torch_fixtures.h"

using namespace convgen;
using namespace convgen::test;

namespace {

// Listed, not globbed, so a missing file fails instead of shrinking the test.
const char* const kFixtures[] = {
    "stride2",   "stride3_kernel2", "dilation2", "stride2_dilation2",     "asymmetric_padding",
    "groups2_bias_relu", "groups4", "depthwise", "depthwise_multiplier2", "conv1d",
};

// Kernels compute in float32: max|got - want| <= 1e-5 max|want| + 1e-6.
constexpr double kKernelRelative = 1e-5, kKernelAbsolute = 1e-6;
// The references compute in double like PyTorch did.
constexpr double kReferenceRelative = 1e-9;

TorchFixture load(const std::string& name) {
  return read_torch_fixture(std::string(CONVGEN_TORCH_FIXTURES_DIR) + "/" + name + ".txt");
}

// Passes when max|got - want| <= relative * max|want| + absolute. A NaN in `got` (an
// element the kernel never wrote, see GuardedOutput) fails.
template <typename T>
void check_close(const std::string& what, const std::vector<T>& got, const std::vector<double>& want,
                 double relative, double absolute) {
  REQUIRE(got.size() == want.size());
  double largest = 0.0;
  for (double v : want) largest = std::max(largest, std::fabs(v));
  const double bound = relative * largest + absolute;
  size_t failures = 0, worst = 0;
  double worst_diff = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double diff = std::fabs(double(got[i]) - want[i]);
    if (std::isnan(diff)) diff = INFINITY;  // unwritten: fails, and ranks worst
    failures += !(diff <= bound);
    if (diff > worst_diff) {
      worst_diff = diff;
      worst = i;
    }
  }
  std::ostringstream report;
  report.precision(17);
  report << what << ": " << failures << " of " << got.size() << " elements exceed " << bound << "; worst at ["
         << worst << "]: got " << got[worst] << ", want " << want[worst];
  INFO(report.str());
  CHECK(failures == 0);
  CHECK(largest > 0.0);  // an all-zero reference would prove nothing
}


// The kernels' inputs as float32, exact by construction of the fixtures.
struct KernelInputs {
  std::vector<float> x, w, b, dy;
  std::vector<float> y;  // the forward output, read by backward kernels for the ReLU mask
  std::vector<float> masked_dy;  // dy * (y > 0) with ReLU, else dy: what the references take
};

KernelInputs kernel_inputs(const TorchFixture& f) {
  const ConvDescriptor& d = f.descriptor;
  KernelInputs in;
  in.x = exact_floats(f.array("x"), "x");
  in.w = exact_floats(f.array("w"), "w");
  if (d.bias) in.b = exact_floats(f.array("b"), "b");
  in.dy = exact_floats(f.array("dy"), "dy");
  const std::vector<double>& y = f.array("y");
  in.y.assign(y.begin(), y.end());
  in.masked_dy = in.dy;
  for (size_t i = 0; d.relu && i < y.size(); ++i)
    if (!(y[i] > 0.0)) in.masked_dy[i] = 0.0f;
  return in;
}

std::string parse_error(const std::string& text) {
  std::istringstream in(text);
  try {
    parse_torch_fixture(in, "f.txt");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("torch fixtures: the set covers every edge class it is meant to", "[fixtures]") {
  bool stride2 = false, stride_over_kernel = false, dilation2 = false, gcd2 = false, asymmetric = false,
       groups2 = false, groups4 = false, depthwise = false, multiplier = false, conv1d = false,
       bias_relu = false;
  for (const char* name : kFixtures) {
    const ConvDescriptor d = load(name).descriptor;
    stride2 |= d.sh == 2 && d.sw == 2 && d.dh == 1;
    stride_over_kernel |= d.sh == 3 && d.sh > d.kh && d.sw > d.kw;
    dilation2 |= d.dh == 2 && d.dw == 2 && d.sh == 1;
    gcd2 |= std::gcd(d.sh, d.dh) == 2 && std::gcd(d.sw, d.dw) == 2;
    asymmetric |= d.pt != d.pb && d.pl != d.pr;
    groups2 |= d.g == 2 && !d.depthwise();
    groups4 |= d.g == 4 && !d.depthwise();
    depthwise |= d.depthwise() && d.oc == d.ic;
    multiplier |= d.depthwise() && d.oc == 2 * d.ic;
    conv1d |= d.ih == 1 && d.kh == 1;
    bias_relu |= d.bias && d.relu;
  }
  CHECK(stride2);
  CHECK(stride_over_kernel);
  CHECK(dilation2);
  CHECK(gcd2);
  CHECK(asymmetric);
  CHECK(groups2);
  CHECK(groups4);
  CHECK(depthwise);
  CHECK(multiplier);
  CHECK(conv1d);
  CHECK(bias_relu);
}

TEST_CASE("torch fixtures: the reader names the file, the line and the fault", "[fixtures]") {
  const std::string header = "# generated by scripts/make-torch-fixtures (PyTorch 0); do not edit\n";
  const std::string descriptor = "g1mb1ic1ih1iw2oc1oh1ow2kh1kw1sh1sw1pt0pb0pl0pr0dh0dw0\n";
  const std::string x = "x 2 1 -0.5\n", w = "w 1 2\n", y = "y 2 2 -1\n", dy = "dy 2 0.25 1\n",
                    dx = "dx 2 0.5 2\n", dw = "dw 1 -0.25\n";
  const std::string valid = header + descriptor + x + w + y + dy + dx + dw;
  {
    std::istringstream in(valid);
    const TorchFixture f = parse_torch_fixture(in, "f.txt");
    CHECK(f.array("x") == std::vector<double>{1.0, -0.5});
    CHECK(f.array("dw") == std::vector<double>{-0.25});
    CHECK(f.arrays.size() == 6);
  }
  CHECK(parse_error("") == "f.txt:1: empty file");
  CHECK_THAT(parse_error("# made by hand\n" + descriptor), Catch::StartsWith("f.txt:1: expected the header"));
  CHECK(parse_error(header) == "f.txt:2: missing the descriptor line");
  CHECK(parse_error(header + "ic1ih1oc1\n") == "f.txt:2: bad descriptor: kh: required key missing");
  CHECK_THAT(parse_error(header + "ic1ih1oc1kh1\n"), Catch::StartsWith("f.txt:2: descriptor is not in normalised form"));
  CHECK(parse_error(header + descriptor + "x 3 1 2 3\n") == "f.txt:3: array x: 3 elements, the descriptor implies 2");
  CHECK(parse_error(header + descriptor + "x 2 1\n") == "f.txt:3: array x: declares 2 values but has 1");
  CHECK(parse_error(header + descriptor + "x 2 1 one\n") == "f.txt:3: array x: \"one\" is not a number");
  CHECK(parse_error(header + descriptor + "x 2 1 nan\n") == "f.txt:3: array x: \"nan\" is not finite");
  CHECK(parse_error(header + descriptor + "x two 1 2\n") == "f.txt:3: array x: expected an element count after the name");
  CHECK(parse_error(header + descriptor + x + x) == "f.txt:4: array x given twice");
  CHECK(parse_error(header + descriptor + x + "b 1 1\n") == "f.txt:4: unexpected array \"b\" for this descriptor");
  CHECK(parse_error(header + descriptor + x + "\n") == "f.txt:4: blank line");
  CHECK(parse_error(header + descriptor + x + w + y + dy + dx) == "f.txt: array dw is missing");
  CHECK_THROWS_WITH(read_torch_fixture("/nonexistent/f.txt"), "/nonexistent/f.txt: cannot read");
  CHECK_THROWS_WITH(exact_floats({0.1}, "x"), "x[0] = 0.10000000000000001 is not exact in float32");
}

TEST_CASE("torch fixtures: the double references reproduce PyTorch's dx, dw and db", "[fixtures]") {
  for (const char* name : kFixtures) {
    INFO(name);
    const TorchFixture f = load(name);
    const ConvDescriptor& d = f.descriptor;
    const KernelInputs in = kernel_inputs(f);
    check_close("dx", reference_backward_data(d, in.masked_dy, in.w), f.array("dx"), kReferenceRelative, 0.0);
    const WeightGradients g = reference_backward_weights(d, in.x, in.masked_dy);
    check_close("dw", g.dw, f.array("dw"), kReferenceRelative, 0.0);
    if (d.bias) check_close("db", g.db, f.array("db"), kReferenceRelative, 0.0);
  }
}

TEST_CASE("torch fixtures: the forward kernel reproduces PyTorch's y", "[fixtures]") {
  const TargetInfo t = default_target();
  for (const char* name : kFixtures) {
    INFO(name);
    const TorchFixture f = load(name);
    const ConvDescriptor& d = f.descriptor;
    const KernelInputs in = kernel_inputs(f);
    JitForwardKernel kernel(d, analytic_schedule(d, t), t);
    GuardedOutput y(in.y.size());
    kernel.run(in.x.data(), in.w.data(), d.bias ? in.b.data() : nullptr, y.data());
    check_close("y", y.values(), f.array("y"), kKernelRelative, kKernelAbsolute);
    CHECK(y.damaged_guards() == 0);
  }
}

// The backward kernels take the unmasked dy and, for a ReLU layer, the forward output y
// to mask it with (y > 0); without ReLU they must not need y, so they get null.
TEST_CASE("torch fixtures: the backward-data kernel reproduces PyTorch's dx", "[fixtures][backward]") {
  const TargetInfo t = default_target();
  for (const char* name : kFixtures) {
    INFO(name);
    const TorchFixture f = load(name);
    const ConvDescriptor& d = f.descriptor;
    const KernelInputs in = kernel_inputs(f);
    JitBackwardDataKernel kernel(d, analytic_schedule_for_pass(d, "bwd_data", t), t);
    GuardedOutput dx(in.x.size());
    kernel.run(in.dy.data(), in.w.data(), d.relu ? in.y.data() : nullptr, dx.data());
    check_close("dx", dx.values(), f.array("dx"), kKernelRelative, kKernelAbsolute);
    CHECK(dx.damaged_guards() == 0);
  }
}

TEST_CASE("torch fixtures: the backward-weights kernel reproduces PyTorch's dw and db", "[fixtures][backward]") {
  const TargetInfo t = default_target();
  for (const char* name : kFixtures) {
    INFO(name);
    const TorchFixture f = load(name);
    const ConvDescriptor& d = f.descriptor;
    const KernelInputs in = kernel_inputs(f);
    JitBackwardWeightsKernel kernel(d, analytic_schedule_for_pass(d, "bwd_weights", t), t);
    GuardedOutput dw(in.w.size()), db(d.oc);
    kernel.run(in.x.data(), in.dy.data(), d.relu ? in.y.data() : nullptr, dw.data(), db.data());
    check_close("dw", dw.values(), f.array("dw"), kKernelRelative, kKernelAbsolute);
    if (d.bias) check_close("db", db.values(), f.array("db"), kKernelRelative, kKernelAbsolute);
    CHECK(dw.damaged_guards() == 0);
    CHECK(db.damaged_guards() == 0);
  }
}
