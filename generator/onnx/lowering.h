// Step 5 of import_onnx (generator/onnx/import.h): fold constant sub-graphs and lower each ONNX
// node (opset 11..17 forms) to one model::Op with normalised attributes. Internal to the
// importer: it sees ONNX protobufs, nothing after it does.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// Op types lowered to a model::Op (generator/onnx/constant_folding.h: those folded).
bool is_lowered_op(const std::string& op_type);

// A TensorProto as a constant Value (float32, or int64 for shape tensors); `where`
// prefixes errors.
Value tensor_value(const onnx::TensorProto& t, const std::string& where);

// Appends the graph's nodes to g.nodes, in order, with constants folded into g.values.
// g.values already holds the initializers and every inferred shape. `opset` is the
// model's opset after the version converter (>= kLoweringOpset).
void lower_nodes(const onnx::GraphProto& graph, int64_t opset, Graph& g);

}  // namespace convgen::model
