// The trainer's im2col + BLIS convolutions (make_im2col_blis_conv, runtime/train/train_conv.h) against
// convgen's generated kernels (make_generated_conv), and their thread safety.
//
// Exactness: BLIS and convgen sum in different orders, so the comparison uses small
// integers (x, dY in [-3, 3], w in [-2, 2], bias in [-4, 4]) whose every partial sum is an
// integer below 2^24 in magnitude, hence exact in float in any order: forward, backward-
// data and backward-weights (+ db) must then agree exactly (in value; in bits up to the
// sign of a zero, see below). The concurrency checks use non-integer data, where any
// clobbered scratch would show in the bits.
#include <catch2/catch.hpp>

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "generator/train/conv_factories.h"
#include "runtime/train/train_conv.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "tests/common/integer_valued.h"
#include "tests/common/real_valued.h"
#include "tests/common/train_compare.h"

using namespace convgen;

namespace {

struct Shapes {
  int64_t x, w, y;
};

Shapes shapes(const ConvDescriptor& d) {
  return {d.mb * d.ih * d.iw * d.ic, d.oc * d.icg() * d.kh * d.kw, d.mb * d.oh() * d.ow() * d.oc};
}

// NaN: any element an implementation fails to write shows up.
std::vector<float> unwritten(int64_t n) { return std::vector<float>(static_cast<size_t>(n), std::nanf("")); }

using test::integer_floats;
using test::random_floats;
using test::same_bits;

// Elements whose bits differ other than as +0 against -0.
int64_t bit_mismatches_beyond_zero_sign(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(a[i] == 0.0f && b[i] == 0.0f)) ++n;
  return n;
}

// Elements that differ in value (+0 and -0 are equal; NaN equals nothing).
int64_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return -1;
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) ++n;
  return n;
}

model::TrainConvRequest request(const ConvDescriptor& d) {
  model::TrainConvRequest r;
  r.descriptor = d;
  r.needs_backward_data = true;
  r.intra_kernel = false;
  r.threads = 1;
  r.target = default_target();
  return r;
}

// One layer's inputs and the three passes' outputs.
struct Pass {
  std::vector<float> x, w, bias, dy;
  std::vector<float> y, dx, dw, db;
};

Pass inputs(const ConvDescriptor& d, bool integer, uint32_t seed) {
  const Shapes s = shapes(d);
  Pass p;
  p.x = integer ? integer_floats(size_t(s.x), -3, 3, seed) : random_floats(size_t(s.x), seed);
  p.w = integer ? integer_floats(size_t(s.w), -2, 2, seed + 1) : random_floats(size_t(s.w), seed + 1);
  if (d.bias) p.bias = integer ? integer_floats(size_t(d.oc), -4, 4, seed + 2) : random_floats(size_t(d.oc), seed + 2);
  p.dy = integer ? integer_floats(size_t(s.y), -3, 3, seed + 3) : random_floats(size_t(s.y), seed + 3);
  return p;
}

// Runs forward, backward-data (with the forward output as the ReLU mask) and
// backward-weights on `conv`, into p's outputs.
void run_all(model::TrainConv& conv, const ConvDescriptor& d, Pass& p, const std::vector<float>* y_mask = nullptr) {
  const Shapes s = shapes(d);
  p.y = unwritten(s.y);
  p.dx = unwritten(s.x);
  p.dw = unwritten(s.w);
  p.db = d.bias ? unwritten(d.oc) : std::vector<float>{};
  conv.forward(p.x.data(), p.w.data(), d.bias ? p.bias.data() : nullptr, p.y.data());
  const float* y = d.relu ? (y_mask ? y_mask->data() : p.y.data()) : nullptr;
  conv.backward_data(p.dy.data(), p.w.data(), y, p.dx.data());
  conv.backward_weights(p.x.data(), p.dy.data(), y, p.dw.data(), d.bias ? p.db.data() : nullptr);
}

}  // namespace

