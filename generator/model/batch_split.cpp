#include "generator/model/batch_split.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "generator/model/fusion.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

std::string dims(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

bool constant_input(const Graph& g, const Node& n, size_t i) {
  return i < n.inputs.size() && !n.inputs[i].empty() && g.value(n.inputs[i]).is_constant;
}

// Why node `n` (whose non-constant values already passed the shape test) may mix
// samples, or "". Ops act per sample unless they reach over axis 0 or take a
// non-constant operand as the matrix that multiplies it.
std::string mixing_reason(const Graph& g, const Node& n) {
  const Attributes& a = n.attributes;
  auto rank_of = [&](size_t i) { return g.value(n.inputs[i]).shape.size(); };
  auto need_constant = [&](size_t i, const char* what) -> std::string {
    if (i >= n.inputs.size() || n.inputs[i].empty() || constant_input(g, n, i)) return "";
    return fmt::format("its {} '{}' is computed, not a constant", what, n.inputs[i]);
  };
  switch (n.op) {
    case Op::Conv:
    case Op::ConvTranspose: {
      std::string r = need_constant(1, "weights");
      return r.empty() ? need_constant(2, "bias") : r;
    }
    case Op::BatchNormalization:
      for (size_t i = 1; i < 5; ++i)
        if (std::string r = need_constant(i, "statistic or parameter"); !r.empty()) return r;
      return "";
    case Op::Gemm: {
      if (!constant_input(g, n, 0) && a.trans_a) return "it transposes its computed first operand (samples become columns)";
      if (constant_input(g, n, 0)) return "its first operand is a constant multiplying the samples from the left";
      if (std::string r = need_constant(1, "second operand"); !r.empty()) return r;
      // C broadcasts to the output's rows: a computed C is per sample only as a full
      // [samples, N] matrix, a constant one only when it has no rows of its own.
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        const std::vector<int64_t>& c = g.value(n.inputs[2]).shape;
        if (constant_input(g, n, 2) && c.size() == 2 && c[0] != 1)
          return fmt::format("its addend '{}', a constant {}, has rows of its own against the samples", n.inputs[2],
                             dims(c));
        if (!constant_input(g, n, 2) && c.size() != 2)
          return fmt::format("its addend '{}' is computed with shape {}, not one row per sample", n.inputs[2], dims(c));
      }
      return "";
    }
    case Op::MatMul:
      if (constant_input(g, n, 0)) return "its first operand is a constant multiplying the samples from the left";
      if (rank_of(0) < 2) return "its first operand is a vector (the batch axis is the reduced one)";
      return need_constant(1, "second operand");
    case Op::LayerNormalization:
      if (a.axis == 0) return "its axis is the batch axis";
      // A computed scale or bias would be one value per sample at one batch, per element at another.
      for (size_t i = 1; i < 3; ++i)
        if (std::string r = need_constant(i, i == 1 ? "scale" : "bias"); !r.empty()) return r;
      return "";
    case Op::Softmax:
    case Op::LogSoftmax:
    case Op::Concat:
    case Op::Gather:
    case Op::Flatten:
      return a.axis == 0 ? "its axis is the batch axis" : "";
    case Op::Transpose:
      return !a.perm.empty() && a.perm[0] != 0 ? "it moves the batch axis" : "";
    case Op::Slice:
      return !a.slice_first.empty() && (a.slice_first[0] != 0 || a.slice_step[0] != 1) ? "it slices the batch axis" : "";
    case Op::Pad: {
      const size_t rank = a.pad_amounts.size() / 2;
      return rank > 0 && (a.pad_amounts[0] != 0 || a.pad_amounts[rank] != 0) ? "it pads the batch axis" : "";
    }
    case Op::ReduceMean: case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceL2: case Op::ReduceMin:
    case Op::ReduceProd: case Op::ReduceSumSquare: case Op::ReduceL1: case Op::ReduceLogSum:
    case Op::ReduceLogSumExp:
      return a.axes.empty() || a.axes[0] == 0 ? "it reduces over the batch axis" : "";
    case Op::NegativeLogLikelihoodLoss:
      return "its labels are bound for the whole batch";
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::PRelu: case Op::Max:
    case Op::Min: case Op::Sum: {
      // Broadcasting aligns trailing axes: a computed operand of lower rank would meet
      // the batch axis of another.
      // A constant of the output's rank reaches axis 0: only with extent 1 there is it the
      // same for every sample (PRelu's slope is not shape-checked against x by ONNX).
      const size_t rank = g.value(n.outputs[0]).shape.size();
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty()) continue;
        if (!constant_input(g, n, i) && rank_of(i) != rank)
          return fmt::format("its computed operand '{}' broadcasts against the batch axis", n.inputs[i]);
        if (constant_input(g, n, i) && rank_of(i) == rank && g.value(n.inputs[i]).shape[0] != 1)
          return fmt::format("its constant operand '{}' has rows along the batch axis", n.inputs[i]);
      }
      return "";
    }
    case Op::Relu: case Op::LeakyRelu: case Op::Clip: case Op::Sigmoid: case Op::MaxPool: case Op::AveragePool:
    case Op::GlobalAveragePool: case Op::GlobalMaxPool: case Op::Reshape: case Op::LRN: case Op::Dropout:
    case Op::Identity: case Op::HardSigmoid: case Op::HardSwish: case Op::Tanh: case Op::Exp: case Op::Log:
    case Op::Sqrt: case Op::Neg: case Op::Abs: case Op::Softplus: case Op::Elu: case Op::Erf: case Op::Reciprocal:
    case Op::Selu: case Op::Sin: case Op::Cos: case Op::Floor: case Op::Ceil: case Op::Resize:
    case Op::DepthToSpace: case Op::SpaceToDepth: case Op::WithinChannelLRN:
      return "";  // per sample; a Reshape that keeps B samples keeps each sample's elements together
  }
  return "convgen does not know whether it mixes samples";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The attributes a batch could reach through an int64 shape input, equal but for a
