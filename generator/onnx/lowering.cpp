#include "generator/onnx/lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "generator/onnx/import.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

// One ONNX node being lowered: attribute and input access with errors that name the
// file, the node, its op type and the attribute.
class NodeContext {
 public:
  NodeContext(const onnx::NodeProto& n, int index, Graph& g)
      : n_(n), g_(g), name_(n.name().empty() ? fmt::format("{}_{}", n.op_type(), index) : n.name()) {}

  const std::string& name() const { return name_; }
  const std::string& op() const { return n_.op_type(); }
  const onnx::NodeProto& proto() const { return n_; }
  std::string where() const { return fmt::format("{}: node '{}' ({})", g_.source, name_, n_.op_type()); }

  [[noreturn]] void unsupported(const std::string& what) const {
    throw Error(ExitCode::Unsupported, fmt::format("{}: not supported: {}", where(), what));
  }
  [[noreturn]] void bad(const std::string& what) const {
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: {}", where(), what));
  }

  const onnx::AttributeProto* attr(const std::string& key) const {
    for (const auto& a : n_.attribute())
      if (a.name() == key) return &a;
    return nullptr;
  }
  int64_t attr_int(const std::string& key, int64_t fallback) const {
    const auto* a = attr(key);
    return a ? a->i() : fallback;
  }
  float attr_float(const std::string& key, float fallback) const {
    const auto* a = attr(key);
    return a ? a->f() : fallback;
  }
  std::string attr_string(const std::string& key, const std::string& fallback) const {
    const auto* a = attr(key);
    return a ? a->s() : fallback;
  }
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> fallback) const {
    const auto* a = attr(key);
    return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : fallback;
  }
  [[noreturn]] void bad_attr(const std::string& key, const std::string& value, const std::string& why) const {
    throw Error(ExitCode::Unsupported, fmt::format("{}: not supported: attribute '{}' = {}: {}", where(), key, value, why));
  }

  int inputs() const { return n_.input_size(); }
  bool has_input(int i) const { return i < n_.input_size() && !n_.input(i).empty(); }
  const Value& input(int i) const {
    if (!has_input(i)) bad(fmt::format("input {} missing", i));
    auto it = g_.values.find(n_.input(i));
    if (it == g_.values.end()) bad(fmt::format("shape of input '{}' unknown after shape inference", n_.input(i)));
    return it->second;
  }
  const Value& constant_input(int i, const char* what) const {
    const Value& v = input(i);
    if (!v.is_constant)
      throw ConstantInputNeeded(
          fmt::format("{}: not supported: {} (input '{}') is not a constant", where(), what, n_.input(i)), n_.input(i));
    return v;
  }
  const Value& output_value(int i) const {
    auto it = g_.values.find(n_.output(i));
    if (it == g_.values.end()) bad(fmt::format("shape of output '{}' unknown after shape inference", n_.output(i)));
    return it->second;
  }

 private:
  const onnx::NodeProto& n_;
  Graph& g_;
  std::string name_;
};

std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t normalise_axis(const NodeContext& c, int64_t axis, int64_t rank, const char* key) {
  if (axis < -rank || axis >= rank)
    c.bad_attr(key, std::to_string(axis), fmt::format("out of range for rank {}", rank));
  return axis < 0 ? axis + rank : axis;
}

// ---- constant folding -------------------------------------------------------------

Value scalar_or_vector_int(const std::string& name, std::vector<int64_t> data, std::vector<int64_t> shape) {
  Value v;
  v.name = name;
  v.is_constant = true;
  v.is_int64 = true;
  v.int64_data = std::move(data);
  v.shape = std::move(shape);
  return v;
}

std::vector<int64_t> as_int64(const Value& v) {
  if (v.is_int64) return v.int64_data;
  std::vector<int64_t> out;
  for (float f : v.data) out.push_back(static_cast<int64_t>(f));
  return out;
}

