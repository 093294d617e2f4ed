// The next-item prefetch of backward-weights kernels (generator/conv/item_prefetch.h):
// every form with several reduction items carries a plan, the compiled kernel holds
// prefetcht0 (locality 3: lines kept in every cache level), every range it asks
// for lies inside its buffer and points at the next item's rows, and a plan whose loops
// Halide lowered differently leaves the kernel as it was. The same for forward kernels
// that stage row bands L1 holds (next_band_prefetch). That the prefetching kernels
// compute bit for bit is the sweeps' job (they build every form with the plans on).
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <unistd.h>

#include <Halide.h>

#include "generator/conv/backward.h"
#include "generator/conv/kernel_pipeline.h"
#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/schedule_records.h"

using namespace convgen;

namespace {

const TargetInfo kWide = target_info("x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41");

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string assembly_of(Halide::Pipeline p, const std::vector<Halide::Argument>& arguments) {
  static int serial = 0;
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("convgen_item_prefetch_" + std::to_string(::getpid()) + "_" + std::to_string(serial++) + ".s"))
                               .string();
  p.compile_to_assembly(path, arguments, "kernel", Halide::Target(kWide.target));
  const std::string text = slurp(path);
  std::remove(path.c_str());
  return text;
}

std::string assembly_of(const BackwardWeightsPipeline& bp) {
  return assembly_of(kernel_pipeline(bp.outputs(), bp.prefetches), bp.arguments());
}

std::string assembly_of(const ForwardPipeline& fp) {
  return assembly_of(kernel_pipeline({fp.output}, fp.prefetches), fp.arguments());
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Substitutes `values` for the loop variables of e and folds it to a constant.
int64_t evaluate(const Halide::Expr& e, const std::map<std::string, int>& values) {
  std::map<std::string, Halide::Expr> replacements;
  for (const auto& [name, v] : values) replacements[name] = v;
  const Halide::Expr folded = Halide::Internal::simplify(Halide::Internal::substitute(replacements, e));
  const int64_t* k = Halide::Internal::as_const_int(folded);
  REQUIRE(k);
  return *k;
}

ConvSchedule schedule(const std::string& words) {
  ConvSchedule s;
  s.parallel = Parallel::None;
  apply_schedule_overrides(words, &s);
  return s;
}

}  // namespace

TEST_CASE("backward-weights kernels with several items prefetch the next one with prefetcht0", "[item_prefetch]") {
  struct Case {
    const char* layer;
    const char* schedule;
  };
  for (const Case& c : {Case{"mb2ic64ih12oc32kh1", "gemm mr=32 nr=8 kc=24 pack_input=image"},
                        Case{"mb2ic64ih12oc32kh1", "gemm mr=32 nr=8 kc=24 pack_input=panel nc=64"},
                        Case{"mb2ic32ih10oc32kh3ph1+relu", "gemm mr=32 nr=4 kc=20 pack_input=image"},
                        Case{"mb2ic64ih12oc32kh1", "gemm_input_lanes mr=32 nr=8 kc=48"}}) {
    INFO(c.layer << " " << c.schedule);
    const ConvDescriptor d = parse_descriptor(c.layer);
    std::vector<std::string> why;
    const BackwardWeightsPipeline bp = build_backward_weights(d, schedule(c.schedule), kWide, &why);
    REQUIRE(bp.prefetches.size() == 1);
    CHECK(bp.prefetches[0].ranges.size() == (d.relu ? 3u : 2u));
    const std::string text = assembly_of(bp);
    CHECK(count(text, "prefetcht0") >= 2);
    bool said = false;
    for (const auto& w : why) said = said || w.find("prefetched") != std::string::npos;
    CHECK(said);
  }
}

TEST_CASE("kernels whose next item is not theirs to fetch have no plan", "[item_prefetch]") {
  // One item.
  CHECK(build_backward_weights(parse_descriptor("mb1ic64ih6oc32kh1"), schedule("gemm mr=32 nr=8 kc=0"), kWide)
            .prefetches.empty());
  // One item per partition: the next item is another partition's, perhaps another thread's.
  CHECK(build_backward_weights(parse_descriptor("mb4ic64ih6oc32kh1"), schedule("gemm mr=32 nr=8 kc=36 partitions=4"),
                               kWide)
            .prefetches.empty());
  // Several groups run outside the items: each would fetch every group's channels.
  CHECK(build_backward_weights(parse_descriptor("g2mb2ic64ih12oc64kh1"), schedule("gemm mr=16 nr=8 kc=24"), kWide)
            .prefetches.empty());
  CHECK(build_backward_weights(parse_descriptor("g2mb2ic64ih12oc64kh1"), schedule("gemm_input_lanes mr=32 nr=8 kc=48"),
                               kWide)
            .prefetches.empty());
}

