// Writing models back: the trained model as ONNX, the original file with the trained
// tensors' initializers replaced (everything else -- graph, opsets, metadata, other
// initializers -- kept as it was), written to a temporary file, flushed to disk and
// renamed over the destination, so a crash never leaves a partial model behind.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace convgen::model {

// BadModel when `source` cannot be parsed, Unsupported when an initializer named in
// `tensors` is not a float32 initializer of the model or has another element count, Io
// when the destination cannot be written.
void save_onnx_with_initializers(const std::string& source, const std::map<std::string, std::vector<float>>& tensors,
                                 const std::string& destination);

// Unsupported (naming the tensor) unless every name is a float32 initializer of `source`:
// what save_onnx_with_initializers needs, checked before a run rather than after it.
void check_initializers(const std::string& source, const std::vector<std::string>& names);

}  // namespace convgen::model
