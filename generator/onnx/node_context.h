// One ONNX node seen by the importer's steps (constant folding, lowering): attribute and
// input access with errors that name the file, the node, its op type and the attribute.
// Internal to generator/onnx.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include "generator/onnx/import.h"
#include "runtime/graph/model_graph.h"
#include "schedules/errors.h"

namespace convgen::model {

// One ONNX node being lowered: attribute and input access with errors that name the
// file, the node, its op type and the attribute.
class NodeContext {
 public:
  NodeContext(const onnx::NodeProto& n, int index, Graph& g)
      : n_(n), g_(g), name_(n.name().empty() ? fmt::format("{}_{}", n.op_type(), index) : n.name()) {}

  const std::string& name() const { return name_; }
  const std::string& op() const { return n_.op_type(); }
  const onnx::NodeProto& proto() const { return n_; }
  Graph& graph() const { return g_; }
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
  std::vector<float> attr_floats(const std::string& key, std::vector<float> fallback) const {
    const auto* a = attr(key);
    return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : fallback;
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

inline std::string list(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

inline int64_t normalise_axis(const NodeContext& c, int64_t axis, int64_t rank, const char* key) {
  if (axis < -rank || axis >= rank)
    c.bad_attr(key, std::to_string(axis), fmt::format("out of range for rank {}", rank));
  return axis < 0 ? axis + rank : axis;
}

// A list of axes made non-negative and sorted; a repeated axis is an error naming `key`.
inline std::vector<int64_t> normalised_axes(const NodeContext& c, std::vector<int64_t> axes, int64_t rank,
                                            const char* key) {
  for (int64_t& a : axes) a = normalise_axis(c, a, rank, key);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.bad_attr(key, list(axes), "repeated axis");
  return axes;
}

}  // namespace convgen::model
