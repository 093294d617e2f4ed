// The backward references checked against finite differences of the forward reference.
// Data, weights, bias and the upstream gradient are small integers and the step is 1:
// the loss L = sum(dY * Y) is linear in every input, so the central difference
// (L(v + 1) - L(v - 1)) / 2 is the exact gradient and must equal the reference bit for bit.
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "tests/common/reference_conv.h"
#include "tests/common/reference_conv_backward.h"

using namespace convgen;
using namespace convgen::test;

namespace {

std::vector<float> integers(size_t n, int range, std::mt19937& rng) {
  std::uniform_int_distribution<int> dist(-range, range);
  std::vector<float> v(n);
  for (auto& e : v) e = static_cast<float>(dist(rng));
  return v;
}

double loss(const ConvDescriptor& d, const std::vector<float>& x, const std::vector<float>& w,
            const std::vector<float>& b, const std::vector<float>& dy) {
  const ReferenceResult r = reference_forward(d, x, w, b);
  double sum = 0.0;
  for (size_t i = 0; i < r.y.size(); ++i) sum += r.y[i] * dy[i];
  return sum;
}

// Central difference of the loss in element i of v (v is one of x, w, b).
double central_difference(std::vector<float>& v, size_t i, const std::function<double()>& eval) {
  const float saved = v[i];
  v[i] = saved + 1.0f;
  const double up = eval();
  v[i] = saved - 1.0f;
  const double down = eval();
  v[i] = saved;
  return (up - down) / 2.0;
}

void check_gradients(const std::string& text) {
  const ConvDescriptor d = parse_descriptor(text);
  INFO(d.to_string());
  std::mt19937 rng(7);
  std::vector<float> x = integers(d.mb * d.ih * d.iw * d.ic, 3, rng);
  std::vector<float> w = integers(d.oc * d.icg() * d.kh * d.kw, 2, rng);
  std::vector<float> b = integers(d.oc, 4, rng);
  const std::vector<float> dy = integers(d.mb * d.oh() * d.ow() * d.oc, 3, rng);
  auto eval = [&] { return loss(d, x, w, b, dy); };

  const std::vector<double> dx = reference_backward_data(d, dy, w);
  const WeightGradients g = reference_backward_weights(d, x, dy);
  REQUIRE(dx.size() == x.size());
  REQUIRE(g.dw.size() == w.size());
  REQUIRE(g.db.size() == b.size());
  size_t nonzero = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double fd = central_difference(x, i, eval);
    INFO("dx[" << i << "]");
    REQUIRE(dx[i] == fd);
    nonzero += fd != 0.0;
  }
  for (size_t i = 0; i < w.size(); ++i) {
    INFO("dw[" << i << "]");
    REQUIRE(g.dw[i] == central_difference(w, i, eval));
  }
  for (size_t i = 0; d.bias && i < b.size(); ++i) {  // without bias the forward ignores b
    INFO("db[" << i << "]");
    REQUIRE(g.db[i] == central_difference(b, i, eval));
  }
  CHECK(nonzero > 0);  // the check saw real gradients, not only zeros
}

}  // namespace

TEST_CASE("backward references equal exact finite differences of the forward", "[reference]") {
  for (const char* text : {
           "mb2ic4ih7iw6oc5kh3kw3ph1pw1+bias",               // plain 3x3, odd sizes
           "mb1ic3ih9iw9oc4kh3kw3sh2sw2pt0pb2pl1pr0+bias",   // stride 2, asymmetric padding
           "mb1ic2ih11iw11oc3kh2kw2sh3sw3",                   // stride > kernel: untouched inputs
           "mb1ic2ih12iw12oc2kh3kw3sh2sw2dh1dw1ph2pw2+bias",  // gcd(stride, dilation) = 2
           "g2mb2ic4ih6iw6oc6kh3kw3ph1pw1+bias",              // groups
           "g3mb1ic3ih6iw7oc6kh3kw3sh2sw1ph1pw1",             // depthwise x2
           "mb2ic3ih1iw13oc4kh1kw5sw2pw2+bias",               // conv1d
       }) {
    check_gradients(text);
  }
}
