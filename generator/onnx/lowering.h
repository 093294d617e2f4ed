// Step 5 of import_onnx (generator/onnx/import.h): fold constant sub-graphs and lower each ONNX
// node (opset 11..17 forms) to one model::Op with normalised attributes. Internal to the
// importer: it sees ONNX protobufs, nothing after it does.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

#include "runtime/graph/model_graph.h"

namespace convgen::model {

// Op types lowered to a model::Op, and op types folded when their inputs are constants.
bool is_lowered_op(const std::string& op_type);
bool is_foldable_op(const std::string& op_type);

// A TensorProto as a constant Value (float32, or int64 for shape tensors); `where`
// prefixes errors.
Value tensor_value(const onnx::TensorProto& t, const std::string& where);

// Folds the nodes whose outputs are computable at import (Constant, Shape of a known
// shape, shape arithmetic on constants) into constant values of g, in order; returns
// how many it folded. import_onnx writes them back into the model and infers shapes
// again, so that shapes behind a folded Reshape become known.
int fold_constants(const onnx::GraphProto& graph, Graph& g);

// Appends the graph's nodes to g.nodes, in order, with constants folded into g.values.
// g.values already holds the initializers and every inferred shape. `opset` is the
// model's opset after the version converter (>= kLoweringOpset).
void lower_nodes(const onnx::GraphProto& graph, int64_t opset, Graph& g);

}  // namespace convgen::model
