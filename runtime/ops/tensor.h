// A float32 tensor of the model executor: a logical shape in ONNX order (N, C, spatial...)
// and its storage, either dense in that order or channels-last (N, spatial..., C -- the
// layout convgen's convolution kernels read and write) for rank-3 and rank-4 tensors.
// Operators read any layout through strides(), so activations keep the kernels' layout
// between layers and change layout only where an operator's semantics need ONNX order
// (Flatten, Reshape, Transpose, Gemm, MatMul, Softmax) or at the model's outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/memory/aligned_buffer.h"

namespace convgen {

struct Tensor {
  std::vector<int64_t> shape;  // logical, ONNX order
  bool channels_last = false;  // storage N, spatial..., C (rank 3 or 4 only)
  FloatBuffer data;

  Tensor() = default;
  Tensor(std::vector<int64_t> logical_shape, bool channels_last_storage);

  int64_t elements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
};

// Views of tensor storage owned elsewhere (a static memory plan's arena, a caller's
// buffer): the same shape/layout conventions as Tensor.
struct ConstView {
  const float* data = nullptr;
  std::vector<int64_t> shape;
  bool channels_last = false;
  int64_t elements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  std::vector<int64_t> strides() const;
};
struct View {
  float* data = nullptr;
  std::vector<int64_t> shape;
  bool channels_last = false;
  int64_t elements() const;
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  std::vector<int64_t> strides() const;
  operator ConstView() const { return {data, shape, channels_last}; }
};
inline ConstView view_of(const Tensor& t) { return {t.data.data(), t.shape, t.channels_last}; }
inline View view_of(Tensor& t) { return {t.data.data(), t.shape, t.channels_last}; }

// Element step of each logical dimension for a shape stored dense or channels-last.
std::vector<int64_t> layout_strides(const std::vector<int64_t>& shape, bool channels_last);

// Copies x into y (same logical shape), converting the layout.
void copy_layout(const ConstView& x, const View& y);

// The same values stored in the requested layout (a copy only when it differs).
Tensor with_layout(const Tensor& t, bool channels_last);

}  // namespace convgen
