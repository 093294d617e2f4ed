#include "tests/conv/sweep_plan.h"

#include <cstdlib>

#include <algorithm>
#include <random>
#include <stdexcept>

namespace convgen::test {

std::vector<Strategy> sweep_strategies(const TargetInfo& t) {
  std::vector<Strategy> out;
  for (Strategy v : schedule_space(t).strategy)
    if (v != Strategy::GemmInputLanes) out.push_back(v);
  return out;
}

TargetInfo sweep_target() {
  const char* t = std::getenv("CONVGEN_SWEEP_TARGET");
  return t && *t ? target_info(t) : default_target();
}


namespace {

constexpr int kCasesPerClass = 16;  // >= the largest number of values of any schedule field
constexpr int kForcedBorderCases = 11;
constexpr int kForcedInPlaceDepthwiseCases = 8;
constexpr int kForcedStridedDepthwiseCases = 8;
constexpr int kForcedInPlaceFewChannelCases = 8;

// Random small layer; `shape` then imposes the class's edge.
ConvDescriptor base_shape(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ConvDescriptor d;
  d.mb = pick(1, 3);
  d.ic = pick(1, 40);
  d.oc = pick(1, 56);
  d.ih = pick(5, 17);
  d.iw = pick(5, 17);
  d.kh = d.kw = 3;
  d.pt = d.pb = d.pl = d.pr = pick(0, 1);
  d.bias = pick(0, 1);
  d.relu = pick(0, 1);
  return d;
}

ConvSchedule schedule_for(int i, const TargetInfo& t);

void impose(const std::string& cls, int i, std::mt19937& rng, ConvDescriptor& d) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto square = [&](int k) { d.kh = d.kw = k; };
  if (cls == "kernel_1x1") {
    square(1);
    d.pt = d.pb = d.pl = d.pr = 0;
    d.sh = d.sw = 1 + i % 2;
    d.ic = pick(1, 70);
  } else if (cls == "kernel_3x3") {
    square(3);
  } else if (cls == "kernel_5x5") {
    square(5);
    d.pt = d.pb = d.pl = d.pr = pick(0, 2);
    d.ih = d.iw = pick(5, 14);
  } else if (cls == "kernel_7x7") {
    square(7);
    d.pt = d.pb = d.pl = d.pr = pick(0, 3);
    d.ih = d.iw = pick(7, 16);
    d.sh = d.sw = 1 + i % 2;
  } else if (cls == "kernel_11x11") {
    square(11);
    d.ih = d.iw = pick(11, 20);
    d.pt = d.pb = d.pl = d.pr = pick(0, 2);
    d.sh = d.sw = 1 + i % 4;
    d.ic = pick(1, 8);
  } else if (cls == "non_square_kernel") {
    const int shapes[][2] = {{1, 3}, {3, 1}, {1, 7}, {7, 1}, {5, 2}, {2, 5}, {3, 5}, {1, 5}};
    d.kh = shapes[i % 8][0];
    d.kw = shapes[i % 8][1];
    d.ih = pick(7, 14);
    d.iw = pick(7, 14);
    d.pt = d.pb = d.kh / 2;
    d.pl = d.pr = d.kw / 2;
  } else if (cls == "stride") {
    square(1 + 2 * pick(0, 1));
    d.sh = 1 + i % 4;
    d.sw = 1 + (i / 4) % 4;  // includes stride > kernel and sh != sw
    d.ih = pick(8, 19);
    d.iw = pick(8, 19);
  } else if (cls == "stride_dilation") {
    // Backward-data's residue classes: gcd(stride, dilation) > 1 leaves classes with no
    // taps; stride > kernel leaves input pixels no output reads.
    const int cases[][3] = {{2, 2, 3}, {2, 4, 3}, {4, 2, 3}, {3, 1, 2}, {4, 1, 3}, {2, 2, 2}, {3, 3, 2}, {5, 1, 1}};
    const auto& c = cases[i % 8];
    d.sh = d.sw = c[0];
    d.dh = d.dw = c[1];
    square(c[2]);
    if (i % 2) d.sw = 1, d.dw = 1;  // one axis strided only
    d.pt = pick(0, 2), d.pb = pick(0, 2), d.pl = pick(0, 2), d.pr = pick(0, 2);
    d.ih = pick(7, 17);
    d.iw = pick(7, 17);
  } else if (cls == "border_columns") {
    // Register tiles inside one output row whose kernel-column taps on left/right padding
    // are pruned per pixel (skips_padded_columns): the output width is NR times 1-4, the
    // padding mostly "same" so that stride-1 backward-data takes the path as well.
    const int nr = schedule_for(i, sweep_target()).nr;
    const int widths[] = {2, 3, 5, 7};
    d.kw = widths[i % 4];
    d.kh = 1 + 2 * pick(0, 2);
    d.dw = 1 + (i / 4) % 2;
    d.sw = (i % 8 == 7) ? 2 : 1;
    d.ic = (i % 3 == 0) ? pick(2, 15) : pick(16, 40);  // few channels: the fused-row refusal
    if (i % 6 == 5) d.g = 2, d.ic = 2 * pick(8, 20), d.oc = 2 * pick(4, 24);
    const int span = (d.kw - 1) * d.dw;
    d.pl = pick(0, span);
    d.pr = (i % 5 == 4) ? pick(0, span) : span - d.pl;  // mostly "same", some not
    if (d.pl + d.pr == 0) d.pr = 1;
    d.pt = d.pb = d.kh / 2;
    const int ow = nr * pick(1, 4);
    d.iw = std::max<int64_t>(1, (ow - 1) * d.sw + span + 1 - d.pl - d.pr);
  } else if (cls == "asymmetric_padding") {
    square(3 + 2 * (i % 2));
    d.pt = pick(0, 2);
    d.pb = pick(0, 3);
    d.pl = pick(0, 3);
    d.pr = pick(0, 2);
    if (d.pt == d.pb) d.pb = d.pt + 1;  // top != bottom in every case
    d.sh = d.sw = 1 + i % 3;
  } else if (cls == "dilation") {
    square(3);
    d.dh = 2 + i % 2;
    d.dw = 2 + (i / 2) % 2;
    d.pt = d.pb = d.dh;
    d.pl = d.pr = pick(0, d.dw);
    d.ih = d.iw = pick(9, 16);
    d.sh = d.sw = 1 + (i / 4) % 2;
  } else if (cls == "groups") {
    d.g = (i % 2) ? 2 : 4;
    d.ic = d.g * pick(1, 12);
    // The cases that ask for the grouped strategy (every third) get C/g = 2, 4 or 8,
    // which it can run, so ragged group tiles (g = 2 with 4 groups per vector) occur.
    if (i % 3 == 2) d.ic = d.g * (2 << ((i / 3) % 3));
    d.oc = d.g * pick(1, 20);
  } else if (cls == "depthwise") {
    d.g = d.ic = pick(1, 40);
    d.oc = d.ic;
    d.sh = d.sw = 1 + i % 2;
  } else if (cls == "depthwise_multiplier") {
    d.g = d.ic = pick(1, 24);
    d.oc = d.ic * (2 + i % 2);
    d.sh = d.sw = 1 + (i / 2) % 2;
  } else if (cls == "odd_sizes") {
    d.mb = 1;
    d.ic = pick(1, 5) * 2 + 1;
    d.oc = 8 * pick(1, 4) + pick(1, 7);  // never a multiple of the vector width
    d.ih = pick(1, 4) * 2 + 3;
    d.iw = pick(1, 6) * 2 + 1;
  } else if (cls == "conv1d") {
    d.ih = 1;
    d.kh = 1;
    d.pt = d.pb = 0;
    d.kw = 1 + 2 * pick(0, 3);
    d.iw = pick(d.kw, 40);
    d.pl = d.pr = pick(0, d.kw / 2);
    d.sh = 1;
    d.sw = 1 + i % 3;
    d.dw = 1 + (i / 3) % 2;
  } else {
    throw std::logic_error("unknown edge class " + cls);
  }
}

// The i-th case of a class takes value (i + f) mod |values| for field f: over any
// run of |values| consecutive cases every value appears once.
template <typename T>
T cycle(const std::vector<T>& values, int i, int field) {
  return values[static_cast<size_t>(i + field) % values.size()];
}

ConvSchedule schedule_for(int i, const TargetInfo& t) {
  const ScheduleSpace space = schedule_space(t);
  ConvSchedule s;
  s.strategy = cycle(sweep_strategies(t), i, 0);
  s.mr = cycle(space.mr, i, 1);
  s.nr = cycle(space.nr, i, 2);
  s.kc = cycle(space.kc, i, 3);
  s.mc = cycle(space.mc, i, 4);
  s.nc = cycle(space.nc, i, 5);
  s.layout = cycle(space.layout, i, 6);
  s.pack_input = cycle(space.pack_input, i, 7);
  s.pack_weights = cycle(space.pack_weights, i, 8);
  s.loop_order = cycle(space.loop_order, i, 9);
  s.parallel = cycle(space.parallel, i, 10);
  s.partitions = cycle(space.partitions, i, 11);  // backward-weights only
  // Streaming output stores on one case in eight: they compile two variants of the kernel
  // (and tests/object_code checks them on layers whose stores are whole vectors).
  s.output_stores = i % 8 == 1 ? OutputStores::Streaming : OutputStores::Cached;
  return s;
}

}  // namespace

