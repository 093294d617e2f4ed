// The backward correctness sweep: backward-data and backward-weights kernels over every
// edge class of the forward sweep (plus stride/dilation interplay), every schedule field
// value, bit for bit on integer-valued data and to a rounding bound on real data, with
// guard zones around every output. References: tests/common/reference_conv_backward.h.
#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <random>
#include <set>

#include "generator/conv/backward.h"
#include "generator/conv/jit.h"
#include "generator/conv/pipeline.h"
#include "schedules/backward_data_classes.h"
#include "schedules/kernel_plan.h"
#include "schedules/schedule_records.h"
#include "schedules/weight_panels.h"
#include "tests/common/guarded_input.h"
#include "tests/common/guarded_output.h"
#include "tests/common/reference_conv_backward.h"
#include "tests/conv/sweep_plan.h"

using namespace convgen;
using namespace convgen::test;

namespace {

struct Data {
  std::vector<float> x, w, dy, y, dy_masked;
};

Data make_data(const ConvDescriptor& d, bool integer_valued, uint32_t seed) {
  std::mt19937 rng(seed);
  Data t;
  t.x.resize(d.mb * d.ih * d.iw * d.ic);
  t.w.resize(d.oc * d.icg() * d.kh * d.kw);
  t.dy.resize(d.mb * d.oh() * d.ow() * d.oc);
  t.y.resize(t.dy.size());
  auto fill = [&](std::vector<float>& v, int range) {
    std::uniform_int_distribution<int> ints(-range, range);
    std::uniform_real_distribution<float> reals(-1.0f, 1.0f);
    for (auto& e : v) e = integer_valued ? float(ints(rng)) : reals(rng);
  };
  fill(t.x, 3);
  fill(t.w, 2);
  fill(t.dy, 3);
  fill(t.y, 2);  // about 40% of the mask is off (y <= 0), integer or not
  t.dy_masked = t.dy;
  if (d.relu)
    for (size_t i = 0; i < t.dy.size(); ++i)
      if (!(t.y[i] > 0.0f)) t.dy_masked[i] = 0.0f;
  return t;
}

std::vector<float> absolute(std::vector<float> v) {
  for (auto& e : v) e = std::fabs(e);
  return v;
}

struct Outcome {
  size_t mismatches = 0, guard_damage = 0;
  std::string read_outside;  // which input the kernel read outside of, and how far ("" if none)
  std::string first_mismatch;
};

// Integer data must match exactly; real data within 2 * terms * eps * sum|terms|.
void compare(const char* what, const GuardedOutput& got, const std::vector<double>& want, const std::vector<double>& abs_sum,
             double terms, bool integer_valued, Outcome& o) {
  o.guard_damage += got.damaged_guards();
  for (size_t i = 0; i < want.size(); ++i) {
    const bool ok = integer_valued ? double(got[i]) == want[i]
                                   : std::fabs(double(got[i]) - want[i]) <= 2.0 * terms * 6e-8 * abs_sum[i] + 1e-30;
    if (!ok && o.mismatches++ == 0)
      o.first_mismatch = std::string(what) + " " + std::to_string(i) + ": got " + std::to_string(got[i]) +
                         ", want " + std::to_string(want[i]);
  }
}

double max_of(const std::vector<double>& v) {
  double m = 0;
  for (double e : v) m = std::max(m, e);
  return m;
}

// `misalign`: floats dX starts past a 64-byte boundary.
Outcome run_backward_data(JitBackwardDataKernel& k, const ConvDescriptor& d, bool integer_valued, uint32_t seed,
                          size_t misalign = 0) {
  const Data in = make_data(d, integer_valued, seed);
  const auto want = reference_backward_data(d, in.dy_masked, in.w);
  const auto abs_sum = reference_backward_data(d, absolute(in.dy_masked), absolute(in.w));
  if (integer_valued) REQUIRE(max_of(abs_sum) < double(1 << 24));  // exact fp32 sums
  GuardedOutput dx(want.size(), misalign);
  const WeightPanels& panels = k.weight_panels();  // pack_weights=prepacked: packed here
  std::vector<float> packed(static_cast<size_t>(panels.floats), std::nanf(""));
  if (!panels.empty()) pack_weight_panels(panels, in.w.data(), packed.data());
  // Every input against a faulting page: a read past either end fails the case.
  const GuardedInput::Edge edge = guarded_edge(integer_valued);
  const GuardedInput dy(in.dy, edge), w(panels.empty() ? in.w : packed, edge), y(in.y, edge);
  Outcome o;
  o.read_outside = read_outside_inputs([&] { k.run(dy.data(), w.data(), d.relu ? y.data() : nullptr, dx.data()); },
                                       {{"dy", &dy}, {"w", &w}, {"y", &y}});
  if (!o.read_outside.empty()) return o;
  compare("dx", dx, want, abs_sum, double(d.ocg() * d.kh * d.kw), integer_valued, o);
  return o;
}

Outcome run_backward_weights(JitBackwardWeightsKernel& k, const ConvDescriptor& d, bool integer_valued,
                             uint32_t seed) {
  const Data in = make_data(d, integer_valued, seed);
  const auto want = reference_backward_weights(d, in.x, in.dy_masked);
  const auto abs_sum = reference_backward_weights(d, absolute(in.x), absolute(in.dy_masked));
  if (integer_valued) REQUIRE(std::max(max_of(abs_sum.dw), max_of(abs_sum.db)) < double(1 << 24));
  GuardedOutput dw(want.dw.size()), db(d.oc);
  const GuardedInput::Edge edge = guarded_edge(integer_valued);
  const GuardedInput x(in.x, edge), dy(in.dy, edge), y(in.y, edge);
  Outcome o;
  o.read_outside = read_outside_inputs(
      [&] { k.run(x.data(), dy.data(), d.relu ? y.data() : nullptr, dw.data(), d.bias ? db.data() : nullptr); },
      {{"x", &x}, {"dy", &dy}, {"y", &y}});
  if (!o.read_outside.empty()) return o;
  const double terms = double(d.mb * d.oh() * d.ow());
  compare("dw", dw, want.dw, abs_sum.dw, terms, integer_valued, o);
  if (d.bias) {
    compare("db", db, want.db, abs_sum.db, terms, integer_valued, o);
  } else {
    o.guard_damage += db.damaged_guards() + db.written();  // db untouched
  }
  return o;
}

void check(const Outcome& o) {
  if (!o.read_outside.empty()) FAIL_CHECK("a read outside the inputs: " << o.read_outside);
  INFO(o.first_mismatch);
  CHECK(o.mismatches == 0);
  CHECK(o.guard_damage == 0);
}

void run_class(const std::string& cls) {
  const TargetInfo t = sweep_target();
  for (const SweepCase& c : sweep_cases(cls)) {
    INFO(c.descriptor.to_string() << "  schedule: " << describe(c.schedule));
    {
      INFO("backward-data");
      JitBackwardDataKernel k(c.descriptor, c.schedule, t);
      check(run_backward_data(k, c.descriptor, true, 7));
      check(run_backward_data(k, c.descriptor, false, 11));
      // Streaming stores: the ordinary variant on a dX off the 64-byte boundary too.
      if (streams_output("bwd_data", c.schedule)) {
        INFO("dX a float past a 64-byte boundary");
        check(run_backward_data(k, c.descriptor, true, 7, 1));
      }
    }
    {
      INFO("backward-weights");
      JitBackwardWeightsKernel k(c.descriptor, c.schedule, t);
      check(run_backward_weights(k, c.descriptor, true, 7));
      check(run_backward_weights(k, c.descriptor, false, 11));
    }
  }
}

// True when the backward-weights plan of (d, s) says `what` under --verbose: the rule a
// test checks really picked its code path.
bool weights_plan_says(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t, const char* what) {
  std::vector<std::string> why;
  build_backward_weights(d, s, t, &why);
  return std::any_of(why.begin(), why.end(), [&](const std::string& line) { return line.find(what) != std::string::npos; });
}

}  // namespace