TEST_CASE("im2col+BLIS TrainConv equals the generated kernels on exact data", "[train][im2col]") {
  const std::vector<std::string> layers = {
      "mb2ic8ih10oc16kh3ph1",                              // 3x3, padded
      "mb2ic8ih10oc16kh3ph1+bias+relu",                    // the same with the epilogue
      "mb2ic6ih11iw9oc12kh3sh2ph1+bias",                   // stride 2, rectangular
      "mb2ic8ih9iw10oc8kh3kw2pt1pb0pl0pr1+relu",           // asymmetric padding
      "mb2ic4ih12oc8kh3ph2dh1+bias",                       // dilation 2 (benchdnn dh1)
      "g2mb2ic8ih8oc12kh3ph1+bias+relu",                   // groups
      "g8mb2ic8ih9oc8kh3sh2ph1+bias",                      // depthwise, stride 2
      "mb2ic16ih7oc24kh1",                                 // 1x1: direct GEMM
      "mb2ic16ih7oc8kh1+bias+relu",                        // 1x1 direct with the epilogue
      "mb3ic8ih9oc8kh1sh2",                                // 1x1 strided: im2col
      "mb1ic3ih13oc8kh5sh2ph2+bias+relu",                  // a first layer, 5x5
      "g4mb2ic8ih10iw7oc16kh3kw1sw2pt0pb2pl1pr0dh1+relu",  // everything at once
      "mb2ic5ih6oc7kh2sh2+bias",                           // odd channels, even kernel
  };
  uint32_t seed = 100;
  for (const std::string& text : layers) {
    const ConvDescriptor d = parse_descriptor(text);
    INFO(d.normalised());
    std::vector<std::string> why;
    auto mine = model::make_im2col_blis_conv(request(d), &why);
    auto reference = model::make_generated_conv(request(d), &why);
    CHECK(mine->describe().rfind("im2col + BLIS sgemm for " + d.normalised() + " (workspace ", 0) == 0);

    Pass a = inputs(d, true, seed), b = a;
    seed += 10;
    run_all(*mine, d, a);
    run_all(*reference, d, b, &a.y);  // both mask with the same y (they are equal anyway)
    CHECK(mismatches(a.y, b.y) == 0);
    CHECK(mismatches(a.dx, b.dx) == 0);
    CHECK(mismatches(a.dw, b.dw) == 0);
    CHECK(mismatches(a.db, b.db) == 0);
    // Bit for bit, except that a sum of exact zeros may be -0 in one and +0 in the other:
    // convgen's backward-data starts a one-term sum from its product (dY * w = -0 when a
    // negative meets a zero), the GEMM and col2im start from +0 (+0 + -0 = +0).
    CHECK(bit_mismatches_beyond_zero_sign(a.y, b.y) == 0);
    CHECK(bit_mismatches_beyond_zero_sign(a.dx, b.dx) == 0);
    CHECK(bit_mismatches_beyond_zero_sign(a.dw, b.dw) == 0);
    CHECK(bit_mismatches_beyond_zero_sign(a.db, b.db) == 0);
    if (d.relu) {
      // The mask matters here: some outputs are clamped to 0 and some dY then dropped.
      int64_t clamped = 0;
      for (float v : a.y) clamped += v == 0.0f;
      CHECK(clamped > 0);
    }
  }
}

TEST_CASE("im2col+BLIS TrainConv: concurrent calls on one object give the sequential bits", "[train][im2col]") {
  // Two layers alive at once share the process's per-thread workspaces; the second one's
  // need is larger, so buffers grow while the first is in use.
  const ConvDescriptor d1 = parse_descriptor("g2mb2ic8ih10oc16kh3ph1+bias+relu");
  const ConvDescriptor d2 = parse_descriptor("mb2ic12ih14oc16kh3sh1ph1dh1+bias");
  std::vector<std::string> why;
  auto c1 = model::make_im2col_blis_conv(request(d1), &why);
  auto c2 = model::make_im2col_blis_conv(request(d2), &why);
  constexpr int kThreads = 2, kRounds = 25;

  // Sequential references: per thread index t its own inputs.
  std::vector<Pass> ref1(kThreads), ref2(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    ref1[t] = inputs(d1, false, 7 + 20 * t);
    ref2[t] = inputs(d2, false, 17 + 20 * t);
    run_all(*c1, d1, ref1[t]);
    run_all(*c2, d2, ref2[t]);
  }
  std::atomic<int> arrived{0};
  auto worker = [&](int t, int* failures) {
    // Start together, so that the calls overlap.
    arrived.fetch_add(1);
    while (arrived.load() < kThreads) std::this_thread::yield();
    for (int round = 0; round < kRounds; ++round) {
      Pass p1 = ref1[t], p2 = ref2[t];
      run_all(*c1, d1, p1);
      run_all(*c2, d2, p2);
      const bool ok = same_bits(p1.y, ref1[t].y) && same_bits(p1.dx, ref1[t].dx) && same_bits(p1.dw, ref1[t].dw) &&
                      same_bits(p1.db, ref1[t].db) && same_bits(p2.y, ref2[t].y) && same_bits(p2.dx, ref2[t].dx) &&
                      same_bits(p2.dw, ref2[t].dw) && same_bits(p2.db, ref2[t].db);
      if (!ok) ++*failures;
    }
  };

  SECTION("from an OpenMP team (the trainer's case)") {
    int failures[kThreads] = {};
    int team = 0;
#pragma omp parallel num_threads(kThreads)
    {
#pragma omp single
      team = omp_get_num_threads();
      worker(omp_get_thread_num(), &failures[omp_get_thread_num()]);
    }
    CHECK(team == kThreads);
    for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
  }
  SECTION("from std::threads (all OpenMP thread 0)") {
    int failures[kThreads] = {};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t, &failures[t]);
    for (std::thread& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) CHECK(failures[t] == 0);
  }
}

TEST_CASE("im2col+BLIS TrainConv describes what it ignores", "[train][im2col]") {
  const ConvDescriptor d = parse_descriptor("mb2ic3ih8oc8kh3ph1+bias+relu");
  model::TrainConvRequest r = request(d);
  r.needs_backward_data = false;
  r.intra_kernel = true;
  r.threads = 2;
  std::vector<std::string> why;
  auto conv = model::make_im2col_blis_conv(r, &why);
  const std::string text = conv->describe();
  CHECK(text.find("KiB per thread") != std::string::npos);
  CHECK(text.find("single-threaded") != std::string::npos);
  CHECK(text.find("no bwd_data") != std::string::npos);
}
