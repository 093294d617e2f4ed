// Constant and shape sub-graphs evaluated at import (step 5 of import_onnx,
// generator/onnx/import.h): one small evaluator over constant tensors, integer (int64,
// int32, bool and the small integer types, held as int64) and float32, for the ops
// exporters emit around shapes, pads and masks -- PyTorch's Shape/Gather/Concat chains
// before Reshape, its ConstantOfShape/Slice/Transpose chain that computes F.pad's pads.
// A node folds when every input is a constant (Shape: when its input's shape is known);
// its result must agree with ONNX shape inference. Internal to generator/onnx.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "generator/onnx/node_context.h"
#include "runtime/graph/model_graph.h"

namespace convgen::model {

// Op types the evaluator computes when their inputs are constants. Some are also lowered
// (Add, Reshape, Concat, ...); the others can only be folded.
bool is_foldable_op(const std::string& op_type);

// Evaluates node c into g.values (a constant Value per output) when it can be: a
// Constant, a Shape or Size of a known shape, a foldable op on constant inputs. False
// when an input is not a constant (yet). Errors (bad indices, shapes that disagree,
// unsupported dtypes) name the node.
bool fold_node(const NodeContext& c, Graph& g);

// Folds the graph's nodes in order into constant values of g; returns how many folded.
// import_onnx writes them back into the model and infers shapes again, so that shapes
// behind a folded Reshape become known.
int fold_constants(const onnx::GraphProto& graph, Graph& g);

// A Slice node's window over a tensor of `shape` (its starts, ends, axes and steps are
// constant inputs), ONNX's clamping applied: per axis, the first index, the step and the
// output extent.
struct SliceWindow {
  std::vector<int64_t> first, step, shape;
};
SliceWindow slice_window(const NodeContext& c, const std::vector<int64_t>& shape);

// A constant's elements as integers (float constants truncated toward zero).
std::vector<int64_t> integers_of(const Value& v);

// Numpy (multidirectional) broadcasting of two shapes; BadModel naming the node when
// they do not broadcast.
std::vector<int64_t> broadcast(const NodeContext& c, const std::vector<int64_t>& a, const std::vector<int64_t>& b);

}  // namespace convgen::model