TEST_CASE("backward sweep: kernel_1x1", "[bwd_sweep]") { run_class("kernel_1x1"); }
TEST_CASE("backward sweep: kernel_3x3", "[bwd_sweep]") { run_class("kernel_3x3"); }
TEST_CASE("backward sweep: kernel_5x5", "[bwd_sweep]") { run_class("kernel_5x5"); }
TEST_CASE("backward sweep: kernel_7x7", "[bwd_sweep]") { run_class("kernel_7x7"); }
TEST_CASE("backward sweep: kernel_11x11", "[bwd_sweep]") { run_class("kernel_11x11"); }
TEST_CASE("backward sweep: non_square_kernel", "[bwd_sweep]") { run_class("non_square_kernel"); }
TEST_CASE("backward sweep: stride", "[bwd_sweep]") { run_class("stride"); }
TEST_CASE("backward sweep: stride_dilation", "[bwd_sweep]") { run_class("stride_dilation"); }
TEST_CASE("backward sweep: border_columns", "[bwd_sweep]") { run_class("border_columns"); }
TEST_CASE("backward sweep: asymmetric_padding", "[bwd_sweep]") { run_class("asymmetric_padding"); }
TEST_CASE("backward sweep: dilation", "[bwd_sweep]") { run_class("dilation"); }
TEST_CASE("backward sweep: groups", "[bwd_sweep]") { run_class("groups"); }
TEST_CASE("backward sweep: depthwise", "[bwd_sweep]") { run_class("depthwise"); }
TEST_CASE("backward sweep: depthwise_multiplier", "[bwd_sweep]") { run_class("depthwise_multiplier"); }
TEST_CASE("backward sweep: odd_sizes", "[bwd_sweep]") { run_class("odd_sizes"); }
TEST_CASE("backward sweep: conv1d", "[bwd_sweep]") { run_class("conv1d"); }

