// Finite differences in fp64 against the generated backward kernels on small
// conv + bias + ReLU layers: step h = 1e-3, inputs chosen so every pre-activation has
// |z| > 10h (no kink is crossed), tolerance 1e-3 * max|g| + 1e-6, for dX, dW and db.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "generator/conv/jit.h"
#include "tests/conv/sweep_plan.h"

using namespace convgen;

namespace {

constexpr double kStep = 1e-3;

struct Layer {
  std::vector<double> x, w, b, dy;  // x NHWC, w OIHW, dy NHWK
};

// Pre-activations z (NHWK) of the layer, in double, from the definition.
std::vector<double> pre_activations(const ConvDescriptor& d, const Layer& l) {
  const int64_t P = d.oh(), Q = d.ow(), cg = d.icg(), kg = d.ocg();
  std::vector<double> z(d.mb * P * Q * d.oc);
  for (int64_t n = 0; n < d.mb; ++n)
    for (int64_t p = 0; p < P; ++p)
      for (int64_t q = 0; q < Q; ++q)
        for (int64_t k = 0; k < d.oc; ++k) {
          const int64_t g = k / kg;
          double sum = l.b[k];
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < d.kh; ++r)
              for (int64_t s = 0; s < d.kw; ++s) {
                const int64_t y = p * d.sh + r * d.dh - d.pt, x = q * d.sw + s * d.dw - d.pl;
                if (y < 0 || y >= d.ih || x < 0 || x >= d.iw) continue;
                sum += l.w[((k * cg + c) * d.kh + r) * d.kw + s] * l.x[((n * d.ih + y) * d.iw + x) * d.ic + g * cg + c];
              }
          z[((n * P + p) * Q + q) * d.oc + k] = sum;
        }
  return z;
}

// The loss whose gradients the kernels compute: sum of dy * relu(z).
double loss(const ConvDescriptor& d, const Layer& l) {
  const auto z = pre_activations(d, l);
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += l.dy[i] * std::max(z[i], 0.0);
  return sum;
}

// Central differences of the loss in every element of v.
std::vector<double> numeric_gradient(const ConvDescriptor& d, Layer& l, std::vector<double>& v) {
  std::vector<double> g(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + kStep;
    const double up = loss(d, l);
    v[i] = saved - kStep;
    const double down = loss(d, l);
    v[i] = saved;
    g[i] = (up - down) / (2 * kStep);
  }
  return g;
}

// Random float-representable data with every |z| > 10h (reseeded until so).
Layer make_layer(const ConvDescriptor& d) {
  for (uint32_t seed = 1;; ++seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Layer l;
    auto fill = [&](std::vector<double>& v, size_t n) {
      v.resize(n);
      for (auto& e : v) e = u(rng);
    };
    fill(l.x, d.mb * d.ih * d.iw * d.ic);
    fill(l.w, d.oc * d.icg() * d.kh * d.kw);
    fill(l.b, d.oc);
    fill(l.dy, d.mb * d.oh() * d.ow() * d.oc);
    const auto z = pre_activations(d, l);
    if (std::all_of(z.begin(), z.end(), [](double v) { return std::fabs(v) > 10 * kStep; })) return l;
    REQUIRE(seed < 1000);
  }
}

std::vector<float> to_float(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

void check_close(const char* what, const std::vector<float>& got, const std::vector<double>& want) {
  double max_g = 0;
  for (double v : want) max_g = std::max(max_g, std::fabs(v));
  const double tolerance = 1e-3 * max_g + 1e-6;
  size_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i) bad += !(std::fabs(double(got[i]) - want[i]) <= tolerance);
  INFO(what << ": " << bad << " of " << want.size() << " beyond " << tolerance << " (max |g| " << max_g << ")");
  CHECK(bad == 0);
  CHECK(max_g > 0.1);  // a vanishing gradient would make the check vacuous
}

void gradcheck(const std::string& text) {
  const ConvDescriptor d = parse_descriptor(text);
  REQUIRE(d.bias);
  REQUIRE(d.relu);
  const TargetInfo t = test::sweep_target();
  Layer l = make_layer(d);
  const auto x = to_float(l.x), w = to_float(l.w), b = to_float(l.b), dy = to_float(l.dy);

  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(b.size());
  JitForwardKernel(d, analytic_schedule_for_pass(d, "fwd", t), t).run(x.data(), w.data(), b.data(), y.data());
  JitBackwardDataKernel(d, analytic_schedule_for_pass(d, "bwd_data", t), t).run(dy.data(), w.data(), y.data(), dx.data());
  JitBackwardWeightsKernel(d, analytic_schedule_for_pass(d, "bwd_weights", t), t)
      .run(x.data(), dy.data(), y.data(), dw.data(), db.data());

  check_close("dx", dx, numeric_gradient(d, l, l.x));
  check_close("dw", dw, numeric_gradient(d, l, l.w));
  check_close("db", db, numeric_gradient(d, l, l.b));
}

}  // namespace

TEST_CASE("finite differences: conv+bias+relu, stride 2, asymmetric padding", "[gradcheck]") {
  gradcheck("mb2ic3ih7iw6oc5kh3kw3sh2sw2pt1pb0pl1pr2+bias+relu");
}

TEST_CASE("finite differences: grouped conv+bias+relu, dilation 2", "[gradcheck]") {
  gradcheck("g2mb2ic4ih7iw7oc6kh3kw3dh1dw1pt2pb2pl2pr2+bias+relu");
}

TEST_CASE("finite differences: depthwise conv+bias+relu", "[gradcheck]") {
  gradcheck("g8mb1ic8ih6iw6oc8kh3kw3pt1pb1pl1pr1+bias+relu");
}
