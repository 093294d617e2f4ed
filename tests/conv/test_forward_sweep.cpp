// The forward correctness sweep: every edge class, every schedule field value, checked
// bit for bit on integer-valued data and to a tight tolerance on real data, with guard
// zones around the output. Kernels are JIT-compiled from the generator's own code.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <set>

#include "generator/conv/jit.h"
#include "generator/conv/pipeline.h"
#include "schedules/kernel_plan.h"
#include "schedules/schedule_records.h"
#include "schedules/weight_panels.h"
#include "tests/common/guarded_input.h"
#include "tests/common/guarded_output.h"
#include "tests/common/reference_conv.h"
#include "tests/conv/sweep_plan.h"

using namespace convgen;
using namespace convgen::test;

namespace {

struct Tensors {
  std::vector<float> x, w, b, r;  // r: the +residual operand, NHWK like the output
};

Tensors make_inputs(const ConvDescriptor& d, bool integer_valued, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensors t;
  t.x.resize(d.mb * d.ih * d.iw * d.ic);
  t.w.resize(d.oc * d.icg() * d.kh * d.kw);
  t.b.resize(d.oc);
  if (d.residual) t.r.resize(d.mb * d.oh() * d.ow() * d.oc);
  auto fill = [&](std::vector<float>& v, int range) {
    std::uniform_int_distribution<int> ints(-range, range);
    std::uniform_real_distribution<float> reals(-1.0f, 1.0f);
    for (auto& e : v) e = integer_valued ? float(ints(rng)) : reals(rng);
  };
  fill(t.x, 3);
  fill(t.w, 2);
  fill(t.b, 4);
  fill(t.r, 5);
  return t;
}

struct Outcome {
  size_t mismatches = 0;
  size_t guard_damage = 0;
  std::string read_outside;  // which input the kernel read outside of, and how far ("" if none)
  std::string first_mismatch;
};

// Runs the kernel on one data set and compares with the reference. Integer-valued data
// must match exactly; real data within a bound on fp32 rounding of the sum.
// `misalign`: floats the output starts past a 64-byte boundary.
Outcome run_and_compare(JitForwardKernel& kernel, const ConvDescriptor& d, bool integer_valued, uint32_t seed,
                        size_t misalign = 0) {
  const Tensors in = make_inputs(d, integer_valued, seed);
  const ReferenceResult ref = reference_forward(d, in.x, in.w, in.b, in.r);
  // +outstride(S): the output is the last oc channels of an S-channel tensor; the others
  // must keep their sentinel.
  const int64_t stride = d.out_pixel_stride(), first = stride - d.oc, pixels = int64_t(ref.y.size()) / d.oc;
  GuardedOutput out(static_cast<size_t>(pixels * stride), misalign);
  // pack_weights=prepacked: the caller packs the panels the kernel reads.
  const WeightPanels& panels = kernel.weight_panels();
  std::vector<float> packed(static_cast<size_t>(panels.floats), std::nanf(""));
  if (!panels.empty()) pack_weight_panels(panels, in.w.data(), packed.data());
  // Every input against a faulting page: a read past either end fails the case.
  const GuardedInput::Edge edge = guarded_edge(integer_valued);
  const GuardedInput x(in.x, edge), w(panels.empty() ? in.w : packed, edge), b(in.b, edge), r(in.r, edge);
  Outcome o;
  o.read_outside = read_outside_inputs(
      [&] {
        kernel.run(x.data(), w.data(), d.bias ? b.data() : nullptr, out.data() + first, d.residual ? r.data() : nullptr);
      },
      {{"x", &x}, {"w", &w}, {"bias", &b}, {"residual", &r}});
  if (!o.read_outside.empty()) return o;
  o.guard_damage = out.damaged_guards();
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < first; ++c) o.guard_damage += !GuardedOutput::is_sentinel(out[size_t(p * stride + c)]);
  const double terms = double(d.icg() * d.kh * d.kw + 1 + (d.residual ? 1 : 0));
  for (size_t i = 0; i < ref.y.size(); ++i) {
    const float got = out[size_t(int64_t(i) / d.oc * stride + first + int64_t(i) % d.oc)];
    // HardSwish and Silu round differently from their definition (generator/conv/epilogue.h):
    // 8 float ulps of the result on top; their slopes stay below 1.2, so twice the sum's
    // bound covers its rounding after them.
    const double activation_bound = activation_is_exact(d) ? 0.0 : inexact_activation_bound(ref.y[i]);
    bool ok;
    if (integer_valued) {
      ok = activation_is_exact(d) ? double(got) == ref.y[i] : std::fabs(double(got) - ref.y[i]) <= activation_bound;
    } else {
      const double slope = d.activation == Activation::LeakyRelu ? std::max(1.0, double(std::fabs(d.leaky_alpha))) : 2.0;
      const double bound = slope * 2.0 * terms * 6e-8 * ref.abs_sum[i] + activation_bound + 1e-30;
      ok = std::fabs(double(got) - ref.y[i]) <= bound;
    }
    if (!ok && o.mismatches++ == 0)
      o.first_mismatch = "output " + std::to_string(i) + ": got " + std::to_string(got) + ", want " +
                         std::to_string(ref.y[i]);
  }
  return o;
}