// The analytic backward-weights defaults themselves, on shapes of the classes they were
// tuned on (scaled down): with 32 vector registers (sweep.avx512) these are the 32x8 and
// 48x8 direct-load tiles, ragged channel tiles, items of several whole small images
// (8 + 1 images included) and of ~128-pixel bands of larger ones; on the default target
// the AVX2 rules of the same shapes.
TEST_CASE("backward sweep: analytic backward-weights defaults on wide-tile shapes", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    int mr, nr;  // expected tile with 32 vector registers, in vectors of the target
    int kc;
  };
  const Shape shapes[] = {
      {"mb2ic64ih12iw12oc64kh3kw3pt1pb1pl1pr1+bias+relu", 2, 8, 400},  // 64 channels: 32x8, padded
      {"mb3ic16ih7iw7oc128kh1kw1+bias", 3, 8, 400},                   // 48x8, ragged, 3 images per item
      {"mb9ic24ih7iw7oc96kh3kw3pt1pb1pl1pr1", 3, 8, 400},             // items of 8 + 1 images
      {"mb2ic32ih14iw14oc48kh1kw1sh2sw2+bias", 3, 8, 400},             // stride 2 to 7x7
      {"mb1ic8ih16iw16oc64kh3kw3pt1pb1pl1pr1+relu", 2, 8, 128},        // items of 8 rows of a 16x16 image
      {"mb2ic16ih20iw20oc48kh3kw3pt1pb1pl1pr1+bias", 3, 8, 128},       // bands of 7, 7 and 6 rows
      {"mb2ic16ih13iw13oc24kh5kw5sh3sw3pt1pb1pl1pr1+relu", 2, 8, 400}, // 24 channels padded to 32
  };
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule_for_pass(d, "bwd_weights", t);
    INFO(sh.text << "  schedule: " << describe(s));
    if (t.vector_registers >= 32) {  // the plan really exercises the wide-tile rule
      CHECK(s.mr == sh.mr * t.vector_floats);
      CHECK(s.nr == sh.nr);
      CHECK(s.kc == sh.kc);
      CHECK(s.pack_input == PackInput::Image);
    }
    JitBackwardWeightsKernel k(d, s, t);
    check(run_backward_weights(k, d, true, 5));
    check(run_backward_weights(k, d, false, 9));
  }
}

// The 16-register backward-weights rules, run as chosen: 16x6 packed panels where 24-wide
// tiles would pad 128 channels to 144, and items of about 112 pixels of direct tile
// loads on images of 28x28 and more (4 rows of a 30-wide image: bands of 4 and a last
// one of 2). The choice is checked on 16-register targets; every target runs it exact.
TEST_CASE("backward sweep: 16-register backward-weights defaults run as chosen", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    int mr, nr, kc;  // expected with 16 registers, MR in vectors
    PackInput pack;
  };
  const Shape shapes[] = {
      {"mb2ic256ih6iw6oc128kh1kw1+bias", 2, 6, 100, PackInput::Panel},
      {"mb1ic24ih30iw30oc32kh3kw3pt1pb1pl1pr1+relu", 2, 4, 112, PackInput::Image},
  };
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule_for_pass(d, "bwd_weights", t);
    INFO(sh.text << "  schedule: " << describe(s));
    if (t.vector_registers < 32) {
      CHECK(s.mr == sh.mr * t.vector_floats);
      CHECK(s.nr == sh.nr);
      CHECK(s.kc == sh.kc);
      CHECK(s.pack_input == sh.pack);
    }
    JitBackwardWeightsKernel k(d, s, t);
    check(run_backward_weights(k, d, true, 5));
    check(run_backward_weights(k, d, false, 9));
  }
}

namespace {

// Runs each first-layer shape under each schedule override (over its default): the plan
// must say `plan_phrase`, both dW checks must pass, and where the bottom padding row is
// read the deliberately broken kernel must fail. Returns how many broken kernels ran.
template <size_t S, size_t W>
int check_first_layer_weights(const char* const (&shapes)[S], const char* const (&schedules)[W],
                              const char* plan_phrase) {
  const TargetInfo t = sweep_target();
  int broken_checked = 0;
  for (const char* text : shapes) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* words : schedules) {
      ConvSchedule s = analytic_schedule_for_pass(d, "bwd_weights", t);
      apply_schedule_overrides(words, &s);
      INFO(text << "  schedule: " << describe(s));
      CHECK(weights_plan_says(d, s, t, plan_phrase));  // the plan really takes the path
      JitBackwardWeightsKernel k(d, s, t);
      check(run_backward_weights(k, d, true, 3));
      check(run_backward_weights(k, d, false, 4));
      ForwardBuildOptions broken;
      broken.inject_padding_bug = true;
      if ((d.oh() - 1) * d.sh + (d.kh - 1) * d.dh - d.pt >= d.ih) {
        JitBackwardWeightsKernel bad(d, s, t, broken);
        CHECK(run_backward_weights(bad, d, true, 3).mismatches > 0);
        ++broken_checked;
      }
    }
  }
  return broken_checked;
}

}  // namespace

// First layers (fewer input channels than lanes, padded): the input rows are staged
// flat, (column, channel) as one index, zeros first and the real columns copied over
// them. Direct tile loads and packed panels, strides 1 and 2, asymmetric padding, a
// row width that leaves a vector tail; the broken kernel must fail on them too.
TEST_CASE("backward sweep: first-layer shapes stage flat input rows", "[bwd_sweep]") {
  const char* const shapes[] = {
      "mb2ic3ih13iw13oc16kh3kw3pt1pb1pl1pr1+bias+relu",
      "mb3ic3ih17iw15oc32kh3kw3sh2sw2pt1pb1pl1pr1+bias",
      "mb2ic1ih12iw11oc16kh5kw5pt2pb1pl0pr2+relu",
      "mb2ic3ih19iw19oc24kh7kw7sh2sw2pt3pb3pl3pr3",
  };
  const char* const schedules[] = {"pack_input=image", "pack_input=image nr=6 kc=64", "pack_input=panel nr=4",
                                   "pack_input=panel nr=8 nc=32 partitions=2"};
  CHECK(check_first_layer_weights(shapes, schedules, "(column, channel) flat") >= 8);
}

