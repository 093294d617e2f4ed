#include "generator/train/prepare_graph.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "generator/model/fusion.h"
#include "generator/onnx/import.h"
#include "runtime/graph/operators.h"
#include "schedules/errors.h"

namespace convgen::model {

bool op_trains(Op op) {
  if (is_unary(op)) return true;
  if (is_reduction(op)) return op != Op::ReduceProd;  // no backward for a product
  switch (op) {
    case Op::Conv: case Op::ConvTranspose: case Op::Gemm: case Op::MatMul: case Op::MaxPool: case Op::AveragePool:
    case Op::GlobalAveragePool: case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::PRelu: case Op::Max: case Op::Min: case Op::Concat:
    case Op::Flatten: case Op::Reshape: case Op::Pad: case Op::LRN: case Op::Dropout: case Op::Identity:
    case Op::BatchNormalization: case Op::WithinChannelLRN: case Op::Slice: case Op::Transpose: case Op::Resize:
    case Op::LayerNormalization: case Op::DepthToSpace: case Op::SpaceToDepth: case Op::Gather:
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

// Drops a final Softmax / LogSoftmax over the class axis: its input is the logits.
std::string strip_softmax(Graph& g) {
  const std::string out = g.outputs.at(0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || n.outputs[0] != out) continue;
    if (n.op != Op::Softmax && n.op != Op::LogSoftmax) return out;
    const std::string logits = n.inputs[0];
    const size_t rank = g.value(logits).shape.size();
    // Before opset 13 a Softmax flattens from its axis: on [N, K, H, W] that is one
    // distribution over K*H*W, not one per pixel.
    if ((rank != 2 && rank != 4) || n.attributes.axis != 1 || (rank == 4 && n.attributes.softmax_coerce_2d))
      throw unsupported(g, n, "the training loss needs a softmax over axis 1 of [N, classes] or [N, classes, H, W] logits");
    g.values.erase(out);
    g.outputs[0] = logits;
    g.nodes.erase(g.nodes.begin() + static_cast<long>(i));
    return logits;
  }
  return out;
}


// The value of a one-element float constant, if `name` is one.
bool scalar_constant(const Graph& g, const std::string& name, float* v) {
  if (!g.is_float_constant(name) || g.value(name).data.size() != 1) return false;
  *v = g.value(name).data[0];
  return true;
}

// Caffe's WITHIN_CHANNEL LRN as PyTorch and scripts/make-bundled-models write it --
// Mul(x, x) -> AveragePool(k x k, stride 1, "same" pads, count_include_pad) -> Mul(alpha)
// -> Add(bias) -> Pow(exponent) -> Mul(x, .), every intermediate read once -- becomes one
// WithinChannelLRN node: one pass forward and one backward instead of six of each, and
// five activations and gradients fewer to store.
int fuse_within_channel_lrn(Graph& g, std::vector<std::string>* why) {
  int fused = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node square = g.nodes[i];
    if (square.op != Op::Mul || square.inputs[0] != square.inputs[1] || g.value(square.inputs[0]).is_constant) continue;
    const std::string x = square.inputs[0];
    if (g.value(x).shape.size() != 4) continue;
    std::vector<size_t> chain = {i};
    auto next = [&](Op op) -> const Node* {
      const auto r = g.readers_of(g.nodes[chain.back()].outputs[0]);
      if (r.size() != 1 || g.nodes[r[0]].op != op) return nullptr;
      chain.push_back(r[0]);
      return &g.nodes[r[0]];
    };
    const Node* pool = next(Op::AveragePool);
    if (!pool) continue;
    const Attributes& pa = pool->attributes;
    const int64_t k = pa.kernel.size() == 2 ? pa.kernel[0] : 0;
    const int64_t half = (k - 1) / 2;
    if (k % 2 != 1 || pa.kernel[1] != k || pa.strides != std::vector<int64_t>{1, 1} || !pa.count_include_pad ||
        pa.pads_begin != std::vector<int64_t>{half, half} || pa.pads_end != std::vector<int64_t>{half, half} ||
        (!pa.dilations.empty() && pa.dilations != std::vector<int64_t>{1, 1}))
      continue;
    float alpha = 0, bias = 0, exponent = 0;
    auto other = [&](const Node& n, const std::string& mine) { return n.inputs[0] == mine ? n.inputs[1] : n.inputs[0]; };
    const Node* scale = next(Op::Mul);
    if (!scale || !scalar_constant(g, other(*scale, pool->outputs[0]), &alpha)) continue;
    const Node* shift = next(Op::Add);
    if (!shift || !scalar_constant(g, other(*shift, scale->outputs[0]), &bias)) continue;
    const Node* power = next(Op::Pow);
    if (!power || power->inputs[0] != shift->outputs[0] || !scalar_constant(g, power->inputs[1], &exponent)) continue;
    const Node* product = next(Op::Mul);
    if (!product || other(*product, power->outputs[0]) != x) continue;
    Node fused_node;
    fused_node.name = product->name;
    fused_node.op = Op::WithinChannelLRN;
    fused_node.inputs = {x};
    fused_node.outputs = product->outputs;
    fused_node.attributes.size = k;
    fused_node.attributes.alpha = alpha;
    fused_node.attributes.lrn_bias = bias;
    fused_node.attributes.beta = exponent;
    if (why)
      why->push_back(fmt::format("{}: {} ... {} fused into one within-channel LRN ({}x{}, alpha {:g}, bias {:g}, "
                                 "exponent {:g})", fused_node.name, square.name, product->name, k, k, alpha, bias,
                                 exponent));
    for (size_t c = 0; c + 1 < chain.size(); ++c) g.values.erase(g.nodes[chain[c]].outputs[0]);
    const size_t last = chain.back();
    g.nodes[last] = fused_node;
    std::sort(chain.begin(), chain.end());
    for (size_t c = chain.size() - 1; c-- > 0;) g.nodes.erase(g.nodes.begin() + static_cast<long>(chain[c]));
    ++fused;
    i = static_cast<size_t>(-1);  // indices moved: start over at node 0 (graphs are small)
  }
  return fused;
}

// When a node of kind `op` is the only reader of node i's output (not a graph output):
// removes that node, gives node i its output, moves i to node i's new index, and returns
// the removed node.
std::optional<Node> absorb_only_reader(Graph& g, size_t& i, Op op) {
  const std::string out = g.nodes[i].outputs[0];
  const auto r = g.readers_of(out);
  if (r.size() != 1 || g.nodes[r[0]].op != op || g.is_output(out))
    return std::nullopt;
  const size_t reader = r[0];
  Node absorbed = g.nodes[reader];
  g.nodes[i].outputs[0] = absorbed.outputs[0];
  g.values.erase(out);
  g.nodes.erase(g.nodes.begin() + static_cast<long>(reader));
  if (reader < i) --i;
  return absorbed;
}

// A Relu that is the only reader of a `producer` node's output runs inside that node
// (fused_relu): the same bits as two nodes, one pass over the activation fewer each way
// and one stored activation fewer.
//   MaxPool: max(0, pool(x)); the backward's scatter skips the outputs ReLU zeroed
//     (cifar10_full's pool1 -> relu1).
//   BatchNormalization: the forward stores max(0, y) and the backward masks dy with that
//     output (the BN -> ReLU of every torchvision network).
void fuse_relu_into(Graph& g, Op producer, const char* how, std::vector<std::string>* why) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != producer || g.nodes[i].attributes.fused_relu || g.nodes[i].attributes.fused_clip) continue;
    const std::optional<Node> relu = absorb_only_reader(g, i, Op::Relu);
    if (!relu) continue;
    g.nodes[i].attributes.fused_relu = true;
    if (why) why->push_back(fmt::format("{} fused into {} ({})", relu->name, g.nodes[i].name, how));
  }
}