void check_exactness_precondition(const ConvDescriptor& d) {
  const Tensors in = make_inputs(d, true, 1);
  const ReferenceResult ref = reference_forward(d, in.x, in.w, in.b, in.r);
  double worst = 0;
  for (double m : ref.abs_sum) worst = std::max(worst, m);
  INFO("sum |x*w| must stay below 2^24 for exact fp32 sums");
  REQUIRE(worst < double(1 << 24));
}

// One kernel, bit for bit on integer-valued data and to the rounding bound on real data.
void check_kernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t) {
  check_exactness_precondition(d);
  JitForwardKernel kernel(d, s, t);
  auto check = [](const Outcome& o) {
    if (!o.read_outside.empty()) FAIL_CHECK("a read outside the inputs: " << o.read_outside);
    INFO(o.first_mismatch);
    CHECK(o.mismatches == 0);
    CHECK(o.guard_damage == 0);
  };
  for (const bool integer_valued : {true, false})
    check(run_and_compare(kernel, d, integer_valued, integer_valued ? 7 : 11));
  // Streaming stores: the ordinary variant on an output off the 64-byte boundary too.
  if (streams_output("fwd", s)) {
    INFO("output a float past a 64-byte boundary");
    check(run_and_compare(kernel, d, true, 7, 1));
  }
}

// The forward epilogue's other activations take turns on the cases without a ReLU, a
// residual input on every third case, with each activation in turn, and an output that
// is a channel slice of a wider tensor on every fourth (the shared cases stay
// bias-and-ReLU and dense for the backward sweep, which knows those alone).
std::vector<ConvDescriptor> with_epilogues(const std::vector<SweepCase>& cases) {
  std::vector<ConvDescriptor> out;
  size_t turn = 0;
  for (const SweepCase& c : cases) {
    ConvDescriptor d = c.descriptor;
    d.residual = out.size() % 3 == 1;
    if (out.size() % 4 == 2) d.out_stride = d.oc + 5;  // a slice of a wider tensor, pixels unaligned
    if (!d.relu) {
      switch (turn++ % 5) {
        case 1: d.activation = Activation::Clip, d.clip_lo = -3.5f, d.clip_hi = 6.0f; break;
        case 2: d.activation = Activation::LeakyRelu, d.leaky_alpha = 0.01f; break;
        case 3: d.activation = Activation::HardSwish; break;
        case 4: d.activation = Activation::Silu; break;
        default: break;
      }
    }
    out.push_back(d);
  }
  return out;
}