// First layers read in place (pack_input=none): GEMM tiles whose taps straddle kernel
// positions and channels, the `likely` border split along rows and columns, strides 1
// to 3, asymmetric padding, partitions; the broken kernel must fail. With 32 vector
// registers the RGB stem's default is this path (few FMAs per input float).
TEST_CASE("backward sweep: first layers read their input in place", "[bwd_sweep]") {
  const char* const shapes[] = {
      "mb2ic3ih13iw13oc16kh3kw3pt1pb1pl1pr1+bias",
      "mb3ic3ih17iw15oc32kh3kw3sh2sw2pt1pb1pl1pr1",
      "mb2ic1ih12iw11oc16kh5kw5pt2pb1pl0pr2+relu",
      "mb2ic3ih19iw20oc24kh7kw7sh3sw2pt3pb3pl3pr2",
  };
  const char* const schedules[] = {"pack_input=none nr=9", "pack_input=none nr=6 kc=40",
                                   "pack_input=none nr=4 kc=0 partitions=2"};
  CHECK(check_first_layer_weights(shapes, schedules, "input read in place") >= 6);
  // The analytic choice, for a 32-register target (checked, not run).
  const TargetInfo wide = target_info("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41");
  const ConvSchedule stem =
      analytic_schedule_for_pass(parse_descriptor("mb8ic3ih224iw224oc32kh3kw3sh2sw2ph1pw1"), "bwd_weights", wide);
  CHECK(stem.pack_input == PackInput::None);
  CHECK(stem.nr == 9);
  const ConvSchedule vgg_first =
      analytic_schedule_for_pass(parse_descriptor("mb8ic3ih224iw224oc64kh3kw3ph1pw1"), "bwd_weights", wide);
  CHECK(vgg_first.pack_input == PackInput::Image);
}

TEST_CASE("backward sweep: dW leaves the tiles in transposed blocks with ragged edges", "[bwd_sweep]") {
  // Blocks of 8 output channels x 8 taps (input channels of a 1x1 kernel, else the
  // window): channel counts, input channels and windows that 8 does not divide, groups,
  // partitions; and the shapes that keep the element-wise copy.
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    bool blocked;
  };
  const Shape shapes[] = {
      {"mb2ic12ih5iw5oc20kh1kw1+bias", true},
      {"g2mb2ic24ih6iw5oc40kh1kw1+relu", true},
      {"mb2ic8ih7iw7oc36kh3kw3pt1pb1pl1pr1+bias+relu", true},
      {"mb2ic5ih11iw11oc17kh5kw5sh2sw2pt2pb1pl2pr1", true},
      {"mb1ic3ih13iw13oc24kh7kw7sh2sw2pt3pb3pl3pr3", true},
      {"mb2ic4ih6iw6oc24kh1kw1", false},
      {"mb2ic16ih1iw20oc24kh1kw3pl1pr1", false},
  };
  const char* schedules[] = {"", "pack_input=panel nr=4", "kc=8 partitions=2"};
  for (const Shape& shape : shapes) {
    const ConvDescriptor d = parse_descriptor(shape.text);
    for (const char* words : schedules) {
      ConvSchedule s = analytic_schedule_for_pass(d, "bwd_weights", t);
      apply_schedule_overrides(words, &s);
      INFO(shape.text << "  schedule: " << describe(s));
      CHECK(weights_plan_says(d, s, t, "dW transposed") == shape.blocked);
      JitBackwardWeightsKernel k(d, s, t);
      check(run_backward_weights(k, d, true, 3));
      check(run_backward_weights(k, d, false, 4));
    }
  }
}

TEST_CASE("backward sweeps fail on deliberately broken kernels", "[bwd_sweep][broken]") {
  // Both broken kernels read the row below the image instead of zero padding.
  const TargetInfo t = sweep_target();
  ForwardBuildOptions broken;
  broken.inject_padding_bug = true;
  int data_checked = 0, weights_checked = 0;
  for (const auto& cls : {"kernel_3x3", "asymmetric_padding", "stride_dilation", "depthwise"}) {
    for (const SweepCase& c : sweep_cases(cls)) {
      const ConvDescriptor& d = c.descriptor;
      INFO(d.to_string() << "  schedule: " << describe(c.schedule));
      const int64_t last_row_read = (d.oh() - 1) * d.sh + (d.kh - 1) * d.dh - d.pt;
      if (last_row_read >= d.ih && weights_checked < 8) {
        JitBackwardWeightsKernel k(d, c.schedule, t, broken);
        CHECK(run_backward_weights(k, d, true, 7).mismatches > 0);
        ++weights_checked;
      }
      // Backward-data's derived classes pad dY; a class that reads past dY's last row
      // then reads a real row instead of zeros.
      if (d.pt + d.pb > 0 && data_checked < 8) {
        JitBackwardDataKernel k(d, c.schedule, t, broken);
        if (run_backward_data(k, d, true, 7).mismatches > 0) ++data_checked;
      }
    }
  }
  CHECK(weights_checked >= 6);
  CHECK(data_checked >= 6);
}

