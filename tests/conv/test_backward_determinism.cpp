// Determinism: for a given schedule, the backward kernels give bit-identical results on
// every run and whatever the thread count (real-valued data, so a changed summation
// order would show). Threads only split non-reduction loops or whole partitions.
#include <catch2/catch.hpp>

#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "generator/conv/backward.h"
#include "generator/conv/jit.h"
#include "generator/conv/pipeline.h"
#include "schedules/schedule_records.h"
#include "tests/common/real_valued.h"
#include "tests/conv/sweep_plan.h"

using namespace convgen;
using test::bitwise_equal;
using test::random_floats;

namespace {

struct Results {
  std::vector<float> dx, dw, db;
};

Results run_with_threads(JitBackwardDataKernel& data, JitBackwardWeightsKernel& weights, const ConvDescriptor& d,
                         int threads) {
  const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 1), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 2);
  const auto dy = random_floats(d.mb * d.oh() * d.ow() * d.oc, 3), y = random_floats(dy.size(), 4);
  Results r{std::vector<float>(x.size()), std::vector<float>(w.size()), std::vector<float>(d.oc)};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  data.run(dy.data(), w.data(), y.data(), r.dx.data());
  weights.run(x.data(), dy.data(), y.data(), r.dw.data(), r.db.data());
  omp_set_num_threads(saved);
  return r;
}

}  // namespace

TEST_CASE("backward kernels are bit-identical across runs and thread counts", "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // A first layer (few weights: partitions carry the parallelism) and a wider one.
  for (const char* text : {"mb6ic3ih20iw20oc16kh5kw5sh1pt2pb2pl2pr2+bias+relu",
                           "mb4ic32ih10iw10oc48kh3kw3sh2sw2pt1pb1pl1pr1+bias+relu"}) {
    const ConvDescriptor d = parse_descriptor(text);
    for (const char* words : {"parallel=pixels partitions=4", "parallel=images partitions=3", "parallel=pixels"}) {
      INFO(text << "  schedule words: " << words);
      ConvSchedule sd = analytic_schedule_for_pass(d, "bwd_data", t), sw = analytic_schedule_for_pass(d, "bwd_weights", t);
      apply_schedule_overrides(words, &sd);
      apply_schedule_overrides(words, &sw);
      JitBackwardDataKernel data(d, sd, t);
      JitBackwardWeightsKernel weights(d, sw, t);
      const Results one = run_with_threads(data, weights, d, 1);
      for (int threads : {1, 2, 3, 4}) {
        INFO("threads " << threads);
        const Results other = run_with_threads(data, weights, d, threads);
        CHECK(bitwise_equal(one.dx, other.dx));
        CHECK(bitwise_equal(one.dw, other.dw));
        CHECK(bitwise_equal(one.db, other.db));
      }
    }
  }
}

TEST_CASE("parallel variant: a small dW's reduction in 4 partitions, bit-identical across thread counts",
          "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // 48 x 32 x 3 x 3 floats (54 KiB): partitions; 1024 x 512 (2 MiB): one partition.
  const ConvDescriptor small = parse_descriptor("mb4ic32ih10iw10oc48kh3kw3pt1pb1pl1pr1+bias+relu");
  const ConvDescriptor large = parse_descriptor("mb2ic512ih2iw2oc1024kh1kw1");
  for (Parallel p : {Parallel::Images, Parallel::Pixels}) {
    const ConvSchedule sw = parallel_variant(small, "bwd_weights", analytic_schedule_for_pass(small, "bwd_weights", t), p);
    CHECK(sw.parallel == p);
    CHECK(sw.partitions == 4);
    // (The GEMM form: on AVX-512 this layer's default is gemm_input_lanes, which has none.)
    ConvSchedule large_gemm = analytic_schedule_for_pass(large, "bwd_weights", t);
    large_gemm.strategy = Strategy::Gemm;
    CHECK(parallel_variant(large, "bwd_weights", large_gemm, p).partitions == 1);
    const ConvSchedule sd = parallel_variant(small, "bwd_data", analytic_schedule_for_pass(small, "bwd_data", t), p);
    CHECK(sd.partitions == analytic_schedule_for_pass(small, "bwd_data", t).partitions);
    CHECK(sd.parallel == p);
    JitBackwardDataKernel data(small, sd, t);
    JitBackwardWeightsKernel weights(small, sw, t);
    const Results one = run_with_threads(data, weights, small, 1);
    for (int threads : {2, 3}) {
      INFO("threads " << threads);
      const Results other = run_with_threads(data, weights, small, threads);
      CHECK(bitwise_equal(one.dw, other.dw));
      CHECK(bitwise_equal(one.db, other.db));
      CHECK(bitwise_equal(one.dx, other.dx));
    }
  }
  // An explicit partition count is kept.
  ConvSchedule three = analytic_schedule_for_pass(small, "bwd_weights", t);
  three.partitions = 3;
  CHECK(parallel_variant(small, "bwd_weights", three, Parallel::Images).partitions == 3);
}