void run_class(const std::string& cls) {
  const TargetInfo t = sweep_target();
  const std::vector<SweepCase> cases = sweep_cases(cls);
  const std::vector<ConvDescriptor> layers = with_epilogues(cases);
  for (size_t i = 0; i < cases.size(); ++i) {
    INFO(layers[i].to_string() << "  schedule: " << describe(cases[i].schedule));
    check_kernel(layers[i], cases[i].schedule, t);
  }
}

}  // namespace

TEST_CASE("forward sweep: kernel_1x1", "[sweep]") { run_class("kernel_1x1"); }
TEST_CASE("forward sweep: kernel_3x3", "[sweep]") { run_class("kernel_3x3"); }
TEST_CASE("forward sweep: kernel_5x5", "[sweep]") { run_class("kernel_5x5"); }
TEST_CASE("forward sweep: kernel_7x7", "[sweep]") { run_class("kernel_7x7"); }
TEST_CASE("forward sweep: kernel_11x11", "[sweep]") { run_class("kernel_11x11"); }
TEST_CASE("forward sweep: non_square_kernel", "[sweep]") { run_class("non_square_kernel"); }
TEST_CASE("forward sweep: stride", "[sweep]") { run_class("stride"); }
TEST_CASE("forward sweep: stride_dilation", "[sweep]") { run_class("stride_dilation"); }
TEST_CASE("forward sweep: border_columns", "[sweep]") { run_class("border_columns"); }
TEST_CASE("forward sweep: asymmetric_padding", "[sweep]") { run_class("asymmetric_padding"); }
TEST_CASE("forward sweep: dilation", "[sweep]") { run_class("dilation"); }
TEST_CASE("forward sweep: groups", "[sweep]") { run_class("groups"); }
TEST_CASE("forward sweep: depthwise", "[sweep]") { run_class("depthwise"); }
TEST_CASE("forward sweep: depthwise_multiplier", "[sweep]") { run_class("depthwise_multiplier"); }
TEST_CASE("forward sweep: odd_sizes", "[sweep]") { run_class("odd_sizes"); }
TEST_CASE("forward sweep: conv1d", "[sweep]") { run_class("conv1d"); }

TEST_CASE("sweep plan: every edge class has a test case and every schedule value runs in every class", "[plan]") {
  const ScheduleSpace space = schedule_space(sweep_target());
  size_t total = 0;
  for (const auto& cls : edge_classes()) {
    const auto cases = sweep_cases(cls);
    total += cases.size();
    std::map<std::string, std::set<std::string>> seen;
    for (const auto& c : cases) {
      const ConvSchedule& s = c.schedule;
      seen["strategy"].insert(to_string(s.strategy));
      seen["mr"].insert(std::to_string(s.mr));
      seen["nr"].insert(std::to_string(s.nr));
      seen["kc"].insert(std::to_string(s.kc));
      seen["mc"].insert(std::to_string(s.mc));
      seen["nc"].insert(std::to_string(s.nc));
      seen["layout"].insert(to_string(s.layout));
      seen["pack_input"].insert(to_string(s.pack_input));
      seen["pack_weights"].insert(to_string(s.pack_weights));
      seen["loop_order"].insert(to_string(s.loop_order));
      seen["parallel"].insert(to_string(s.parallel));
      seen["partitions"].insert(std::to_string(s.partitions));
      seen["output_stores"].insert(to_string(s.output_stores));
    }
    INFO("edge class " << cls);
    CHECK(seen["strategy"].size() == sweep_strategies(sweep_target()).size());
    CHECK(seen["mr"].size() == space.mr.size());
    CHECK(seen["nr"].size() == space.nr.size());
    CHECK(seen["kc"].size() == space.kc.size());
    CHECK(seen["mc"].size() == space.mc.size());
    CHECK(seen["nc"].size() == space.nc.size());
    CHECK(seen["layout"].size() == space.layout.size());
    CHECK(seen["pack_input"].size() == space.pack_input.size());
    CHECK(seen["pack_weights"].size() == space.pack_weights.size());
    CHECK(seen["loop_order"].size() == space.loop_order.size());
    CHECK(seen["parallel"].size() == space.parallel.size());
    CHECK(seen["partitions"].size() == space.partitions.size());
    CHECK(seen["output_stores"].size() == space.output_stores.size());
  }
  CHECK(total >= 200);
}

