// The float32 initializers of an ONNX model file, read without protobuf or the ONNX
// library (the wire format of ModelProto.graph.initializer is small and stable): for
// generated training drivers that start from weights trained elsewhere (e.g. exported
// by PyTorch, or by `convgen train --save`).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace convgen {

struct OnnxInitializer {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// Every float32 initializer by name (initializers of other types are skipped). Errors
// are convgen::Error naming the file: Io when it cannot be read, BadData when it is not
// a well-formed ONNX model or a tensor's data does not match its shape, Unsupported for
// data stored in an external file.
std::map<std::string, OnnxInitializer> read_onnx_initializers(const std::string& path);

}  // namespace convgen