const std::vector<std::string>& edge_classes() {
  static const std::vector<std::string> classes = {
      "kernel_1x1", "kernel_3x3", "kernel_5x5",  "kernel_7x7", "kernel_11x11",         "non_square_kernel",
      "stride",     "stride_dilation",  "border_columns", "asymmetric_padding", "dilation", "groups", "depthwise",
      "depthwise_multiplier",     "odd_sizes",   "conv1d"};
  return classes;
}

std::vector<SweepCase> sweep_cases(const std::string& edge_class) {
  std::seed_seq seed(edge_class.begin(), edge_class.end());
  std::mt19937 rng(seed);
  const TargetInfo t = sweep_target();
  std::vector<SweepCase> cases;
  // border_columns adds cases whose schedule takes the pruning path for certain (the
  // cycled ones reach it only by chance): GEMM, whole reduction, no pixel blocks.
  // depthwise adds cases that read the input in place with partitioned borders (depthwise
  // strategy, unpacked), NR cycling so that some tiles divide the row, some shift inwards
  // and some are wider than it; then strided ones whose rows and columns hold whole
  // periods of the strides (2, 3 and 2x1), so that backward-data computes dX pixel by
  // pixel in place (computes_depthwise_dx_in_place). stride adds GEMM cases over few
  // channels read in place, taps unrolled and borders partitioned (first layers:
  // partitions_padding_borders), over windows, strides and paddings.
  const int forced = edge_class == "border_columns" ? kForcedBorderCases
                     : edge_class == "depthwise"    ? kForcedInPlaceDepthwiseCases + kForcedStridedDepthwiseCases
                     : edge_class == "stride"       ? kForcedInPlaceFewChannelCases
                                                    : 0;
  for (int i = 0; i < kCasesPerClass + forced; ++i) {
    ConvDescriptor d = base_shape(rng);
    impose(edge_class, i, rng, d);
    const bool strided_depthwise =
        edge_class == "depthwise" && i >= kCasesPerClass + kForcedInPlaceDepthwiseCases;
    if (strided_depthwise) {
      const int j = i - kCasesPerClass - kForcedInPlaceDepthwiseCases;
      d.sh = j % 4 == 3 ? 2 : 2 + j % 2;
      d.sw = j % 4 == 3 ? 1 : d.sh;
      if (j % 4 == 2) d.kh = d.kw = 5, d.pt = d.pb = d.pl = d.pr = 2;
      if (j == 5) d.dh = d.dw = 2, d.pt = d.pb = d.pl = d.pr = 2;
      d.ih += (d.sh - d.ih % d.sh) % d.sh;
      d.iw += (d.sw - d.iw % d.sw) % d.sw;
    }
    const bool few_channels_in_place = edge_class == "stride" && i >= kCasesPerClass;
    if (few_channels_in_place) {
      // kh, kw, sh, sw, pt, pb, pl, pr, ic: windows up to 49 taps, asymmetric padding.
      const int shapes[][9] = {{3, 3, 2, 2, 1, 1, 1, 1, 3}, {5, 5, 3, 3, 1, 1, 1, 1, 13}, {3, 3, 1, 1, 1, 1, 1, 1, 5},
                               {5, 5, 2, 2, 2, 2, 2, 2, 2}, {3, 5, 2, 1, 1, 1, 2, 2, 7}, {7, 7, 2, 2, 3, 3, 3, 3, 3},
                               {3, 3, 2, 2, 0, 1, 1, 0, 1}, {2, 2, 2, 2, 0, 1, 0, 1, 4}};
      const int* v = shapes[i - kCasesPerClass];
      d.kh = v[0], d.kw = v[1], d.sh = v[2], d.sw = v[3], d.pt = v[4], d.pb = v[5], d.pl = v[6], d.pr = v[7];
      d.ic = v[8];
      d.dh = d.dw = 1;
      d.g = 1;
      d.ih = std::uniform_int_distribution<int>(9, 23)(rng);
      d.iw = std::uniform_int_distribution<int>(9, 23)(rng);
    }
    while (d.oh() < 1) d.ih += d.sh;  // keep every case a valid layer
    while (d.ow() < 1) d.iw += d.sw;
    d.name = edge_class + "_" + std::to_string(i);
    ConvSchedule s = schedule_for(i, t);
    if (i >= kCasesPerClass && edge_class == "depthwise") {
      s.strategy = Strategy::Depthwise;
      s.pack_input = PackInput::None;
      const std::vector<int> nrs = schedule_space(t).nr;
      s.nr = nrs[static_cast<size_t>(i) % nrs.size()];
      if (strided_depthwise) s.mr = schedule_space(t).mr[static_cast<size_t>(i) % 3];
    } else if (few_channels_in_place) {
      s.strategy = Strategy::Gemm;
      s.kc = 0;
      s.nc = 0;
      s.pack_input = PackInput::None;
      const std::vector<int> nrs = schedule_space(t).nr;
      s.nr = nrs[static_cast<size_t>(i) % nrs.size()];
    } else if (i >= kCasesPerClass) {
      s.strategy = Strategy::Gemm;
      s.kc = 0;
      s.nc = 0;
      s.pack_input = (i % 2) ? PackInput::Image : PackInput::None;
    }
    cases.push_back({edge_class, d, s});
  }
  return cases;
}

std::vector<SweepCase> full_sweep() {
  std::vector<SweepCase> all;
  for (const auto& cls : edge_classes()) {
    auto cases = sweep_cases(cls);
    all.insert(all.end(), cases.begin(), cases.end());
  }
  return all;
}

}  // namespace convgen::test
