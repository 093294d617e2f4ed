// ONNX TensorProto files (the format of ONNX's backend test data: input_0.pb, ...) in
// and out, for `convgen run` and `convgen check`.
#pragma once

#include <string>

#include "runtime/graph/model_graph.h"
#include "runtime/ops/tensor.h"

namespace convgen::model {

// The tensor of a .pb file: float32 or int64 (Value::is_int64), its name as stored
// (may be empty). Io when unreadable, BadData when not a valid float32/int64 tensor.
Value read_tensor_file(const std::string& path);

// Writes a dense float32 tensor named `name` to `path` atomically (temp file + rename).
void write_tensor_file(const std::string& path, const std::string& name, const Tensor& t);

}  // namespace convgen::model