TEST_CASE("parallel variant: channel blocks outermost are split across threads, bit-identical to one thread",
          "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // Few pixels, many channels: the trainer's whole-batch layers on 1x1 images (one 1 x n
  // image); a grouped GEMM whose groups' blocks share one parallel loop; no MC (blocks of
  // one register tile); strided backward-data (residue classes staged for the minibatch).
  struct Case {
    const char* descriptor;
    const char* words;
  };
  // MR 16 (one AVX-512 vector, two AVX2 ones) keeps several tiles on either target.
  for (const Case& c : {Case{"mb1ic96ih1iw12oc160kh1kw1+bias+relu", "mr=16 loop_order=channels_outer mc=32"},
                        Case{"mb2ic64ih3iw3oc96kh3kw3pt1pb1pl1pr1g2",
                             "strategy=gemm mr=16 loop_order=channels_outer mc=16"},
                        Case{"mb2ic48ih4iw4oc40kh1kw1", "mr=16 loop_order=channels_outer mc=0"},
                        Case{"mb2ic40ih6iw6oc48kh3kw3sh2sw2pt1pb1pl1pr1", "mr=16 loop_order=channels_outer mc=16"}}) {
    const ConvDescriptor d = parse_descriptor(c.descriptor);
    INFO(c.descriptor << "  schedule words: " << c.words);
    ConvSchedule sf = analytic_schedule_for_pass(d, "fwd", t), sd = analytic_schedule_for_pass(d, "bwd_data", t);
    apply_schedule_overrides(c.words, &sf);
    apply_schedule_overrides(c.words, &sd);
    // Chosen from the schedule alone wherever MC leaves more than one block.
    const bool blocked = sf.mc > 0 && sf.mc < d.ocg();
    CHECK((intra_kernel_loop(d, "fwd", sf, Parallel::Pixels) == Parallel::Channels) == blocked);
    CHECK(intra_kernel_loop(d, "bwd_weights", sf, Parallel::Images) == Parallel::Images);
    ConvSchedule serial = sf, split = sf;
    serial.parallel = Parallel::None;
    split.parallel = Parallel::Channels;
    const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 5), w = random_floats(d.oc * d.icg() * d.kh * d.kw, 6);
    const auto bias = random_floats(d.oc, 7);
    std::vector<float> y_serial(static_cast<size_t>(d.mb * d.oh() * d.ow() * d.oc)), y_split(y_serial.size());
    JitForwardKernel(d, serial, t).run(x.data(), w.data(), bias.data(), y_serial.data());
    std::vector<std::string> why;
    build_forward(d, split, t, &why);
    JitForwardKernel forward(d, split, t);
    bool threaded = false;
    for (const std::string& line : why) threaded |= line.find("parallel over the channel blocks") != std::string::npos;
    CHECK(threaded);  // the split really ran, not refused
    ConvSchedule sd_serial = sd;
    sd_serial.parallel = Parallel::None;
    sd.parallel = Parallel::Channels;
    JitBackwardDataKernel data(d, sd, t);
    // dW's zero fill and transpose threaded too (any parallel value).
    const ConvSchedule sw_serial = analytic_schedule_for_pass(d, "bwd_weights", t);
    const ConvSchedule sw = parallel_variant(d, "bwd_weights", sw_serial, Parallel::Pixels);
    JitBackwardWeightsKernel weights(d, sw, t);
    JitBackwardWeightsKernel weights_serial(d, sw_serial, t);
    JitBackwardDataKernel data_serial(d, sd_serial, t);
    const Results one = run_with_threads(data, weights, d, 1);
    const Results unsplit = run_with_threads(data_serial, weights_serial, d, 1);
    CHECK(bitwise_equal(one.dx, unsplit.dx));
    if (sw.partitions == sw_serial.partitions) CHECK(bitwise_equal(one.dw, unsplit.dw));
    const int saved = omp_get_max_threads();
    for (int threads : {1, 2, 3, 4}) {
      INFO("threads " << threads);
      omp_set_num_threads(threads);
      std::fill(y_split.begin(), y_split.end(), -1.0f);
      forward.run(x.data(), w.data(), bias.data(), y_split.data());
      omp_set_num_threads(saved);
      CHECK(bitwise_equal(y_serial, y_split));
      const Results other = run_with_threads(data, weights, d, threads);
      CHECK(bitwise_equal(one.dx, other.dx));
      CHECK(bitwise_equal(one.dw, other.dw));
    }
  }
}