TEST_CASE("sweep plan: every fused activation, the residual input and a sliced output run in every edge class",
          "[plan]") {
  std::set<std::string> residual_with;
  for (const auto& cls : edge_classes()) {
    std::set<std::string> seen;
    int residuals = 0, slices = 0;
    for (const ConvDescriptor& d : with_epilogues(sweep_cases(cls))) {
      slices += d.out_pixel_stride() != d.oc;
      const std::string act = d.relu ? "relu" : activation_flag(d);
      seen.insert(act);
      if (d.residual) ++residuals, residual_with.insert(act);
    }
    INFO("edge class " << cls);
    CHECK(seen.size() == 6);  // none, relu, clip, leakyrelu, hardswish, silu
    CHECK(residuals >= 2);
    CHECK(slices >= 1);
  }
  CHECK(residual_with.size() == 6);
}

TEST_CASE("sweep plan: the grouped strategy really runs, not only its refusal", "[plan]") {
  // The generator refuses grouped (and runs depthwise) unless C/g divides the vector
  // width; the sweep must still run the grouped kernel itself on grouped, depthwise and
  // depthwise-multiplier shapes, with ragged group tiles (groups not a multiple of the
  // groups per vector) among them.
  const TargetInfo t = sweep_target();
  std::map<std::string, int> runs;
  int ragged = 0, several_kg_tiles = 0;
  for (const auto& cls : edge_classes()) {
    for (const auto& c : sweep_cases(cls)) {
      if (c.schedule.strategy != Strategy::Grouped || !grouped_strategy_applies(c.descriptor, t)) continue;
      ++runs[cls];
      const int64_t groups_per_vector = t.vector_floats / c.descriptor.icg();
      if (c.descriptor.g % groups_per_vector != 0) ++ragged;
      if (grouped_outputs_per_tile(c.descriptor, c.schedule, t) < c.descriptor.ocg()) ++several_kg_tiles;
    }
  }
  for (const char* cls : {"groups", "depthwise", "depthwise_multiplier"}) {
    INFO("edge class " << cls);
    CHECK(runs[cls] >= 3);
  }
  CHECK(ragged >= 3);
  CHECK(several_kg_tiles >= 1);
}

TEST_CASE("analytic default: narrow groups take the grouped strategy when C/g divides the vector", "[plan]") {
  const TargetInfo t = sweep_target();
  CHECK(analytic_schedule(parse_descriptor("g32mb8ic128ih56oc128oh56kh3ph1"), t).strategy == Strategy::Grouped);
  CHECK(analytic_schedule(parse_descriptor("g32mb8ic96ih56oc128oh56kh3ph1"), t).strategy == Strategy::Depthwise);
  CHECK(analytic_schedule(parse_descriptor("g32mb8ic32ih56oc32oh56kh3ph1"), t).strategy == Strategy::Depthwise);
  CHECK(analytic_schedule(parse_descriptor("g2mb8ic128ih56oc128oh56kh3ph1"), t).strategy == Strategy::Gemm);
}