// Evaluates a node whose inputs are all constants (the shape arithmetic PyTorch exports
// around Reshape). Returns false when the node is not one this folds.
bool fold_constant_node(const NodeContext& c, Graph& g) {
  const std::string& op = c.op();
  const std::string out_name = c.proto().output(0);
  auto inferred_shape = [&](std::vector<int64_t> fallback) {
    auto it = g.values.find(out_name);
    return it != g.values.end() ? it->second.shape : fallback;
  };
  const Value& a = c.input(0);
  Value out;
  if (op == "Identity" || op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    out = a;
    out.name = out_name;
    std::vector<int64_t> shape = a.shape;
    if (op == "Reshape") {
      shape = as_int64(c.constant_input(1, "the shape"));
      for (size_t i = 0; i < shape.size(); ++i)
        if (shape[i] == 0 && i < a.shape.size()) shape[i] = a.shape[i];
      int64_t known = 1, unknown = -1;
      for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == -1) unknown = static_cast<int64_t>(i);
        else known *= shape[i];
      }
      if (unknown >= 0 && known > 0) shape[unknown] = a.elements() / known;
    } else if (op == "Unsqueeze") {
      // Opset 13 made the axes an input; before, an attribute.
      std::vector<int64_t> axes = c.has_input(1) ? as_int64(c.constant_input(1, "the axes")) : c.attr_ints("axes", {});
      const int64_t rank = static_cast<int64_t>(a.shape.size() + axes.size());
      for (int64_t& x : axes) x = normalise_axis(c, x, rank, "axes");
      std::sort(axes.begin(), axes.end());
      for (int64_t x : axes) shape.insert(shape.begin() + x, 1);
    } else if (op == "Squeeze") {
      std::vector<int64_t> kept;
      for (int64_t e : a.shape)
        if (e != 1) kept.push_back(e);
      shape = c.has_input(1) ? inferred_shape(kept) : kept;
    }
    out.shape = inferred_shape(shape);
  } else if (op == "Cast") {
    const int64_t to = c.attr_int("to", 0);
    out.name = out_name;
    out.is_constant = true;
    out.shape = a.shape;
    if (to == onnx::TensorProto_DataType_INT64) {
      out.is_int64 = true;
      out.int64_data = as_int64(a);
    } else if (to == onnx::TensorProto_DataType_FLOAT) {
      out.data = a.is_int64 ? std::vector<float>(a.int64_data.begin(), a.int64_data.end()) : a.data;
    } else {
      return false;
    }
  } else if (op == "Gather") {
    if (a.shape.size() != 1 || !a.is_int64) return false;
    const Value& idx = c.constant_input(1, "the indices");
    std::vector<int64_t> data;
    for (int64_t i : as_int64(idx)) {
      const int64_t n = static_cast<int64_t>(a.int64_data.size());
      if (i < -n || i >= n) c.bad(fmt::format("index {} out of range for {} elements", i, n));
      data.push_back(a.int64_data[i < 0 ? i + n : i]);
    }
    out = scalar_or_vector_int(out_name, data, idx.shape);
  } else if (op == "Concat") {
    std::vector<int64_t> data;
    for (int i = 0; i < c.inputs(); ++i) {
      const Value& v = c.input(i);
      if (!v.is_int64 || v.shape.size() != 1) return false;
      data.insert(data.end(), v.int64_data.begin(), v.int64_data.end());
    }
    out = scalar_or_vector_int(out_name, data, {static_cast<int64_t>(data.size())});
  } else if (op == "Slice") {
    if (a.shape.size() != 1 || !a.is_int64) return false;
    const int64_t n = static_cast<int64_t>(a.int64_data.size());
    int64_t start = as_int64(c.constant_input(1, "starts")).at(0), end = as_int64(c.constant_input(2, "ends")).at(0);
    const int64_t step = c.has_input(4) ? as_int64(c.constant_input(4, "steps")).at(0) : 1;
    if (step != 1) return false;
    if (start < 0) start += n;
    if (end < 0) end += n;
    start = std::clamp<int64_t>(start, 0, n);
    end = std::clamp<int64_t>(end, 0, n);
    std::vector<int64_t> data(a.int64_data.begin() + start, a.int64_data.begin() + std::max(start, end));
    out = scalar_or_vector_int(out_name, data, {static_cast<int64_t>(data.size())});
  } else {  // Add Sub Mul Div on int64 scalars/vectors with numpy broadcasting of one scalar
    const Value& b = c.input(1);
    if (!a.is_int64 || !b.is_int64) return false;
    const auto& x = a.int64_data;
    const auto& y = b.int64_data;
    if (x.size() != y.size() && x.size() != 1 && y.size() != 1) return false;
    const size_t n = std::max(x.size(), y.size());
    std::vector<int64_t> data(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t p = x[x.size() == 1 ? 0 : i], q = y[y.size() == 1 ? 0 : i];
      if (op == "Div" && q == 0) c.bad("integer division by zero in a shape computation");
      data[i] = op == "Add" ? p + q : op == "Sub" ? p - q : op == "Mul" ? p * q : p / q;
    }
    out = scalar_or_vector_int(out_name, data, x.size() >= y.size() ? a.shape : b.shape);
  }
  g.values[out_name] = out;
  return true;
}