TEST_CASE("backward sweep: backward-data defaults read dY in place only where no tap reads padding", "[bwd_sweep]") {
  // Stride 1: one class written straight to dX, tiles inside the padded rows leave out
  // every tap on padding, so dY is read in place -- unless the ReLU masks it (a select
  // per tap load). Stride 2: the classes' outputs are staged, their tiles never skip
  // columns, so dY keeps the packer's zero fill.
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    bool in_place;
  };
  const Shape shapes[] = {{"mb2ic32ih16iw16oc32kh5kw5pt2pb2pl2pr2+bias", true},
                          {"mb2ic64ih8iw8oc32kh5kw5pt2pb2pl2pr2", true},
                          {"mb2ic32ih16iw16oc32kh5kw5pt2pb2pl2pr2+relu", false},
                          {"mb2ic32ih16iw16oc32kh5kw5sh2sw2pt2pb2pl2pr2", false},
                          {"mb2ic32ih15iw15oc64kh5kw5sh2sw2pt2pb2pl2pr2+relu", false}};
  for (const Shape& shape : shapes) {
    const ConvDescriptor d = parse_descriptor(shape.text);
    const ConvSchedule s = analytic_schedule_for_pass(d, "bwd_data", t);
    INFO(shape.text << "  schedule: " << describe(s));
    CHECK((s.pack_input == PackInput::None) == shape.in_place);
    if (!shape.in_place) {
      // A class on its own (a forward layer) would be read in place: staging or the
      // mask decides.
      bool a_class_alone_in_place = false;
      for (const ResidueClass& c : backward_data_classes(d))
        if (!c.zero()) a_class_alone_in_place |= analytic_schedule(c.derived, t).pack_input == PackInput::None;
      CHECK(a_class_alone_in_place);
    }
    JitBackwardDataKernel k(d, s, t);
    check(run_backward_data(k, d, true, 5));
    check(run_backward_data(k, d, false, 6));
  }
}

TEST_CASE("backward sweep: 1x1 backward-data copies its transposed weights as vectors with a ragged last tile", "[bwd_sweep]") {
  // The transposed 1x1 weights are contiguous along the packed panel's channels: copied
  // a vector at a time, the last tile's channels past C/g zero-filled (loop partitioned
  // by Halide). Channel counts that 1, 2 and 3 vectors do not divide, stride 1 and 2.
  const TargetInfo t = sweep_target();
  const int vl = t.vector_floats;
  const char* shapes[] = {"mb2ic40ih6iw6oc24kh1kw1+relu", "mb2ic20ih7iw5oc32kh1kw1sh2sw2", "g2mb2ic88ih5iw5oc48kh1kw1"};
  for (const char* text : shapes) {
    const ConvDescriptor d = parse_descriptor(text);
    for (int vectors : {1, 2, 3}) {
      ConvSchedule s = analytic_schedule_for_pass(d, "bwd_data", t);
      s.mr = vectors * vl;
      s.nr = 4;
      INFO(text << "  schedule: " << describe(s));
      JitBackwardDataKernel k(d, s, t);
      check(run_backward_data(k, d, true, 8));
      check(run_backward_data(k, d, false, 9));
    }
  }
}

TEST_CASE("backward sweep plan: stride-1 backward-data runs the padded-column pruning path", "[plan]") {
  // Stride-1 backward-data is one forward convolution over dY written straight to dX;
  // its border tiles must be exercised too, not only the forward's.
  const TargetInfo t = sweep_target();
  int cases = 0;
  for (const auto& c : full_sweep()) {
    if (c.descriptor.sh != 1 || c.descriptor.sw != 1) continue;
    const auto classes = backward_data_classes(c.descriptor);
    if (classes.size() == 1 && !classes[0].zero() && skips_padded_columns(classes[0].derived, c.schedule, t)) ++cases;
  }
  INFO(cases << " cases");
  CHECK(cases >= 6);
}

TEST_CASE("backward sweep plan: backward-weights reads the input in place in many cases and classes", "[plan]") {
  // The sweep's cases with pack_input=none take the in-place path (its `likely` border
  // partitions); padded ones, GEMM ones, NR = 9 (a whole 3x3 window) and ragged channel
  // tiles must all be among them.
  const TargetInfo t = sweep_target();
  int cases = 0, padded = 0, gemm_padded = 0, whole_window = 0, ragged_channels = 0;
  std::set<std::string> classes;
  for (const auto& c : full_sweep()) {
    const ConvDescriptor& d = c.descriptor;
    if (!weights_read_in_place(c.schedule)) continue;
    ++cases;
    classes.insert(c.edge_class);
    if (d.pt || d.pb || d.pl || d.pr) ++padded;
    if ((d.pt || d.pb || d.pl || d.pr) && c.schedule.strategy == Strategy::Gemm && d.ocg() >= t.vector_floats)
      ++gemm_padded;
    if (c.schedule.nr == 9 && d.icg() * d.kh * d.kw >= 9) ++whole_window;
    if (d.oc % std::min<int64_t>(c.schedule.mr, d.oc) != 0) ++ragged_channels;
  }
  INFO(cases << " cases in " << classes.size() << " classes; " << padded << " padded (" << gemm_padded
             << " GEMM), " << whole_window
             << " with a 9-tap tile, " << ragged_channels << " with a ragged channel tile");
  CHECK(cases >= 12);
  CHECK(classes.count("depthwise") == 1);
  CHECK(classes.size() >= 4);
  CHECK(padded >= 6);
  CHECK(gemm_padded >= 3);
  CHECK(whole_window >= 1);
  CHECK(ragged_channels >= 2);
}