// Reshape's batch dimension (B at one import, M at the other). The rest come from the
// model file itself, the same at every batch.
bool same_attributes_but_batch(const Attributes& a, const Attributes& b, int64_t B, int64_t M) {
  std::vector<int64_t> shape = b.shape;
  if (!shape.empty() && shape[0] == M) shape[0] = B;
  return a.shape == shape && a.perm == b.perm && a.axes == b.axes && a.axis == b.axis && a.indices == b.indices &&
         a.slice_first == b.slice_first && a.slice_step == b.slice_step && a.pad_amounts == b.pad_amounts;
}

}  // namespace

std::string batch_split_refusal(const Graph& whole, const Graph& per_call) {
  const int64_t B = whole.batch, M = per_call.batch;
  if (M < 1 || M >= B || B % M != 0) return fmt::format("a per-call batch of {} does not split a batch of {}", M, B);
  if (whole.inputs != per_call.inputs || whole.outputs != per_call.outputs)
    return fmt::format("the graph's inputs or outputs differ between batch {} and batch {}", B, M);
  if (whole.nodes.size() != per_call.nodes.size())
    return fmt::format("the graph has {} nodes at batch {} and {} at batch {}", whole.nodes.size(), B,
                       per_call.nodes.size(), M);
  for (size_t i = 0; i < whole.nodes.size(); ++i) {
    const Node &a = whole.nodes[i], &b = per_call.nodes[i];
    if (a.name != b.name || a.op != b.op || a.inputs != b.inputs || a.outputs != b.outputs)
      return fmt::format("node {} ({}) differs between batch {} and batch {}", a.name, op_name(a.op), B, M);
  }
  if (whole.values.size() != per_call.values.size())
    return fmt::format("the graph has {} values at batch {} and {} at batch {}", whole.values.size(), B,
                       per_call.values.size(), M);
  for (const auto& [name, v] : whole.values) {
    auto it = per_call.values.find(name);
    if (it == per_call.values.end()) return fmt::format("value '{}' exists at batch {} only", name, B);
    const Value& w = it->second;
    if (v.is_constant != w.is_constant)
      return fmt::format("value '{}' is a constant at one batch and computed at the other", name);
    if (v.is_constant) {
      // A float constant that depends on the batch (a per-sample table) would give every
      // call the first samples' values. int64 constants feed shape inputs (a Reshape's
      // shape holds the batch): lowering read them into attributes, compared below.
      if (!v.is_int64 && (v.shape != w.shape || !same_bits(v.data, w.data)))
        return fmt::format("constant '{}' differs between batch {} and batch {}", name, B, M);
      if (whole.is_output(name)) return fmt::format("output '{}' is a constant", name);
      continue;
    }
    std::vector<int64_t> expected = w.shape;
    if (!expected.empty() && expected[0] == M) expected[0] = B;
    if (v.shape.empty() || w.shape[0] != M || v.shape != expected)
      return fmt::format("value '{}' is {} at batch {} and {} at batch {} (not {} samples against {})", name,
                         dims(v.shape), B, dims(w.shape), M, B, M);
  }
  for (size_t i = 0; i < whole.nodes.size(); ++i) {
    const Node& n = whole.nodes[i];
    if (std::string r = mixing_reason(whole, n); !r.empty())
      return fmt::format("node {} ({}): {}", n.name, op_name(n.op), r);
    if (!same_attributes_but_batch(n.attributes, per_call.nodes[i].attributes, B, M))
      return fmt::format("node {} ({}): its attributes differ between batch {} and batch {} beyond the batch", n.name,
                         op_name(n.op), B, M);
  }
  return "";
}