namespace {

// Real-valued data (integer_valued: small integers, so every summation order is exact).
std::vector<float> forward_on_threads(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t, int threads,
                                      bool integer_valued = false) {
  auto data = [&](int64_t n, unsigned seed) {
    std::vector<float> v = random_floats(n, seed);
    if (integer_valued)
      for (float& f : v) f = std::round(f * 3.0f);
    return v;
  };
  const auto x = data(d.mb * d.ih * d.iw * d.ic, 8), w = data(d.oc * d.icg() * d.kh * d.kw, 9);
  const auto bias = data(d.oc, 10);
  std::vector<float> y(static_cast<size_t>(d.mb * d.oh() * d.ow() * d.oc), -1.0f);
  JitForwardKernel kernel(d, s, t);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  kernel.run(x.data(), w.data(), bias.data(), y.data());
  omp_set_num_threads(saved);
  return y;
}

}  // namespace

TEST_CASE("parallel variant over one image's pixels: a staged input in row bands, the same bits on every thread count",
          "[determinism]") {
  const TargetInfo t = test::sweep_target();
  // A 5x5/2 stem (3 channels; a 3x3/2 one reads its input in place on 32 registers) and a
  // 5x5 layer: both staged per image by default. With threads over pixels the slab would be
  // packed on one thread before the parallel loop.
  struct Case {
    const char* descriptor;
    int64_t band_rows;  // ceil(oh / 16), at least what keeps a band's halo within its rows
  };
  for (const Case& c : {Case{"mb1ic3ih64iw64oc32kh5kw5sh2sw2pt2pb2pl2pr2+bias", 2},
                        Case{"mb1ic3ih32iw32oc32kh5kw5pt2pb2pl2pr2+bias+relu", 4}}) {
    const ConvDescriptor d = parse_descriptor(c.descriptor);
    INFO(c.descriptor);
    const ConvSchedule slab = analytic_schedule_for_pass(d, "fwd", t);
    REQUIRE(slab.pack_input == PackInput::Image);
    std::vector<std::string> why;
    const ConvSchedule bands = parallel_variant(d, "fwd", slab, Parallel::Pixels, &why);
    CHECK(bands.parallel == Parallel::Pixels);
    CHECK(bands.pack_input == PackInput::Rows);
    CHECK(bands.nc == c.band_rows * d.ow());
    REQUIRE(why.size() == 1);
    CHECK_THAT(why[0], Catch::Contains("bands of " + std::to_string(c.band_rows) + " output rows"));
    // Images split whole slabs: unchanged.
    CHECK(parallel_variant(d, "fwd", slab, Parallel::Images).pack_input == PackInput::Image);
    // Another schedule may sum in another order (on AVX-512 the stem's bands and its slab
    // differ in the last bit on real data): exact on integers, the same bits on threads.
    ConvSchedule serial = bands;
    serial.parallel = Parallel::None;
    ConvSchedule serial_slab = slab;
    serial_slab.parallel = Parallel::None;
    CHECK(bitwise_equal(forward_on_threads(d, serial_slab, t, 1, true), forward_on_threads(d, bands, t, 2, true)));
    const std::vector<float> reference = forward_on_threads(d, serial, t, 1);
    for (int threads : {1, 2, 3}) {
      INFO("threads " << threads);
      CHECK(bitwise_equal(reference, forward_on_threads(d, bands, t, threads)));
    }
  }
}