// The depthwise backward-weights default: whole vectors of channels read in place, one
// vector x the 3x3 window (or a 5x5 kernel's row), dY read unpacked; a channel count off
// the vector keeps the packed band, and so does a ReLU-masked dY (in place, packed dY).
// Every choice runs bit-exact.
TEST_CASE("backward sweep: depthwise backward-weights defaults read in place and run exact", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  const int vl = t.vector_floats;
  struct Shape {
    std::string text;
    bool in_place;
    int nr;
  };
  const std::string c2 = std::to_string(2 * vl), c3 = std::to_string(3 * vl), odd = std::to_string(vl + vl / 2);
  const Shape shapes[] = {
      {"g" + c2 + "mb2ic" + c2 + "ih9iw11oc" + c2 + "kh3kw3sh2sw2pt1pb1pl1pr1", true, 9},
      {"g" + c3 + "mb3ic" + c3 + "ih7iw7oc" + c3 + "kh3kw3pt1pb1pl1pr1+bias", true, 9},
      {"g" + c2 + "mb2ic" + c2 + "ih10iw10oc" + c2 + "kh5kw5pt2pb2pl2pr2+relu", true, 5},
      {"g" + c2 + "mb1ic" + c2 + "ih6iw13oc" + c2 + "kh3kw3dh2dw2pt2pb2pl2pr2", true, 9},
      {"g" + odd + "mb2ic" + odd + "ih8iw8oc" + odd + "kh3kw3pt1pb1pl1pr1", false, 0},
  };
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule_for_pass(d, "bwd_weights", t);
    INFO(sh.text << "  schedule: " << describe(s));
    CHECK(weights_read_in_place(s) == sh.in_place);
    if (sh.in_place) {
      // Two vectors of channels with 32 registers where they tile the channels (the c2
      // shapes on AVX-512, sweep.avx512), else one.
      CHECK(s.mr == (t.vector_registers >= 32 && d.oc % (2 * vl) == 0 ? 2 * vl : vl));
      CHECK(s.nr == sh.nr);
      CHECK(weights_plan_says(d, s, t, "input read in place"));
      CHECK(weights_plan_says(d, s, t, "dY read in place") == !d.relu);
    }
    JitBackwardWeightsKernel k(d, s, t);
    check(run_backward_weights(k, d, true, 5));
    check(run_backward_weights(k, d, false, 9));
  }
}

TEST_CASE("backward sweep plan: strided depthwise backward-data computes dX in place in many cases", "[plan]") {
  // Sweep cases that take the pixel-by-pixel path: strides 2 and 3, ragged channel
  // tiles, row tiles of more than one period, padded and dilated windows among them.
  const TargetInfo t = sweep_target();
  int cases = 0, stride3 = 0, ragged_channels = 0, wide_tiles = 0, dilated = 0;
  for (const auto& c : full_sweep()) {
    const ConvDescriptor& d = c.descriptor;
    if (!computes_depthwise_dx_in_place(d, c.schedule)) continue;
    ++cases;
    if (d.sh == 3 || d.sw == 3) ++stride3;
    if (d.g % depthwise_dx_channel_tile(d, c.schedule, t) != 0) ++ragged_channels;
    if (depthwise_dx_row_tile(d, c.schedule) > d.sw) ++wide_tiles;
    if (d.dh > 1 || d.dw > 1) ++dilated;
  }
  INFO(cases << " cases; " << stride3 << " with stride 3, " << ragged_channels << " with ragged channel tiles, "
             << wide_tiles << " with row tiles of several periods, " << dilated << " dilated");
  CHECK(cases >= 8);
  CHECK(stride3 >= 1);
  CHECK(ragged_channels >= 1);
  CHECK(wide_tiles >= 2);
  CHECK(dilated >= 1);
}

// The strided depthwise backward-data default: dX pixel by pixel in place, bit-exact on
// shapes with strides 2 and 3, rectangular strides, 5x5 and dilated windows, a masked
// dY and fewer channels than a vector; a row that holds no whole period of the stride
// keeps the per-class form.
TEST_CASE("backward sweep: strided depthwise backward-data defaults compute dX in place and run exact", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  const int vl = t.vector_floats;
  const std::string c2 = std::to_string(2 * vl), odd = std::to_string(vl + vl / 2), few = std::to_string(vl / 2);
  struct Shape {
    std::string text;
    bool in_place;
  };
  const Shape shapes[] = {
      {"g" + c2 + "mb2ic" + c2 + "ih10iw12oc" + c2 + "kh3kw3sh2sw2pt1pb1pl1pr1", true},
      {"g" + odd + "mb2ic" + odd + "ih9iw12oc" + odd + "kh3kw3sh3sw3pt1pb1pl1pr1+relu", true},
      {"g" + c2 + "mb1ic" + c2 + "ih8iw14oc" + c2 + "kh5kw5sh2sw2pt2pb2pl2pr2", true},
      {"g" + few + "mb2ic" + few + "ih8iw6oc" + few + "kh3kw3sh2sw1pt1pb1pl1pr1", true},
      {"g" + c2 + "mb1ic" + c2 + "ih12iw12oc" + c2 + "kh3kw3sh2sw2dh2dw2pt2pb2pl2pr2", true},
      {"g" + c2 + "mb1ic" + c2 + "ih9iw9oc" + c2 + "kh3kw3sh2sw2pt1pb1pl1pr1", false},
  };
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule_for_pass(d, "bwd_data", t);
    INFO(sh.text << "  schedule: " << describe(s));
    CHECK(computes_depthwise_dx_in_place(d, s) == sh.in_place);
    JitBackwardDataKernel k(d, s, t);
    check(run_backward_data(k, d, true, 5));
    check(run_backward_data(k, d, false, 9));
  }
}