void fold_constant(const NodeContext& c, Graph& g) {
  const auto* value = c.attr("value");
  Value v;
  if (value && value->has_t()) {
    v = tensor_value(value->t(), c.where());
  } else if (const auto* f = c.attr("value_float")) {
    v.is_constant = true;
    v.data = {f->f()};
  } else if (const auto* fs = c.attr("value_floats")) {
    v.is_constant = true;
    v.data.assign(fs->floats().begin(), fs->floats().end());
    v.shape = {static_cast<int64_t>(v.data.size())};
  } else if (const auto* i = c.attr("value_int")) {
    v = scalar_or_vector_int("", {i->i()}, {});
  } else if (const auto* is = c.attr("value_ints")) {
    v = scalar_or_vector_int("", std::vector<int64_t>(is->ints().begin(), is->ints().end()),
                             {static_cast<int64_t>(is->ints_size())});
  } else {
    c.unsupported("Constant without a tensor, float(s) or int(s) value");
  }
  v.name = c.proto().output(0);
  g.values[v.name] = v;
}

void fold_shape(const NodeContext& c, Graph& g) {
  const Value& x = c.input(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(x.shape.begin() + start, x.shape.begin() + end);
  g.values[c.proto().output(0)] = scalar_or_vector_int(c.proto().output(0), dims, {end - start});
}

// ---- lowering -------------------------------------------------------------------------

// Kernel, strides, dilations and explicit pads of Conv/MaxPool/AveragePool, with
// auto_pad resolved against the input's spatial extents.
void lower_window(const NodeContext& c, const std::vector<int64_t>& spatial, std::vector<int64_t> kernel,
                  Attributes& a) {
  const size_t n = spatial.size();
  a.kernel = c.attr_ints("kernel_shape", kernel);
  if (a.kernel.size() != n) c.bad_attr("kernel_shape", list(a.kernel), fmt::format("needs {} values", n));
  a.strides = c.attr_ints("strides", std::vector<int64_t>(n, 1));
  a.dilations = c.attr_ints("dilations", std::vector<int64_t>(n, 1));
  if (a.strides.size() != n) c.bad_attr("strides", list(a.strides), fmt::format("needs {} values", n));
  if (a.dilations.size() != n) c.bad_attr("dilations", list(a.dilations), fmt::format("needs {} values", n));
  for (size_t i = 0; i < n; ++i) {
    if (a.kernel[i] < 1) c.bad_attr("kernel_shape", list(a.kernel), "must be positive");
    if (a.strides[i] < 1) c.bad_attr("strides", list(a.strides), "must be positive");
    if (a.dilations[i] < 1) c.bad_attr("dilations", list(a.dilations), "must be positive");
  }
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  a.pads_begin.assign(n, 0);
  a.pads_end.assign(n, 0);
  if (auto_pad == "NOTSET") {
    const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
    if (pads.size() != 2 * n) c.bad_attr("pads", list(pads), fmt::format("needs {} values", 2 * n));
    for (size_t i = 0; i < n; ++i) {
      if (pads[i] < 0 || pads[n + i] < 0) c.bad_attr("pads", list(pads), "negative padding");
      a.pads_begin[i] = pads[i];
      a.pads_end[i] = pads[n + i];
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t out = (spatial[i] + a.strides[i] - 1) / a.strides[i];
      const int64_t span = (a.kernel[i] - 1) * a.dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * a.strides[i] + span - spatial[i]);
      const int64_t small = total / 2;
      a.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      a.pads_end[i] = total - a.pads_begin[i];
    }
  } else if (auto_pad != "VALID") {
    c.bad_attr("auto_pad", "'" + auto_pad + "'", "expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  }
}

std::vector<int64_t> spatial_dims(const NodeContext& c, const Value& x) {
  const size_t rank = x.shape.size();
  if (rank == 5) c.unsupported("3-D convolution and pooling (rank-5 input)");
  if (rank != 3 && rank != 4) c.unsupported(fmt::format("input of rank {} (1-D and 2-D only: rank 3 or 4)", rank));
  return std::vector<int64_t>(x.shape.begin() + 2, x.shape.end());
}

void only_first_output(const NodeContext& c, const char* what) {
  for (int i = 1; i < c.proto().output_size(); ++i)
    if (!c.proto().output(i).empty()) c.unsupported(fmt::format("optional output {} ({})", i, what));
}

Node lower_node(const NodeContext& c, int opset) {
  Node node;
  node.name = c.name();
  node.inputs.assign(c.proto().input().begin(), c.proto().input().end());
  node.outputs.assign(c.proto().output().begin(), c.proto().output().end());
  Attributes& a = node.attributes;
  const std::string& op = c.op();
  static const std::map<std::string, Op> simple = {
      {"Relu", Op::Relu}, {"Sigmoid", Op::Sigmoid}, {"GlobalAveragePool", Op::GlobalAveragePool},
      {"GlobalMaxPool", Op::GlobalMaxPool}, {"MatMul", Op::MatMul}, {"Add", Op::Add}, {"Sub", Op::Sub},
      {"Mul", Op::Mul}, {"Div", Op::Div}, {"Pow", Op::Pow}, {"Sum", Op::Sum}, {"Identity", Op::Identity}};
  if (auto it = simple.find(op); it != simple.end()) {
    node.op = it->second;
    if (node.op == Op::GlobalAveragePool || node.op == Op::GlobalMaxPool) spatial_dims(c, c.input(0));
    return node;
  }
  if (op == "Conv") {
    node.op = Op::Conv;
    const Value& x = c.input(0);
    const Value& w = c.input(1);
    const auto spatial = spatial_dims(c, x);
    if (w.shape.size() != x.shape.size())
      c.bad(fmt::format("weights of rank {} for an input of rank {}", w.shape.size(), x.shape.size()));
    lower_window(c, spatial, std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()), a);
    a.group = c.attr_int("group", 1);
    if (a.group < 1 || x.shape[1] % a.group != 0 || w.shape[0] % a.group != 0 || w.shape[1] * a.group != x.shape[1])
      c.bad_attr("group", std::to_string(a.group),
                 fmt::format("inconsistent with {} input channels and weights {}", x.shape[1], list(w.shape)));
    for (size_t i = 0; i < spatial.size(); ++i)
      if (a.kernel[i] != w.shape[2 + i])
        c.bad_attr("kernel_shape", list(a.kernel), fmt::format("differs from the weights {}", list(w.shape)));
    if (c.has_input(2) && c.input(2).elements() != w.shape[0])
      c.bad(fmt::format("bias of {} values for {} output channels", c.input(2).elements(), w.shape[0]));
    return node;
  }
  if (op == "MaxPool" || op == "AveragePool") {
    node.op = op == "MaxPool" ? Op::MaxPool : Op::AveragePool;
    const auto spatial = spatial_dims(c, c.input(0));
    if (!c.attr("kernel_shape")) c.bad("attribute 'kernel_shape' missing");
    lower_window(c, spatial, {}, a);
    a.ceil_mode = c.attr_int("ceil_mode", 0) != 0;
    a.count_include_pad = c.attr_int("count_include_pad", 0) != 0;
    if (node.op == Op::MaxPool) {
      if (c.attr_int("storage_order", 0) != 0) c.bad_attr("storage_order", "1", "column-major indices");
      only_first_output(c, "MaxPool indices");
    }
    return node;
  }
  if (op == "LeakyRelu") {
    node.op = Op::LeakyRelu;
    a.alpha = c.attr_float("alpha", 0.01f);
    return node;
  }
  if (op == "Clip") {
    node.op = Op::Clip;
    if (c.has_input(1)) a.clip_min = c.constant_input(1, "Clip's min").data.at(0);
    if (c.has_input(2)) a.clip_max = c.constant_input(2, "Clip's max").data.at(0);
    node.inputs.resize(1);
    return node;
  }
  if (op == "Gemm") {
    node.op = Op::Gemm;
    a.alpha = c.attr_float("alpha", 1.0f);
    a.beta = c.attr_float("beta", 1.0f);
    a.trans_a = c.attr_int("transA", 0) != 0;
    a.trans_b = c.attr_int("transB", 0) != 0;
    return node;
  }
  if (op == "Concat" || op == "Flatten" || op == "Softmax" || op == "LogSoftmax") {
    node.op = op == "Concat" ? Op::Concat : op == "Flatten" ? Op::Flatten : op == "Softmax" ? Op::Softmax : Op::LogSoftmax;
    const int64_t rank = static_cast<int64_t>(c.input(0).shape.size());
    const bool softmax = node.op == Op::Softmax || node.op == Op::LogSoftmax;
    // Softmax before opset 13 normalises the 2-D coercion at axis (default 1); from
    // 13 on, one axis (default -1). Flatten's axis may equal the rank.
    const int64_t fallback = softmax ? (opset < 13 ? 1 : -1) : 1;
    if (node.op == Op::Concat && !c.attr("axis")) c.bad("attribute 'axis' missing");
    const int64_t axis = c.attr_int("axis", fallback);
    a.axis = node.op == Op::Flatten ? normalise_axis(c, axis, rank + 1, "axis") : normalise_axis(c, axis, rank, "axis");
    a.softmax_coerce_2d = softmax && opset < 13;
    return node;
  }
  if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    // All three only relabel the dimensions of the same data: one Reshape to the
    // inferred output shape (PyTorch exports AvgPool1d as Unsqueeze, 2-D pool, Squeeze).
    node.op = Op::Reshape;
    if (op == "Reshape") c.constant_input(1, "the target shape");
    if (op != "Reshape" && c.has_input(1)) c.constant_input(1, "the axes");
    a.shape = c.output_value(0).shape;
    node.inputs.resize(1);
    return node;
  }
  if (op == "Transpose") {
    node.op = Op::Transpose;
    const int64_t rank = static_cast<int64_t>(c.input(0).shape.size());
    std::vector<int64_t> reversed;
    for (int64_t i = rank - 1; i >= 0; --i) reversed.push_back(i);
    a.perm = c.attr_ints("perm", reversed);
    std::vector<int64_t> sorted = a.perm;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < rank; ++i)
      if (static_cast<int64_t>(sorted.size()) != rank || sorted[i] != i)
        c.bad_attr("perm", list(a.perm), fmt::format("not a permutation of {} axes", rank));
    return node;
  }
  if (op == "BatchNormalization") {
    node.op = Op::BatchNormalization;
    a.epsilon = c.attr_float("epsilon", 1e-5f);
    a.momentum = c.attr_float("momentum", 0.9f);
    if (c.attr_int("training_mode", 0) != 0) c.bad_attr("training_mode", "1", "inference import (see convgen train)");
    only_first_output(c, "BatchNormalization running statistics");
    return node;
  }
  if (op == "LRN") {
    node.op = Op::LRN;
    if (!c.attr("size")) c.bad("attribute 'size' missing");
    a.size = c.attr_int("size", 1);
    a.alpha = c.attr_float("alpha", 1e-4f);
    a.beta = c.attr_float("beta", 0.75f);
    a.lrn_bias = c.attr_float("bias", 1.0f);
    if (a.size < 1) c.bad_attr("size", std::to_string(a.size), "must be positive");
    return node;
  }
  if (op == "Pad") {
    node.op = Op::Pad;
    const std::string mode = c.attr_string("mode", "constant");
    if (mode != "constant") c.bad_attr("mode", "'" + mode + "'", "constant padding only");
    a.pad_amounts = as_int64(c.constant_input(1, "Pad's pads"));
    const size_t rank = c.input(0).shape.size();
    if (a.pad_amounts.size() != 2 * rank) c.bad_attr("pads", list(a.pad_amounts), fmt::format("needs {} values", 2 * rank));
    for (int64_t p : a.pad_amounts)
      if (p < 0) c.bad_attr("pads", list(a.pad_amounts), "negative pads (cropping)");
    a.pad_value = c.has_input(2) ? c.constant_input(2, "Pad's constant_value").data.at(0) : 0.0f;
    node.inputs.resize(1);
    return node;
  }
  if (op == "Dropout") {
    node.op = Op::Dropout;
    a.ratio = c.attr_float("ratio", 0.5f);
    if (c.has_input(1)) a.ratio = c.constant_input(1, "Dropout's ratio").data.at(0);
    only_first_output(c, "Dropout mask");
    node.inputs.resize(1);
    return node;
  }
  c.unsupported(fmt::format("op {}{}", op, c.proto().domain().empty() ? "" : " of domain " + c.proto().domain()));
}

}  // namespace

