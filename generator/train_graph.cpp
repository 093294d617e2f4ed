#include "train_graph.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "errors.h"
#include "model_fusion.h"
#include "onnx_import.h"

namespace convgen::model {

bool op_trains(Op op) {
  switch (op) {
    case Op::Conv: case Op::Gemm: case Op::MatMul: case Op::Relu: case Op::LeakyRelu: case Op::Clip:
    case Op::Sigmoid: case Op::MaxPool: case Op::AveragePool: case Op::GlobalAveragePool: case Op::Add:
    case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::Concat: case Op::Flatten: case Op::Reshape:
    case Op::Pad: case Op::LRN: case Op::Dropout: case Op::Identity: case Op::BatchNormalization:
      return true;
    default:
      return false;
  }
}

namespace {

Error unsupported(const Graph& g, const Node& n, const std::string& what) {
  return Error(ExitCode::Unsupported,
               fmt::format("{}: node '{}' ({}): not supported in training: {}", g.source, n.name, op_name(n.op), what));
}

bool float_constant(const Graph& g, const std::string& name) {
  auto it = g.values.find(name);
  return it != g.values.end() && it->second.is_constant && !it->second.is_int64;
}

// Drops a final Softmax / LogSoftmax over the class axis: its input is the logits.
std::string strip_softmax(Graph& g) {
  const std::string out = g.outputs.at(0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || n.outputs[0] != out) continue;
    if (n.op != Op::Softmax && n.op != Op::LogSoftmax) return out;
    const std::string logits = n.inputs[0];
    if (g.value(logits).shape.size() != 2 || n.attributes.axis != 1)
      throw unsupported(g, n, "the training loss needs a softmax over axis 1 of [N, classes] logits");
    g.values.erase(out);
    g.outputs[0] = logits;
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    return logits;
  }
  return out;
}

}  // namespace

TrainGraph prepare_training_graph(const std::string& model_path, int64_t micro_batch, std::vector<std::string>* why) {
  ImportOptions options;
  options.batch = micro_batch;
  options.training = true;
  TrainGraph t;
  t.graph = import_onnx(model_path, options);
  Graph& g = t.graph;
  if (g.inputs.size() != 1 || g.outputs.size() != 1)
    throw Error(ExitCode::Unsupported, fmt::format("{}: not supported in training: the model has {} inputs and {} "
                                                   "outputs; training needs one image input and one logits output",
                                                   g.source, g.inputs.size(), g.outputs.size()));
  t.input = g.inputs[0];
  const Value& in = g.value(t.input);
  if (in.shape.size() != 4 || in.shape[0] != micro_batch)
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: not supported in training: input '{}' is not [N, C, H, W] with a batch dimension "
                            "(training binds N to the micro-batch size {})",
                            g.source, t.input, micro_batch));
  t.sample_shape = {in.shape[1], in.shape[2], in.shape[3]};
  for (const Node& n : g.nodes)
    if (!op_trains(n.op) && !(n.op == Op::Softmax || n.op == Op::LogSoftmax))
      throw unsupported(g, n, "the op has no backward in convgen");
  t.logits = strip_softmax(g);
  const Value& logits = g.value(t.logits);
  if (logits.shape.size() != 2 || logits.shape[0] != micro_batch)
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: not supported in training: output '{}' is not [N, classes] logits", g.source, t.logits));
  t.classes = logits.shape[1];
  for (const Node& n : g.nodes) {
    if (!op_trains(n.op)) throw unsupported(g, n, "the op has no backward in convgen");
    for (const std::string& out : n.outputs)
      if (!g.value(out).shape.empty() && g.value(out).shape[0] != micro_batch)
        throw unsupported(g, n, fmt::format("output '{}' does not keep the batch in dimension 0", out));
    if (n.op == Op::Reshape && (n.attributes.shape.empty() || n.attributes.shape[0] != micro_batch))
      throw unsupported(g, n, "a Reshape that moves the batch dimension");
    if (n.op == Op::Concat && n.attributes.axis == 0) throw unsupported(g, n, "concatenation along the batch");
    if (n.op == Op::Pad && (n.attributes.pad_amounts.at(0) != 0 || n.attributes.pad_amounts.at(n.attributes.pad_amounts.size() / 2) != 0))
      throw unsupported(g, n, "padding of the batch dimension");
    if (n.op == Op::MatMul && (g.value(n.inputs[0]).shape.size() != 2 || g.value(n.inputs[1]).shape.size() != 2))
      throw unsupported(g, n, "MatMul of other than 2-D operands");
  }
  fuse_for_training(g, why);

  // Trainable parameters, in graph order, each once.
  std::set<std::string> seen;
  auto train = [&](const Node& n, size_t input) {
    if (input >= n.inputs.size() || n.inputs[input].empty() || !float_constant(g, n.inputs[input])) return;
    if (seen.insert(n.inputs[input]).second) t.trainable.push_back(n.inputs[input]);
  };
  for (const Node& n : g.nodes) {
    if (n.op == Op::Conv) {
      if (!float_constant(g, n.inputs[1])) throw unsupported(g, n, "weights that are not an initializer");
      train(n, 1), train(n, 2);
    } else if (n.op == Op::Gemm || n.op == Op::MatMul) {
      train(n, 1), train(n, 2);
    } else if (n.op == Op::BatchNormalization) {
      train(n, 1), train(n, 2);
    }
  }
  if (why)
    why->push_back(fmt::format("training graph: {} nodes, {} trainable tensors, logits '{}' ({} classes), micro-batch {}",
                               g.nodes.size(), t.trainable.size(), t.logits, t.classes, micro_batch));
  return t;
}

}  // namespace convgen::model