// Backward-weights with vectors along the input channels (gemm_input_lanes): unpadded 1x1
// layers only. The cases cover one item and several (a ragged last item among them),
// both loop orders, register tiles whose channel tile overhangs C/g or whose NR overhangs
// K/g (or exceeds it), stride 2, groups, ReLU and bias, X read in place and packed, and
// the threads' variant; elsewhere the strategy is refused and the GEMM runs. Every case is
// bit-exact on integer-valued data.
TEST_CASE("backward sweep: input-lane backward-weights of 1x1 layers", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  const int vl = t.vector_floats;
  auto ch = [](int n) { return std::to_string(n); };
  struct Case {
    std::string layer, words;
    bool input_lanes, x_in_place;
    std::string says;  // a line the plan must print (the loop order or threads taken)
  };
  const std::string one = "; 1 item(s) of", items = "items outermost",
                    tiles_out = "channel tiles outside the items";
  const Case cases[] = {
      // one item, X in place (MR = C), K/g ragged against NR
      {"mb3ic" + ch(2 * vl) + "ih7iw5oc" + ch(vl + 5) + "kh1kw1+bias", "mr=" + ch(2 * vl) + " nr=6 kc=0", true, true, one},
      // six items of 18 pixels over 105: the last is short by 3
      {"mb3ic" + ch(2 * vl) + "ih7iw5oc" + ch(vl + 5) + "kh1kw1+relu", "mr=" + ch(vl) + " nr=4 kc=20", true, false, items},
      // channel tiles outside the items, a ragged channel tile (3 vl + 3 in tiles of 2 vl), NR 9
      {"mb2ic" + ch(3 * vl + 3) + "ih6iw6oc" + ch(2 * vl) + "kh1kw1+relu+bias",
       "mr=" + ch(2 * vl) + " nr=9 kc=16 loop_order=channels_outer", true, false, tiles_out},
      // the same, items outermost
      {"mb2ic" + ch(3 * vl + 3) + "ih6iw6oc" + ch(2 * vl) + "kh1kw1", "mr=" + ch(2 * vl) + " nr=5 kc=16", true, false,
       items},
      // MR of 3 and 4 whole vectors, unclamped; NR 2 and 3
      {"mb2ic" + ch(3 * vl) + "ih5iw5oc" + ch(vl + 1) + "kh1kw1+bias", "mr=" + ch(3 * vl) + " nr=2 kc=0", true, true, one},
      {"mb2ic" + ch(8 * vl) + "ih4iw4oc" + ch(vl) + "kh1kw1+relu", "mr=" + ch(4 * vl) + " nr=3 kc=7", true, false, items},
      // stride 2; MR clamped to C
      {"mb2ic" + ch(vl) + "ih9iw9oc" + ch(2 * vl) + "kh1kw1sh2sw2+relu", "mr=" + ch(4 * vl) + " nr=1 kc=7", true, false,
       items},
      // groups, K/g below NR: one item; several, either loop order
      {"g2mb2ic" + ch(2 * vl) + "ih6iw6oc6kh1kw1+bias", "mr=" + ch(vl) + " nr=4 kc=0", true, false, one},
      {"g2mb2ic" + ch(2 * vl) + "ih6iw6oc6kh1kw1+relu", "mr=" + ch(vl) + " nr=2 kc=20", true, false, items},
      {"g3mb2ic" + ch(3 * vl) + "ih5iw5oc9kh1kw1", "mr=" + ch(vl) + " nr=2 kc=20 loop_order=channels_outer", true, false,
       tiles_out},
      // K below NR, several items read in place
      {"mb2ic" + ch(vl) + "ih10iw10oc2kh1kw1", "mr=" + ch(vl) + " nr=8 kc=30", true, true, items},
      // the threads' variants: of the one item, per item, around the items, with groups
      {"mb3ic" + ch(4 * vl) + "ih5iw5oc40kh1kw1+bias+relu", "mr=" + ch(2 * vl) + " nr=6 kc=0 parallel=images", true,
       false, "parallel over the channel tiles"},
      {"mb4ic" + ch(3 * vl) + "ih8iw8oc" + ch(2 * vl) + "kh1kw1+relu", "mr=" + ch(vl) + " nr=5 kc=40 parallel=images",
       true, false, "parallel over the channel tiles of each item"},
      {"mb4ic" + ch(3 * vl) + "ih8iw8oc" + ch(2 * vl) + "kh1kw1",
       "mr=" + ch(vl) + " nr=6 kc=40 loop_order=channels_outer parallel=pixels", true, false,
       "parallel over the channel tiles"},
      {"g2mb2ic" + ch(4 * vl) + "ih6iw6oc12kh1kw1+bias", "mr=" + ch(vl) + " nr=4 kc=24 parallel=images", true, false,
       "parallel over the channel tiles of each item"},
      // refused: a 3x3 window, a padded 1x1, too few input channels per group
      {"mb2ic" + ch(vl) + "ih6iw6oc" + ch(vl) + "kh3kw3ph1pw1", "mr=" + ch(vl) + " nr=4", false, false, ""},
      {"mb2ic" + ch(vl) + "ih6iw6oc" + ch(vl) + "kh1kw1ph1pw1", "mr=" + ch(vl) + " nr=4", false, false, ""},
      {"mb2ic" + ch(vl - 1) + "ih6iw6oc" + ch(vl) + "kh1kw1", "mr=" + ch(vl) + " nr=4", false, false, ""},
  };
  for (const Case& c : cases) {
    const ConvDescriptor d = parse_descriptor(c.layer);
    ConvSchedule s;
    s.mr = vl;
    apply_schedule_overrides("strategy=gemm_input_lanes " + c.words, &s);
    INFO(c.layer << "  schedule: " << describe(s));
    CHECK(input_lane_weights_apply(d, t) == c.input_lanes);
    CHECK(weights_plan_says(d, s, t, "input-lane tile") == c.input_lanes);
    CHECK(weights_plan_says(d, s, t, "gemm_input_lanes refused") == !c.input_lanes);
    CHECK(weights_plan_says(d, s, t, "X read in place") == c.x_in_place);
    if (!c.says.empty()) CHECK(weights_plan_says(d, s, t, c.says.c_str()));
    JitBackwardWeightsKernel k(d, s, t);
    check(run_backward_weights(k, d, true, 3));
    check(run_backward_weights(k, d, false, 5));
  }
}