// The analytic default's tiles inside rows, run as chosen: on 16-register targets 4
// vectors x 3 pixels on 8-pixel rows (pixels innermost in the micro-kernel) and 2 x 6
// on 16-pixel rows; with 32 registers (sweep.avx512) 8-pixel tiles of 2 vectors. Rows of
// 8 and 16 with left/right padding, bias and ReLU, the input read in place.
TEST_CASE("analytic default: tiles inside padded rows run exact as chosen", "[sweep]") {
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    int vectors16, nr16;  // expected tile with 16 registers, MR in vectors
    int vectors32, nr32;  // and with 32
  };
  const Shape shapes[] = {{"mb2ic64ih8iw8oc32kh5kw5pt2pb2pl2pr2+bias+relu", 4, 3, 2, 8},
                          {"mb1ic32ih16iw16oc32kh5kw5pt2pb2pl2pr2", 2, 6, 2, 8},
                          {"mb2ic32ih8iw8oc64kh3kw3pt1pb1pl1pr1+bias", 4, 3, 2, 8}};
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule(d, t);
    INFO(sh.text << "  schedule: " << describe(s));
    CHECK(skips_padded_columns(d, s, t));
    CHECK(s.pack_input == PackInput::None);  // no tap reads padding: the input in place
    const bool wide = t.vector_registers >= 32;
    CHECK(s.mr == (wide ? sh.vectors32 : sh.vectors16) * t.vector_floats);
    CHECK(s.nr == (wide ? sh.nr32 : sh.nr16));
    check_kernel(d, s, t);
  }
}

// 16-lane tiles that would pad the channels by over a quarter take 4 vectors x 6 pixels
// (4 x 4 with few input channels) or 2 x 8; 1x1 kernels reducing over twice their
// outputs take 4 x 6 reading the input in place on images of 14x14 and more; 2- and
// 3-vector tiles widen to 2 x 14 where the rows allow (sweep.avx512 checks the choices;
// every target runs the chosen kernels exact).
TEST_CASE("analytic default: 32-register tile choices run exact as chosen", "[sweep]") {
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    int vectors32, nr32;  // expected with 32 registers, MR in vectors
  };
  const Shape shapes[] = {{"mb2ic64ih12iw12oc64kh1kw1+bias", 4, 6},
                          {"mb1ic3ih17iw17oc64kh3kw3pt1pb1pl1pr1+relu", 4, 4},
                          {"mb2ic16ih13iw11oc24kh5kw5sh3sw3pt1pb1pl1pr1", 2, 8},
                          // 1x1 reducing over twice its outputs: 4 x 6 in place from 14x14 on
                          {"mb1ic256ih14iw14oc128kh1kw1+bias", 4, 6},
                          // 2 x 14 (28 accumulators): below 14x14, over rows of 14, of 13
                          {"mb1ic256ih7iw7oc128kh1kw1", 2, 14},
                          {"mb1ic64ih14iw14oc64kh3kw3pt1pb1pl1pr1+relu", 2, 14},
                          {"mb2ic32ih13iw13oc96kh3kw3pt1pb1pl1pr1", 2, 14}};
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    const ConvSchedule s = analytic_schedule(d, t);
    INFO(sh.text << "  schedule: " << describe(s));
    if (t.vector_registers >= 32) {
      CHECK(s.mr == sh.vectors32 * t.vector_floats);
      CHECK(s.nr == sh.nr32);
      if (d.kh * d.kw == 1 && sh.vectors32 == 4) CHECK(s.pack_input == PackInput::None);
    }
    check_kernel(d, s, t);
  }
}

