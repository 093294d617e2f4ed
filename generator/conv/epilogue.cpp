#include "generator/conv/epilogue.h"

namespace convgen {

using Halide::Expr;

Expr exp_f32(Expr x) {
  x = Halide::clamp(x, -87.0f, 88.0f);
  // x = n ln2 + r; ln2 split so n * kLn2High is exact for |n| <= 128 (Cody and Waite).
  constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  Expr n = Halide::round(x * kLog2e);
  Expr r = x - n * kLn2High - n * kLn2Low;
  // Minimax coefficients of (e^r - 1 - r) / r^2 on |r| <= ln(2)/2 (as in Cephes' expf).
  Expr p = 1.9875691500e-4f;
  for (float c : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
    p = p * r + c;
  Expr e_r = p * (r * r) + r + 1.0f;
  Expr two_n = Halide::reinterpret(Halide::Float(32), (Halide::cast<int32_t>(n) + 127) << 23);
  return e_r * two_n;
}

namespace {

// std::max(a, b) and std::min(a, b) of the runtime's operators: a unless b is strictly
// beyond it, so a NaN or a -0 in `a` stays as it is. strict_float: otherwise Halide and
// LLVM assume no NaNs and make these max and min instructions, which drop a NaN.
Expr std_max(Expr a, Expr b) { return Halide::strict_float(Halide::select(a < b, b, a)); }
Expr std_min(Expr a, Expr b) { return Halide::strict_float(Halide::select(b < a, b, a)); }

}  // namespace

Expr apply_activation(const ConvDescriptor& d, Expr v) {
  if (d.relu) return Halide::max(v, 0.0f);
  switch (d.activation) {
    case Activation::None: return v;
    case Activation::Clip: return std_min(std_max(v, d.clip_lo), d.clip_hi);
    case Activation::LeakyRelu: return Halide::select(v >= 0.0f, v, d.leaky_alpha * v);
    case Activation::HardSwish:
      // ONNX HardSwish: HardSigmoid's slope 1/6 and offset 1/2, as the importer lowers it.
      return v * std_min(std_max(v * (1.0f / 6.0f) + 0.5f, 0.0f), 1.0f);
    case Activation::Silu: return v * (1.0f / (1.0f + exp_f32(-v)));
  }
  return v;
}

}  // namespace convgen
