// The forward kernel's fused activation: ReLU, or the descriptor's other activation
// (schedules/conv_descriptor.h), applied to the accumulated value plus bias.
//
// Contract: Clip, LeakyRelu and ReLU give the bits of the runtime operators
// (runtime/ops/ops.h: unary) applied to the same value. HardSwish and Silu may differ in
// rounding: LLVM may contract a multiply-add into an FMA, and Silu's exponential is the
// polynomial below, not libm's -- within 4 float ulps of libm's expf over the clamped
// range, so Silu within 8 ulps plus 1e-30 absolute of the unfused Sigmoid-then-Mul.
#pragma once

#include <Halide.h>

#include "schedules/conv_descriptor.h"

namespace convgen {

Halide::Expr apply_activation(const ConvDescriptor& d, Halide::Expr value);

// e^x for Float(32) in plain arithmetic, so it vectorises (Halide's exp of a float calls
// libm per lane on x86): range reduction by ln 2 in two parts, a polynomial on
// |r| <= ln(2)/2 (e^r = 1 + r + r^2 p(r), p of degree 5), and the power of two built in
// the exponent bits. x is clamped to
// [-87, 88], inside the normal range of the result.
Halide::Expr exp_f32(Halide::Expr x);

}  // namespace convgen