// Register tiles whose NR divides the output width never straddle rows, and the kernel
// states their taps from the tile's first pixel (row_aligned_tile). Exact whatever the
// staging, reduction blocking, pixel blocks, threads and epilogue; the cycled sweep
// meets them by chance, these for certain.
TEST_CASE("row-aligned register tiles run exact", "[sweep]") {
  const TargetInfo t = sweep_target();
  struct Case {
    const char* layer;
    const char* schedule;  // field=value words over a GEMM tile of two vectors
  };
  const Case cases[] = {
      // an RGB stem in small: 3 channels, stride 2, top/left padding, 14-pixel rows
      {"mb2ic3ih28iw28oc32kh3kw3sh2sw2pt1pb1pl1pr1+bias+relu", "nr=7 pack_input=image"},
      {"mb2ic3ih28iw28oc32kh3kw3sh2sw2pt1pb1pl1pr1+bias+relu", "nr=7 pack_input=rows nc=21"},
      {"mb2ic3ih28iw28oc32kh3kw3sh2sw2pt1pb1pl1pr1", "nr=7 pack_input=none parallel=pixels"},
      {"mb2ic3ih28iw28oc32kh3kw3sh2sw2pt1pb1pl1pr1", "nr=2 pack_input=panel"},
      // channels blocked by kc, pixel blocks, 12-pixel rows, a residual
      {"mb1ic20ih12iw12oc24kh3kw3pt1pb1pl1pr1+residual", "nr=4 kc=8 pack_input=image"},
      {"mb1ic20ih12iw12oc24kh3kw3pt1pb1pl1pr1", "nr=6 nc=30 pack_input=rows loop_order=channels_outer"},
      {"mb2ic16ih12iw12oc40kh3kw3pt1pb1pl1pr1+relu", "nr=3 parallel=images"},
      // 1x1 over 32-pixel rows, one vector of channels, unpadded input read in place
      {"mb2ic8ih4iw32oc16kh1kw1+bias", "nr=8 pack_input=none"},
      // unpadded input staged per image and per row band, exact. (Until bounds inference
      // was told the columns' range, such staging read columns past the image; the
      // small-images trainer tests under check-sanitizers caught it, these cases do not:
      // their buffers absorb the over-read.)
      {"mb2ic20ih12iw12oc24kh3kw3", "nr=5 pack_input=image"},
      {"mb1ic3ih16iw16oc32kh3kw3sh2sw2", "nr=7 pack_input=rows nc=14"},
  };
  for (const Case& c : cases) {
    const ConvDescriptor d = parse_descriptor(c.layer);
    ConvSchedule s;
    s.strategy = Strategy::Gemm;
    s.mr = 2 * t.vector_floats;
    apply_schedule_overrides(c.schedule, &s);
    INFO(c.layer << "  schedule: " << describe(s));
    REQUIRE(row_aligned_tile(d, s) == s.nr);
    check_kernel(d, s, t);
  }
}

TEST_CASE("sweep plan: block sizes that do and do not divide the extents are both exercised", "[plan]") {
  bool kc_divides = false, kc_not = false, nc_divides = false, nc_not = false;
  for (const auto& c : full_sweep()) {
    const auto& d = c.descriptor;
    if (c.schedule.kc > 0 && c.schedule.kc < d.icg()) (d.icg() % c.schedule.kc ? kc_not : kc_divides) = true;
    const int64_t pq = d.oh() * d.ow();
    if (c.schedule.nc > 0 && c.schedule.nc < pq) (pq % c.schedule.nc ? nc_not : nc_divides) = true;
  }
  CHECK(kc_divides);
  CHECK(kc_not);
  CHECK(nc_divides);
  CHECK(nc_not);
}

TEST_CASE("forward sweep fails on a deliberately broken kernel", "[sweep][broken]") {
  // The broken kernel reads the row below the image instead of zero padding. Every case
  // with bottom padding that the output actually reaches must be caught.
  const TargetInfo t = sweep_target();
  ForwardBuildOptions broken;
  broken.inject_padding_bug = true;
  int checked = 0;
  for (const auto& cls : {"kernel_3x3", "asymmetric_padding", "dilation", "depthwise"}) {
    for (const SweepCase& c : sweep_cases(cls)) {
      const ConvDescriptor& d = c.descriptor;
      const int64_t last_row_read = (d.oh() - 1) * d.sh + (d.kh - 1) * d.dh - d.pt;
      if (last_row_read < d.ih) continue;  // the bottom padding is never read
      INFO(d.to_string() << "  schedule: " << describe(c.schedule));
      JitForwardKernel kernel(d, c.schedule, t, broken);
      const Outcome o = run_and_compare(kernel, d, true, 7);
      CHECK(o.mismatches > 0);
      if (++checked == 12) return;
    }
  }
  CHECK(checked >= 8);
}

