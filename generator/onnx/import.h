// ONNX model files in, convgen's model graph out (runtime/graph/model_graph.h).
//
// Steps, each failing with a one-line convgen::Error that names the file (and the node,
// op type and attribute when one is at fault; docs/exit-codes.md):
//   1. parse the protobuf (Io when unreadable, BadModel when not a model: truncated,
//      corrupted);
//   2. opset of the default domain: 6..17 (Unsupported otherwise); ONNX's checker;
//   3. opsets below 11 are upgraded to 11 by ONNX's version converter (Unsupported when
//      it cannot), so lowering reads opset 11..17 forms only (Clip and Pad take their
//      bounds and pads as inputs). Not 13: the converter has no Softmax 12->13 adapter;
//      lowering keeps Softmax's pre-13 2-D coercion itself;
//   4. the batch dimension of each graph input is bound (fixed dimensions are kept;
//      any other dynamic dimension is an error); ONNX shape inference, strict;
//   5. constant sub-graphs are folded (generator/onnx/constant_folding.h: Constant nodes,
//      PyTorch's shape chains before Reshape and its F.pad chain) and every node is lowered to one Op with
//      normalised attributes (generator/onnx/lowering.cpp); float32 only;
//   6. channel shuffles (Reshape-Transpose-Reshape) become one channel Gather
//      (generator/onnx/channel_shuffle.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/graph/model_graph.h"
#include "schedules/errors.h"

namespace convgen::model {

struct ImportOptions {
  int64_t batch = 1;  // bound to every dynamic batch dimension (dimension 0 of an input)
  // Graph inputs given values at import: they become constants (initializers) before
  // shape inference, e.g. the shape, pads or Clip bounds that ONNX's node tests pass as
  // inputs. Each must name a graph input; float32 or int64.
  std::map<std::string, Value> constant_inputs;
  // A training graph (PyTorch's export with TrainingMode.TRAINING): BatchNormalization's
  // running-statistics outputs, its training_mode attribute, Dropout's mask output and
  // training_mode input are accepted and dropped when nothing reads them -- the trainer
  // gives BatchNormalization and Dropout their training semantics itself.
  bool training = false;
};

Graph import_onnx(const std::string& path, const ImportOptions& options = {});

// What import_onnx throws (Unsupported) when an operand that must be a constant --
// Clip's bounds, Pad's pads, Reshape's shape, Dropout's ratio, ... -- is not: `input`
// names that value, so a caller holding data for a graph input of that name can bind
// it (ImportOptions::constant_inputs) and import again.
class ConstantInputNeeded : public Error {
 public:
  ConstantInputNeeded(const std::string& message, std::string input)
      : Error(ExitCode::Unsupported, message), input_(std::move(input)) {}
  const std::string& input() const { return input_; }

 private:
  std::string input_;
};

// The names of a model file's graph inputs that are not initializers, in order (for
// matching data files to inputs before import). Same errors as import_onnx's parse.
std::vector<std::string> onnx_input_names(const std::string& path);

// The opsets import_onnx accepts.
constexpr int64_t kMinOpset = 6, kMaxOpset = 17, kLoweringOpset = 11;

}  // namespace convgen::model