int64_t default_per_call_batch(const Graph& whole) {
  const int64_t B = whole.batch;
  if (B < 2) return B;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t min_pixels = kNone;
  for (const Node& n : whole.nodes)
    if (n.op == Op::Conv || n.op == Op::ConvTranspose) {
      // Spatial ones: a Gemm run as a 1x1 convolution of one pixel (a classifier head) is
      // a matrix-vector product at any split, its cost its weights.
      const ConvDescriptor d = conv_layer_descriptor(whole, n);
      if (d.oh() * d.ow() > 1) min_pixels = std::min(min_pixels, d.oh() * d.ow());
    }
  // No spatial convolution (an MLP): one sample a call would turn its matrix products
  // into matrix-vector products.
  if (min_pixels == kNone) return B;
  for (int64_t m = 1; m <= B / 2; ++m)
    if (B % m == 0 && m * min_pixels >= kMinPixelsPerCall) return m;
  // Too few pixels per image at any split of at least two calls: the largest such split.
  for (int64_t m = B / 2; m >= 1; --m)
    if (B % m == 0) return m;
  return B;
}

std::vector<int64_t> whole_batch_shape(std::vector<int64_t> per_call_shape, int64_t calls) {
  if (!per_call_shape.empty()) per_call_shape[0] *= calls;
  return per_call_shape;
}

SplitModel split_batch(const ImportAt& import_at, int64_t batch, int64_t per_call_batch, std::vector<std::string>* why) {
  std::vector<std::string> whole_why, per_call_why;
  // Imported and fused for inference, each with its own fusion lines.
  auto fused_at = [&](int64_t b, std::vector<std::string>* fusions) {
    Graph g = import_at(b);
    fuse_for_inference(g, fusions);
    return g;
  };
  SplitModel whole{fused_at(batch, &whole_why), 1};
  auto finish = [&](SplitModel m, const std::vector<std::string>& fusions, const std::string& line) {
    if (why) {
      why->insert(why->end(), fusions.begin(), fusions.end());
      why->push_back(line);
    }
    return m;
  };
  const bool asked = per_call_batch != 0;
  const int64_t m = asked ? per_call_batch : default_per_call_batch(whole.graph);
  if (m < 1 || m > batch || batch % m != 0)
    throw Error(ExitCode::Usage, fmt::format("--per-call-batch {}: not a divisor of the batch {}", m, batch));
  if (m == batch)
    return finish(std::move(whole), whole_why,
                  fmt::format("batch {}: run whole (one call{})", batch,
                              asked        ? ", as asked"
                              : batch == 1 ? ": no split of a single sample"
                                           : ": no spatial convolution, its matrix products stay whole"));
  std::string refusal;
  Graph per_call;
  try {
    per_call = fused_at(m, &per_call_why);
    refusal = batch_split_refusal(whole.graph, per_call);
  } catch (const Error& e) {
    refusal = fmt::format("importing at batch {} failed: {}", m, e.what());
  }
  if (!refusal.empty()) {
    if (asked)
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: --per-call-batch {}: samples not proven independent: {}", whole.graph.source, m, refusal));
    return finish(std::move(whole), whole_why,
                  fmt::format("batch {}: run whole (one call): samples not proven independent: {}", batch, refusal));
  }
  return finish(SplitModel{std::move(per_call), batch / m}, per_call_why,
                fmt::format("batch {}: {} calls of batch {}, spread over the threads, one arena each{}", batch, batch / m, m,
                            asked ? " (as asked)"
                                  : fmt::format(" (the smallest split giving every spatial convolution {}+ pixels a call)",
                                                kMinPixelsPerCall)));
}

}  // namespace convgen::model