namespace {

// Where the lowered kernel allocates its prefetch counters: inside a parallel loop or not.
class CounterPlaces : public Halide::Internal::IRMutator {
 public:
  int in_parallel = 0, outside_parallel = 0;

 private:
  using IRMutator::visit;
  int depth_ = 0;
  Halide::Internal::Stmt visit(const Halide::Internal::For* op) override {
    const bool parallel = op->for_type == Halide::Internal::ForType::Parallel;
    depth_ += parallel;
    Halide::Internal::Stmt s = IRMutator::visit(op);
    depth_ -= parallel;
    return s;
  }
  Halide::Internal::Stmt visit(const Halide::Internal::Allocate* op) override {
    if (op->name.rfind("item_prefetch_counter", 0) == 0) ++(depth_ ? in_parallel : outside_parallel);
    return IRMutator::visit(op);
  }
};

}  // namespace

TEST_CASE("threads splitting an item's tiles each prefetch a share with a counter of their own", "[item_prefetch]") {
  // Channel tiles in parallel inside each item (2 tiles of 32 of 64 output channels): a
  // counter allocated outside them would be shared by the threads.
  for (const char* s : {"gemm mr=32 nr=8 kc=24 pack_input=image parallel=channels partitions=1",
                        "gemm mr=32 nr=8 kc=24 pack_input=panel nc=64 parallel=channels partitions=1",
                        "gemm_input_lanes mr=32 nr=8 kc=48 parallel=channels"}) {
    INFO(s);
    const BackwardWeightsPipeline bp = build_backward_weights(parse_descriptor("mb2ic64ih12oc64kh1"), schedule(s), kWide);
    REQUIRE(bp.prefetches.size() == 1);
    Halide::Pipeline p = kernel_pipeline(bp.outputs(), bp.prefetches);
    auto* places = new CounterPlaces;  // the pipeline owns its passes
    p.add_custom_lowering_pass(places);
    p.compile_to_module(bp.arguments(), "kernel", Halide::Target(kWide.target));
    CHECK(places->in_parallel >= 1);
    CHECK(places->outside_parallel == 0);
  }
}

TEST_CASE("the prefetched ranges lie inside their buffers and start at the next item", "[item_prefetch]") {
  // 1x1, stride 1, unpadded: items of 2 rows of 12 pixels, 6 bands per image, 3 images.
  const ConvDescriptor d = parse_descriptor("mb3ic64ih12oc32kh1");
  const BackwardWeightsPipeline bp = build_backward_weights(d, schedule("gemm mr=32 nr=8 kc=24 partitions=1"), kWide);
  REQUIRE(bp.prefetches.size() == 1);
  const ItemPrefetch& plan = bp.prefetches[0];
  const std::string band = plan.item_loop, block = band.substr(0, band.size() - 1) + "y";
  const int64_t row_x = 12 * 64, row_dy = 12 * 32, image_x = 12 * row_x, image_dy = 12 * row_dy;
  for (int img = 0; img < 3; ++img) {
    for (int b = 0; b < 6; ++b) {
      const std::map<std::string, int> at = {{band, b}, {block, img}};
      const auto& x = plan.ranges[0];
      const auto& dy = plan.ranges[1];
      CHECK(x.buffer == "x");
      CHECK(dy.buffer == "dy");
      const int64_t x_first = evaluate(x.first, at), dy_first = evaluate(dy.first, at);
      CHECK(x_first >= 0);
      CHECK(x_first + x.elements <= 3 * image_x);
      CHECK(dy_first >= 0);
      CHECK(dy_first + dy.elements <= 3 * image_dy);
      if (img < 2 || b < 5) {  // the next item's first row: the next band, or the next image's first
        const int next_img = b == 5 ? img + 1 : img, next_row = b == 5 ? 0 : 2 * (b + 1);
        CHECK(x_first == next_img * image_x + next_row * row_x);
        CHECK(dy_first == next_img * image_dy + next_row * row_dy);
      }
    }
  }
}