TEST_CASE("sweep plan: the padded-row skipping path runs in many cases and classes", "[plan]") {
  const TargetInfo t = sweep_target();
  int cases = 0;
  std::set<std::string> classes;
  for (const auto& c : full_sweep()) {
    if (!skips_padded_rows(c.descriptor, c.schedule, t)) continue;
    ++cases;
    classes.insert(c.edge_class);
  }
  CHECK(cases >= 15);
  CHECK(classes.size() >= 6);
}

TEST_CASE("sweep plan: the padded-column pruning path runs in many cases and classes", "[plan]") {
  const TargetInfo t = sweep_target();
  int cases = 0;
  std::set<std::string> classes;
  for (const auto& c : full_sweep()) {
    if (!skips_padded_columns(c.descriptor, c.schedule, t)) continue;
    ++cases;
    classes.insert(c.edge_class);
  }
  INFO(cases << " cases in " << classes.size() << " classes");
  CHECK(cases >= 12);
  CHECK(classes.count("border_columns") == 1);
}

TEST_CASE("sweep plan: the in-place paths with partitioned borders run in many cases and classes", "[plan]") {
  // Depthwise, and GEMM over few channels (taps unrolled): both must meet ragged rows.
  for (const Strategy strategy : {Strategy::Depthwise, Strategy::Gemm}) {
    int cases = 0, ragged_rows = 0;
    std::set<std::string> classes;
    for (const auto& c : full_sweep()) {
      if (c.schedule.strategy != strategy ||
          !partitions_padding_borders(c.descriptor, c.schedule, sweep_target(), /*output_staged=*/false))
        continue;
      ++cases;
      classes.insert(c.edge_class);
      if (c.descriptor.ow() % c.schedule.nr != 0) ++ragged_rows;
    }
    INFO(to_string(strategy) << ": " << cases << " cases in " << classes.size() << " classes, " << ragged_rows
                             << " with NR not dividing the row");
    CHECK(cases >= 12);
    if (strategy == Strategy::Depthwise) CHECK(classes.count("depthwise") == 1);
    CHECK(classes.size() >= 4);
    CHECK(ragged_rows >= 3);
  }
}

TEST_CASE("parallel over pixels forks once per image: channel blocks or row bands outside them, exact", "[sweep]") {
  // A pixel loop parallel inside a channel-block loop forked once per block. Each shape
  // takes one of the two forms, on the sweep's thread count, and must match bit for bit.
  const TargetInfo t = sweep_target();
  struct Shape {
    const char* text;
    const char* words;
    const char* form;  // the generator's --verbose line
  };
  const Shape shapes[] = {
      // depthwise, rows of every channel beyond L1: 24 blocks of one tile
      {"g384mb2ic384ih14iw14oc384kh3kw3pt1pb1pl1pr1+bias", "mr=16 mc=16 parallel=pixels",
       "parallel over the channel blocks of each image"},
      // depthwise, 6 blocks: 19 rows in bands of 2, the last one short
      {"g96mb2ic96ih19iw23oc96kh3kw3pt1pb1pl1pr1+relu", "mr=16 mc=16 parallel=pixels", "in bands of 2 rows"},
      // GEMM, pixels outer: 3 channel blocks, no pixel blocks: bands of register tiles
      {"mb2ic40ih9iw11oc96kh1kw1+bias", "mr=16 nr=4 mc=32 nc=0 loop_order=pixels_outer parallel=pixels", "tiles for the threads"},
      // GEMM, 3x3, pixels outer, 16 channel blocks
      {"mb1ic24ih7iw9oc256kh3kw3pt1pb1pl1pr1", "mr=16 nr=4 mc=16 nc=0 loop_order=pixels_outer parallel=pixels",
       "parallel over the channel blocks of each image"}};
  for (const Shape& sh : shapes) {
    const ConvDescriptor d = parse_descriptor(sh.text);
    ConvSchedule s = analytic_schedule(d, t);
    apply_schedule_overrides(sh.words, &s);
    INFO(sh.text << "  schedule: " << describe(s));
    std::vector<std::string> why;
    build_forward(d, s, t, &why);
    std::string lines;
    for (const auto& l : why) lines += l + "\n";
    INFO(lines);
    CHECK(lines.find(sh.form) != std::string::npos);
    check_kernel(d, s, t);
  }
}