// The AVX-512 default takes the input-lane tile on 1x1 layers of >= 256 input channels
// per group and <= 2048 pixels per call (one item up to 512), unpadded; not past either
// bound, nor padded, nor with 16 vector registers.
TEST_CASE("backward-weights default: gemm_input_lanes where few pixels meet many input channels", "[bwd_sweep]") {
  const TargetInfo wide = target_info("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41");
  const TargetInfo avx2 = default_target();
  auto takes = [](const char* layer, const TargetInfo& t) {
    return analytic_schedule_for_pass(parse_descriptor(layer), "bwd_weights", t).strategy == Strategy::GemmInputLanes;
  };
  CHECK(takes("mb8ic2048ih7oc512kh1", wide));
  CHECK(takes("mb8ic1024ih14oc2048kh1sh2", wide));
  CHECK(takes("g2mb2ic512ih4oc64kh1", wide));
  CHECK_FALSE(takes("mb8ic2048ih7oc512kh1", avx2));
  CHECK(takes("mb8ic1024ih14oc256kh1", wide));           // 1568 pixels: items of 56
  CHECK_FALSE(takes("mb8ic512ih28oc128kh1", wide));      // 6272 pixels
  CHECK_FALSE(takes("mb8ic128ih7oc512kh1", wide));       // 128 input channels
  CHECK_FALSE(takes("g4mb8ic512ih7oc512kh1", wide));     // 128 per group
  CHECK_FALSE(takes("mb8ic2048ih7oc512kh1ph1", wide));   // padded
  CHECK_FALSE(takes("mb8ic2048ih7oc512kh3ph1", wide));   // 3x3
  CHECK_FALSE(takes("mb8ic256ih56oc64oh56kh1", wide));   // 25088 pixels
  CHECK_FALSE(takes("mb8ic128ih14oc512oh14kh1", wide));  // 128 input channels, items
  CHECK_FALSE(takes("mb8ic512ih14oc256oh16kh1ph1", wide));  // padded, items
  CHECK_FALSE(takes("mb8ic1024ih14oc256kh1", avx2));
  auto item = [&](const char* layer) {
    return analytic_schedule_for_pass(parse_descriptor(layer), "bwd_weights", wide).kc;
  };
  // Up to 512 pixels per call one item (ResNet-50 at 7x7), up to 2048 items of 56 (14x14).
  for (const char* layer : {"mb8ic2048ih7oc512oh7kh1", "mb8ic512ih7oc2048oh7kh1", "mb8ic1024ih14oc2048kh1sh2"}) {
    INFO(layer);
    CHECK(takes(layer, wide));
    CHECK(item(layer) == 0);
  }
  for (const char* layer : {"mb8ic1024ih14oc256oh14kh1", "mb8ic512ih14oc256oh14kh1", "mb8ic512ih28oc1024kh1sh2"}) {
    INFO(layer);
    CHECK(takes(layer, wide));
    CHECK(item(layer) == 56);
  }
  const ConvSchedule s = analytic_schedule_for_pass(parse_descriptor("mb8ic2048ih7oc512kh1"), "bwd_weights", wide);
  CHECK(s.mr == 64);
  CHECK(s.nr == 6);
  CHECK(s.kc == 0);
  CHECK(s.partitions == 1);
  CHECK(parallel_variant(parse_descriptor("mb8ic2048ih7oc512kh1"), "bwd_weights", s, Parallel::Images).partitions == 1);
}

TEST_CASE("gemm_input_lanes is refused by the forward-type passes", "[bwd_sweep]") {
  const TargetInfo t = sweep_target();
  const ConvDescriptor d = parse_descriptor("mb2ic" + std::to_string(t.vector_floats) + "ih6iw6oc8kh1kw1");
  ConvSchedule s;
  s.mr = t.vector_floats;
  s.strategy = Strategy::GemmInputLanes;
  CHECK_THROWS_WITH(build_backward_data(d, s, t), Catch::Contains("backward-weights tile"));
  CHECK_THROWS_WITH(build_forward(d, s, t), Catch::Contains("backward-weights tile"));
}