namespace {

// Folds node n when it can be; true if it did.
bool try_fold(const NodeContext& c, Graph& g) {
  const onnx::NodeProto& n = c.proto();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    c.unsupported(fmt::format("op {} of domain {}", n.op_type(), n.domain()));
  if (n.op_type() == "Constant") {
    fold_constant(c, g);
    return true;
  }
  if (n.op_type() == "Shape") {
    auto it = g.values.find(n.input(0));
    if (it == g.values.end()) return false;  // not known yet
    fold_shape(c, g);
    return true;
  }
  if (!is_foldable_op(n.op_type()) || n.input_size() == 0) return false;
  for (int i = 0; i < n.input_size(); ++i) {
    if (!c.has_input(i)) continue;
    auto it = g.values.find(n.input(i));
    if (it == g.values.end() || !it->second.is_constant) return false;
  }
  return fold_constant_node(c, g);
}

}  // namespace

bool is_foldable_op(const std::string& op) {
  static const std::set<std::string> ops = {"Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Add", "Sub",
                                            "Mul", "Div", "Slice", "Identity", "Reshape"};
  return ops.count(op) > 0;
}

bool is_lowered_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Conv", "Relu", "LeakyRelu", "Clip", "Sigmoid", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
      "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sum", "Concat", "Flatten", "Reshape", "Unsqueeze",
      "Squeeze", "Transpose", "BatchNormalization", "LRN", "Pad", "Dropout", "Identity", "Softmax", "LogSoftmax",
      "Constant"};
  return ops.count(op) > 0;
}

int fold_constants(const onnx::GraphProto& graph, Graph& g) {
  int index = 0, folded = 0;
  for (const auto& n : graph.node()) {
    NodeContext c(n, index++, g);
    if (try_fold(c, g)) ++folded;
  }
  return folded;
}

void lower_nodes(const onnx::GraphProto& graph, int64_t opset, Graph& g) {
  int index = 0;
  for (const auto& n : graph.node()) {
    NodeContext c(n, index++, g);
    if (try_fold(c, g)) continue;
    Node node = lower_node(c, static_cast<int>(opset));
    for (const std::string& out : node.outputs) {
      if (out.empty()) continue;
      const Value& v = c.output_value(static_cast<int>(&out - node.outputs.data()));
      if (v.is_int64) c.unsupported(fmt::format("int64 output '{}' (float32 only)", out));
    }
    g.nodes.push_back(std::move(node));
  }
  for (const std::string& out : g.outputs) {
    auto it = g.values.find(out);
    if (it == g.values.end()) throw Error(ExitCode::BadModel, fmt::format("{}: bad model: output '{}' has no known shape", g.source, out));
  }
}

}  // namespace convgen::model