// A Clip that is the only reader of a BatchNormalization's output runs inside it
// (fused_clip, bounds in clip_min/clip_max): the forward stores min(max(y, lo), hi) as
// ops::unary does; the backward recomputes y from the BN's input with the forward's
// per-channel factors and passes dy where lo <= y <= hi, as the Clip's backward does.
// The same bits as two nodes (MobileNet-V2's BN -> ReLU6).
void fuse_clip_into_batch_norm(Graph& g, std::vector<std::string>* why) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Attributes& a = g.nodes[i].attributes;
    if (g.nodes[i].op != Op::BatchNormalization || a.fused_relu || a.fused_clip) continue;
    const std::optional<Node> clip = absorb_only_reader(g, i, Op::Clip);
    if (!clip) continue;
    Attributes& fused = g.nodes[i].attributes;  // i may have moved
    fused.fused_clip = true;
    fused.clip_min = clip->attributes.clip_min;
    fused.clip_max = clip->attributes.clip_max;
    if (why)
      why->push_back(fmt::format("{} fused into {} (clip({:g}, {:g}) of batch norm)", clip->name, g.nodes[i].name,
                                 fused.clip_min, fused.clip_max));
  }
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
  if ((logits.shape.size() != 2 && logits.shape.size() != 4) || logits.shape[0] != micro_batch)
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: not supported in training: output '{}' is not [N, classes] or [N, classes, H, W] "
                            "logits", g.source, t.logits));
  t.classes = logits.shape[1];
  t.label_elements = logits.shape.size() == 4 ? logits.shape[2] * logits.shape[3] : 1;
  // MatMul(x, W') with W' folded from Transpose(W): a Gemm of W with transB, so that the
  // parameter is W, the tensor the model file holds (and --save writes back).
  for (Node& n : g.nodes) {
    if (n.op != Op::MatMul) continue;
    const auto from = g.transposed_constants.find(n.inputs[1]);
    if (from == g.transposed_constants.end() || !g.is_float_constant(from->second)) continue;
    n.op = Op::Gemm;
    n.inputs[1] = from->second;
    n.attributes.trans_b = true;
    n.attributes.alpha = 1.0f;
    n.attributes.beta = 0.0f;
    if (why) why->push_back(fmt::format("{}: MatMul of Transpose({}) trained as a Gemm of {} with transB", n.name,
                                        from->second, from->second));
  }
  for (const Node& n : g.nodes) {
    if (!op_trains(n.op)) throw unsupported(g, n, "the op has no backward in convgen");
    if (!n.attributes.axes.empty() && n.attributes.axes[0] == 0) throw unsupported(g, n, "a reduction over the batch");
    if (n.op == Op::Transpose && n.attributes.perm.at(0) != 0) throw unsupported(g, n, "a Transpose that moves the batch");
    if (n.op == Op::Gather && n.attributes.axis == 0) throw unsupported(g, n, "a Gather along the batch axis");
    if (n.op == Op::LayerNormalization && n.attributes.axis == 0)
      throw unsupported(g, n, "a LayerNormalization over the batch axis");
    if (n.op == Op::Slice && (n.attributes.slice_first.at(0) != 0 || n.attributes.slice_step.at(0) != 1))
      throw unsupported(g, n, "a Slice of the batch");
    for (const std::string& out : n.outputs)
      if (!g.value(out).shape.empty() && g.value(out).shape[0] != micro_batch)
        throw unsupported(g, n, fmt::format("output '{}' does not keep the batch in dimension 0", out));
    if (n.op == Op::Reshape && (n.attributes.shape.empty() || n.attributes.shape[0] != micro_batch))
      throw unsupported(g, n, "a Reshape that moves the batch dimension");
    if (n.op == Op::Concat && n.attributes.axis == 0) throw unsupported(g, n, "concatenation along the batch");
    if (n.op == Op::Pad && (n.attributes.pad_amounts.at(0) != 0 || n.attributes.pad_amounts.at(n.attributes.pad_amounts.size() / 2) != 0))
      throw unsupported(g, n, "padding of the batch dimension");
    if ((n.op == Op::MatMul || n.op == Op::Gemm) && n.attributes.trans_a && g.value(n.inputs[0]).shape.size() != 2)
      throw unsupported(g, n, "transA of an operand of rank above 2");
    if (n.op == Op::MatMul && (g.value(n.inputs[0]).shape.size() < 2 || g.value(n.inputs[1]).shape.size() != 2))
      throw unsupported(g, n, "MatMul of other than [N, ..., K] by [K, M] operands");
  }
  fuse_within_channel_lrn(g, why);
  fuse_for_training(g, why);
  fuse_relu_into(g, Op::MaxPool, "max(0, pool)", why);
  fuse_relu_into(g, Op::BatchNormalization, "max(0, batch norm)", why);
  fuse_clip_into_batch_norm(g, why);

  // Trainable parameters, in graph order, each once.
  std::set<std::string> seen;
  auto train = [&](const Node& n, size_t input) {
    if (input >= n.inputs.size() || n.inputs[input].empty() || !g.is_float_constant(n.inputs[input])) return;
    if (seen.insert(n.inputs[input]).second) t.trainable.push_back(n.inputs[input]);
  };
  for (const Node& n : g.nodes) {
    if (is_conv_layer(n.op)) {
      if (!g.is_float_constant(n.inputs[1])) throw unsupported(g, n, "weights that are not an initializer");
      train(n, 1), train(n, 2);
    } else if (n.op == Op::Gemm || n.op == Op::MatMul) {
      train(n, 1), train(n, 2);
    } else if (n.op == Op::BatchNormalization || n.op == Op::LayerNormalization) {
      train(n, 1), train(n, 2);
    } else if (n.op == Op::PRelu) {
      train(n, 1);  // the slope, one value or one per channel
    } else if (n.op == Op::Mul || n.op == Op::Add || n.op == Op::Sub || n.op == Op::Div) {
      // A tensor (not a scalar) initializer here is a module's parameter in PyTorch's
      // training exports: LayerNorm's scale and shift, ConvNeXt's layer scale; so are
      // those lowering marked (InstanceNormalization's, whatever the channel count).
      for (size_t i = 0; i < 2; ++i)
        if (i < n.inputs.size() && g.is_float_constant(n.inputs[i]) &&
            (g.value(n.inputs[i]).elements() > 1 || g.parameter_constants.count(n.inputs[i])))
          train(n, i);
    }
  }
  if (why)
    why->push_back(fmt::format("training graph: {} nodes, {} trainable tensors, logits '{}' ({} classes), micro-batch {}",
                               g.nodes.size(), t.trainable.size(), t.logits, t.classes, micro_batch));
  return t;
}

}  // namespace convgen::model
