// A model Op's runtime operator variant (runtime/ops/ops.h), shared by the in-process
// executor and the trainer so both map ops to operators the same way.
#pragma once

#include "runtime/graph/model_graph.h"
#include "runtime/ops/ops.h"

namespace convgen::model {

inline ops::Window window_of(const Attributes& a) {
  return {a.kernel, a.strides, a.dilations, a.pads_begin, a.pads_end};
}

// The element-wise function of a one-input op (Relu, LeakyRelu, Clip, Sigmoid and the
// functions below); anything else is the identity.
inline ops::Unary unary_of(Op op) {
  switch (op) {
    case Op::HardSigmoid: return ops::Unary::HardSigmoid;
    case Op::HardSwish: return ops::Unary::HardSwish;
    case Op::Tanh: return ops::Unary::Tanh;
    case Op::Exp: return ops::Unary::Exp;
    case Op::Log: return ops::Unary::Log;
    case Op::Sqrt: return ops::Unary::Sqrt;
    case Op::Neg: return ops::Unary::Neg;
    case Op::Abs: return ops::Unary::Abs;
    case Op::Softplus: return ops::Unary::Softplus;
    case Op::Elu: return ops::Unary::Elu;
    case Op::Erf: return ops::Unary::Erf;
    case Op::Reciprocal: return ops::Unary::Reciprocal;
    case Op::Selu: return ops::Unary::Selu;
    case Op::Sin: return ops::Unary::Sin;
    case Op::Cos: return ops::Unary::Cos;
    case Op::Floor: return ops::Unary::Floor;
    case Op::Ceil: return ops::Unary::Ceil;
    case Op::Relu: return ops::Unary::Relu;
    case Op::LeakyRelu: return ops::Unary::LeakyRelu;
    case Op::Clip: return ops::Unary::Clip;
    case Op::Sigmoid: return ops::Unary::Sigmoid;
    default: return ops::Unary::Identity;
  }
}

// An op that ops::unary computes (Identity is not one: it is a copy or a relabelling).
inline bool is_unary(Op op) { return unary_of(op) != ops::Unary::Identity; }

// The reduction of a Reduce* op; anything else is ReduceMean.
inline ops::Reduce reduce_of(Op op) {
  switch (op) {
    case Op::ReduceSum: return ops::Reduce::Sum;
    case Op::ReduceMax: return ops::Reduce::Max;
    case Op::ReduceL2: return ops::Reduce::L2;
    case Op::ReduceMin: return ops::Reduce::Min;
    case Op::ReduceProd: return ops::Reduce::Prod;
    case Op::ReduceSumSquare: return ops::Reduce::SumSquare;
    case Op::ReduceL1: return ops::Reduce::L1;
    case Op::ReduceLogSum: return ops::Reduce::LogSum;
    case Op::ReduceLogSumExp: return ops::Reduce::LogSumExp;
    default: return ops::Reduce::Mean;
  }
}

inline bool is_reduction(Op op) { return op == Op::ReduceMean || reduce_of(op) != ops::Reduce::Mean; }

// A layer the convolution kernels run: Conv, or ConvTranspose (its convolution's
// backward-data; model_graph.h: conv_layer_descriptor).
inline bool is_conv_layer(Op op) { return op == Op::Conv || op == Op::ConvTranspose; }

// Sub, Mul, Div, Pow, PRelu; anything else is Add.
inline ops::Binary binary_of(Op op) {
  switch (op) {
    case Op::Sub: return ops::Binary::Sub;
    case Op::Mul: return ops::Binary::Mul;
    case Op::Div: return ops::Binary::Div;
    case Op::Pow: return ops::Binary::Pow;
    case Op::PRelu: return ops::Binary::PRelu;
    case Op::Max: return ops::Binary::Max;
    case Op::Min: return ops::Binary::Min;
    default: return ops::Binary::Add;
  }
}

}  // namespace convgen::model
