// The model executor's operators other than convolution, with ONNX semantics, over
// tensors in either layout (tensor.h). Plain, readable loops: the in-process executor
// (`convgen run` / `check`) runs them; the generated model driver will call fast
// versions with the same contracts. Output shapes come from the caller (the model's
// inferred shapes) where ONNX defines them by formula (pooling, broadcasting).
#pragma once

#include <cstdint>
#include <vector>

#include "tensor.h"

namespace convgen::ops {

enum class Unary { Relu, LeakyRelu, Clip, Sigmoid, Identity };
// alpha: LeakyRelu's slope; lo/hi: Clip's bounds. Output keeps x's layout.
Tensor unary(const Tensor& x, Unary op, float alpha = 0.0f, float lo = 0.0f, float hi = 0.0f);

enum class Binary { Add, Sub, Mul, Div, Pow };
// Numpy broadcasting to out_shape; the output takes the layout of an operand of that
// exact shape stored channels-last, else dense.
Tensor binary(const Tensor& a, const Tensor& b, Binary op, const std::vector<int64_t>& out_shape);

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads_begin, pads_end;
};
// MaxPool / AveragePool (count_include_pad counts window positions inside the explicit
// padding, not past it), to the given output shape; keeps x's layout.
Tensor max_pool(const Tensor& x, const Window& w, const std::vector<int64_t>& out_shape);
Tensor average_pool(const Tensor& x, const Window& w, bool count_include_pad, const std::vector<int64_t>& out_shape);
Tensor global_pool(const Tensor& x, bool max);

// Y = alpha * A' * B' + beta * C (C optional: null), A and B 2-D; dense output.
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor* c, float alpha, float beta, bool trans_a, bool trans_b);
// Numpy matmul (batch dimensions broadcast, 1-D operands promoted); dense output.
Tensor matmul(const Tensor& a, const Tensor& b, const std::vector<int64_t>& out_shape);

Tensor concat(const std::vector<const Tensor*>& xs, int64_t axis);
// Same values, new logical shape (dense storage).
Tensor reshape(const Tensor& x, const std::vector<int64_t>& shape);
Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm);
Tensor batch_norm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean, const Tensor& var,
                  float epsilon);
Tensor lrn(const Tensor& x, int64_t size, float alpha, float beta, float bias);
// Constant padding; pads = begins of every axis, then ends.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, float value);
// Softmax / LogSoftmax along axis, or (coerce_2d, before opset 13) over the flattened
// dimensions from axis on; dense output.
Tensor softmax(const Tensor& x, int64_t axis, bool coerce_2d, bool log);

}  // namespace convgen::ops