TEST_CASE("parallel variant over one image's pixels: a small depthwise layer runs on one thread", "[determinism]") {
  const TargetInfo t = test::sweep_target();
  const ConvDescriptor small = parse_descriptor("mb1ic384ih14iw14oc384g384kh3kw3pt1pb1pl1pr1+bias");  // 294 KiB out
  const ConvDescriptor large = parse_descriptor("mb1ic32ih112iw112oc32g32kh3kw3pt1pb1pl1pr1+bias");   // 1568 KiB
  const ConvSchedule s_small = analytic_schedule_for_pass(small, "fwd", t);
  REQUIRE(s_small.strategy == Strategy::Depthwise);
  CHECK(parallel_variant(small, "fwd", s_small, Parallel::Pixels).parallel == Parallel::None);
  // Images (a batch of 8 or more) and larger layers keep their threads.
  const ConvDescriptor small_batch = parse_descriptor("mb8ic384ih14iw14oc384g384kh3kw3pt1pb1pl1pr1+bias");
  CHECK(parallel_variant(small_batch, "fwd", analytic_schedule_for_pass(small_batch, "fwd", t), Parallel::Images)
            .parallel == Parallel::Images);
  CHECK(parallel_variant(large, "fwd", analytic_schedule_for_pass(large, "fwd", t), Parallel::Pixels).parallel ==
        Parallel::Pixels);
}

TEST_CASE("gemm_input_lanes backward-weights is bit-identical across thread counts", "[determinism]") {
  // Threads split the input-channel tiles: of the one item, of each item (items
  // outermost) or around the items (channel tiles outermost); groups outermost. Real-valued
  // data, so any change of summation order would show; the serial kernel is the reference.
  const TargetInfo t = test::sweep_target();
  const int vl = t.vector_floats;
  const std::string c4 = std::to_string(4 * vl), c3 = std::to_string(3 * vl), c2 = std::to_string(2 * vl);
  struct Case {
    std::string layer, words, loops;
  };
  const Case cases[] = {
      {"mb3ic" + c4 + "ih5iw5oc40kh1kw1+bias+relu", "mr=" + std::to_string(vl) + " nr=6 kc=0", "parallel over the channel tiles"},
      {"mb4ic" + c3 + "ih6iw6oc" + c2 + "kh1kw1+relu", "mr=" + std::to_string(vl) + " nr=3 kc=40",
       "parallel over the channel tiles of each item"},
      {"mb4ic" + c3 + "ih6iw6oc" + c2 + "kh1kw1sh2sw2", "mr=" + c2 + " nr=2 kc=10 loop_order=channels_outer",
       "parallel over the channel tiles"},
      {"g2mb2ic" + c4 + "ih6iw6oc24kh1kw1+bias", "mr=" + std::to_string(vl) + " nr=5 kc=24 loop_order=channels_outer",
       "parallel over the channel tiles"},
  };
  for (const Case& c : cases) {
    const ConvDescriptor d = parse_descriptor(c.layer);
    ConvSchedule serial;
    serial.mr = vl;
    apply_schedule_overrides("strategy=gemm_input_lanes " + c.words, &serial);
    ConvSchedule split = serial;
    split.parallel = Parallel::Images;
    INFO(c.layer << "  schedule: " << describe(split));
    std::vector<std::string> why;
    build_backward_weights(d, split, t, &why);
    bool threaded = false;
    for (const std::string& line : why) threaded |= line == c.loops;
    CHECK(threaded);
    const auto x = random_floats(d.mb * d.ih * d.iw * d.ic, 11), dy = random_floats(d.mb * d.oh() * d.ow() * d.oc, 12);
    const auto y = random_floats(dy.size(), 13);
    auto run = [&](JitBackwardWeightsKernel& k, int threads) {
      std::vector<float> dw(static_cast<size_t>(d.oc * d.icg())), db(static_cast<size_t>(d.oc));
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      k.run(x.data(), dy.data(), y.data(), dw.data(), db.data());
      omp_set_num_threads(saved);
      return std::make_pair(dw, db);
    };
    JitBackwardWeightsKernel serial_kernel(d, serial, t), split_kernel(d, split, t);
    const auto want = run(serial_kernel, 1);
    for (int threads : {1, 2, 3, 4}) {
      INFO("threads " << threads);
      const auto got = run(split_kernel, threads);
      CHECK(bitwise_equal(want.first, got.first));
      CHECK(bitwise_equal(want.second, got.second));
    }
  }
}