TEST_CASE("a prefetch plan whose loops the lowered kernel lacks leaves the kernel without it", "[item_prefetch]") {
  const ConvDescriptor d = parse_descriptor("mb2ic64ih12oc32kh1");
  BackwardWeightsPipeline bp = build_backward_weights(d, schedule("gemm mr=32 nr=8 kc=24"), kWide);
  REQUIRE(bp.prefetches.size() == 1);
  BackwardWeightsPipeline missing_inner = bp;
  missing_inner.prefetches[0].inner_loop = "no_such_func.s1.r$x";
  CHECK(count(assembly_of(missing_inner), "prefetcht0") == 0);
  BackwardWeightsPipeline missing_item = bp;
  missing_item.prefetches[0].item_loop = "no_such_func.s1.ri$x";
  CHECK(count(assembly_of(missing_item), "prefetcht0") == 0);
  // A range in a variable no enclosing loop binds: left out, not a kernel that fails to
  // compile.
  BackwardWeightsPipeline unbound = bp;
  unbound.prefetches[0].ranges[0].first = item_loop_var("no_such_func.s1.ri$y");
  CHECK(count(assembly_of(unbound), "prefetcht0") == 0);
  // Halide peels a 2-iteration item loop into two copies (2 bands of 5 rows): it builds.
  const ConvDescriptor peeled = parse_descriptor("mb2ic3ih15oc35kh11ph2+bias+relu");
  const BackwardWeightsPipeline p = build_backward_weights(
      peeled, schedule("gemm mr=16 nr=8 kc=64 nc=8 pack_input=panel loop_order=channels_outer partitions=8"), kWide);
  CHECK_NOTHROW(assembly_of(p));
}

TEST_CASE("forward kernels staging row bands L1 holds prefetch the next band's rows", "[item_prefetch]") {
  // RGB stem-like: 3x3/2 over 3 channels, 16x16 outputs, bands of 2 output rows (32
  // pixels), 8 bands per image: each band reads input rows 4b-1 .. 4b+3.
  const ConvDescriptor d = parse_descriptor("mb3ic3ih32oc32kh3sh2ph1");
  std::vector<std::string> why;
  const ForwardPipeline fp = build_forward(d, schedule("gemm mr=32 nr=8 nc=32 pack_input=rows"), kWide, &why);
  REQUIRE(fp.prefetches.size() == 1);
  const ItemPrefetch& plan = fp.prefetches[0];
  REQUIRE(plan.ranges.size() == 1);
  const auto& x = plan.ranges[0];
  CHECK(x.buffer == "input");
  const int64_t row = 32 * 3, image = 32 * row;
  CHECK(x.elements == 5 * row);
  const std::string image_loop = "output.s0.n";
  for (int img = 0; img < 3; ++img) {
    for (int b = 0; b < 8; ++b) {
      const int64_t first = evaluate(x.first, {{plan.item_loop, b}, {image_loop, img}});
      CHECK(first >= 0);
      CHECK(first + x.elements <= 3 * image);
      if (b < 7) CHECK(first == img * image + (4 * (b + 1) - 1) * row);
    }
  }
  CHECK(count(assembly_of(fp), "prefetcht0") >= 1);
  bool said = false;
  for (const auto& w : why) said = said || w.find("next row band") != std::string::npos;
  CHECK(said);
}

TEST_CASE("forward kernels whose next band is not a small one of the same image have no plan", "[item_prefetch]") {
  const ConvDescriptor stem = parse_descriptor("mb3ic3ih32oc32kh3sh2ph1");
  // One block per image: the next is a whole image (VGG conv1_2 would fetch 13 MB).
  CHECK(build_forward(stem, schedule("gemm mr=32 nr=8 nc=256 pack_input=rows"), kWide).prefetches.empty());
  // Slabs per image, panels per tile, the input read in place.
  CHECK(build_forward(stem, schedule("gemm mr=32 nr=8 pack_input=image"), kWide).prefetches.empty());
  CHECK(build_forward(stem, schedule("gemm mr=32 nr=8 pack_input=panel"), kWide).prefetches.empty());
  // A band of 2 output rows of 56 pixels over 256 channels (5 rows x 56 KiB): more than L1.
  const ConvDescriptor wide = parse_descriptor("mb1ic256ih56oc32kh3ph1");
  CHECK(build_forward(wide, schedule("gemm mr=32 nr=8 nc=112 pack_input=rows"), kWide).prefetches.empty());
  // Channel blocks outermost: a band is staged once per channel block.
  CHECK(build_forward(stem, schedule("gemm mr=16 nr=8 nc=32 mc=16 pack_input=rows loop_order=channels_outer"), kWide)
            .prefetches.empty());
}
