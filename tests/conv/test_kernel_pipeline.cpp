// The lowering pass every kernel pipeline gets (generator/conv/kernel_pipeline.h): a
// stride-3 vector load whose base is a runtime value plus a constant is where Halide 14
// starts the dense load early, before the first element asked for. At the very start of
// an input that lies against a faulting page, a plain pipeline faults there and the
// kernel pipeline reads only what it asks for.
#include <catch2/catch.hpp>

#include <vector>

#include <Halide.h>

#include "generator/conv/kernel_pipeline.h"
#include "tests/common/guarded_input.h"

using namespace convgen;
using convgen::test::GuardedInput;

namespace {

constexpr int kLanes = 8, kOutputs = 16;

// out(i) = in(3i + offset + 2): with offset = -2 the first vector asks for in[0], in[3],
// ...; Halide 14's code generator loads densely from 2 floats before that.
struct StridedCopy {
  Halide::ImageParam in{Halide::Float(32), 1, "in"};
  Halide::Param<int> offset{"offset"};
  Halide::Func out{"out"};
  StridedCopy() {
    Halide::Var i("i");
    out(i) = in(3 * i + offset + 2);
    out.vectorize(i, kLanes);
    out.output_buffer().dim(0).set_bounds(0, kOutputs);
  }
};

// The input holds exactly the floats the outputs read (in[0] .. in[3 * (kOutputs - 1)]),
// against a faulting page at `edge`.
std::string run(Halide::Pipeline& p, StridedCopy& c, GuardedInput::Edge edge, std::vector<float>* got) {
  std::vector<float> values(3 * (kOutputs - 1) + 1);
  for (size_t k = 0; k < values.size(); ++k) values[k] = static_cast<float>(k);
  GuardedInput input(values, edge);
  Halide::Buffer<float> in_buffer(input.data(), static_cast<int>(values.size()));
  Halide::Buffer<float> out_buffer(kOutputs);
  c.in.set(in_buffer);
  c.offset.set(-2);
  const Halide::Target t = Halide::get_host_target().with_feature(Halide::Target::NoAsserts);
  p.compile_jit(t);
  const std::string outside = convgen::test::read_outside_inputs([&] { p.realize(out_buffer, t); }, {{"in", &input}});
  got->assign(out_buffer.data(), out_buffer.data() + kOutputs);
  return outside;
}

}  // namespace

TEST_CASE("stride-3 loads of a kernel pipeline read only inside their input", "[kernel_pipeline]") {
  StridedCopy plain_copy;
  Halide::Pipeline plain(plain_copy.out);
  std::vector<float> got;
  // The failure the pass exists for: if Halide stops loading early, this test has
  // nothing left to show and says so.
  CHECK(run(plain, plain_copy, GuardedInput::Edge::Start, &got) == "in: 8 bytes before the start");

  for (GuardedInput::Edge edge : {GuardedInput::Edge::Start, GuardedInput::Edge::End}) {
    StridedCopy exact_copy;
    Halide::Pipeline exact = kernel_pipeline(exact_copy.out);
    got.clear();
    CHECK(run(exact, exact_copy, edge, &got).empty());
    REQUIRE(got.size() == static_cast<size_t>(kOutputs));
    for (int i = 0; i < kOutputs; ++i) CHECK(got[static_cast<size_t>(i)] == static_cast<float>(3 * i));
  }
}