TEST_CASE("sweep plan: first-layer inputs are staged as flat rows in many cases and classes", "[plan]") {
  // Staged padded inputs with fewer channels than a vector in one group take the flat
  // (column, channel) rows (stages_flat_input_rows): per image and per row band, several
  // strategies and strides among them.
  const TargetInfo t = sweep_target();
  int cases = 0, row_bands = 0, strided = 0;
  std::set<std::string> classes, strategies;
  for (const auto& c : full_sweep()) {
    if (!stages_flat_input_rows(c.descriptor, c.schedule, t)) continue;
    ++cases;
    classes.insert(c.edge_class);
    strategies.insert(to_string(c.schedule.strategy));
    if (c.schedule.pack_input == PackInput::Rows) ++row_bands;
    if (c.descriptor.sh > 1 || c.descriptor.sw > 1) ++strided;
  }
  INFO(cases << " cases in " << classes.size() << " classes, " << strategies.size() << " strategies; " << row_bands
             << " per row band, " << strided << " strided");
  CHECK(cases >= 12);
  CHECK(classes.size() >= 6);
  CHECK(strategies.size() >= 2);
  CHECK(row_bands >= 4);
  CHECK(strided >= 4);
}

TEST_CASE("analytic default: first layers stage flat padded rows and run exact; the broken kernel fails", "[sweep]") {
  // RGB and grey first layers at strides 1 and 2, a row whose floats leave a vector tail.
  const TargetInfo t = sweep_target();
  // (To 64 channels: to 32, 3x3/2 reads the input in place on 32 registers.)
  const char* shapes[] = {"mb2ic3ih17iw19oc64kh3kw3sh2sw2pt1pb1pl1pr1+bias+relu",
                          "mb1ic3ih12iw13oc24kh7kw7sh2sw2pt3pb3pl3pr3",
                          "mb2ic1ih10iw11oc32kh5kw5pt2pb2pl2pr2+bias"};
  ForwardBuildOptions broken;
  broken.inject_padding_bug = true;
  for (const char* text : shapes) {
    const ConvDescriptor d = parse_descriptor(text);
    const ConvSchedule s = analytic_schedule(d, t);
    INFO(text << "  schedule: " << describe(s));
    CHECK(stages_flat_input_rows(d, s, t));
    check_kernel(d, s, t);
    JitForwardKernel kernel(d, s, t, broken);
    CHECK(run_and_compare(kernel, d, true, 7).mismatches > 0);
  }
}

TEST_CASE("sweep plan: prepacked weights run in many cases and classes, strided backward-data with several panels",
          "[plan]") {
  const TargetInfo t = sweep_target();
  int forward = 0, strided = 0;
  std::set<std::string> classes;
  for (const auto& c : full_sweep()) {
    if (forward_weight_panels(c.descriptor, c.schedule, t).empty()) continue;
    ++forward;
    classes.insert(c.edge_class);
    if (backward_data_weight_panels(c.descriptor, c.schedule, t).panels.size() > 1) ++strided;
  }
  INFO(forward << " cases in " << classes.size() << " classes, " << strided << " with several residue classes");
  CHECK(forward >= 30);
  CHECK(classes.size() >= 10);
  CHECK(strided >= 5);
}
