// Steps 1-4 of import_onnx (generator/onnx/import.h): parse, check, upgrade, bind the batch, infer
// shapes, and collect every value's shape and constant data. Lowering the nodes is
// generator/onnx/lowering.cpp.
#include "generator/onnx/import.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>
#include <onnx/version_converter/convert.h>

#include "generator/onnx/channel_shuffle.h"
#include "generator/onnx/constant_folding.h"
#include "generator/onnx/lowering.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.size() > 300 ? line.substr(0, 300) + "..." : line;
}

onnx::ModelProto parse_model(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(ExitCode::Io, fmt::format("{}: cannot read", path));
  if (in.tellg() <= 0) throw Error(ExitCode::BadModel, fmt::format("{}: bad model: the file is empty", path));
  in.seekg(0);
  // Parsed from the stream: no second in-memory copy of a model's weights.
  onnx::ModelProto model;
  if (!model.ParseFromIstream(&in))
    throw Error(ExitCode::BadModel,
                fmt::format("{}: bad model: not a valid ONNX protobuf (truncated or corrupted?)", path));
  if (!model.has_graph() || model.graph().node_size() == 0)
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: no graph or no nodes", path));
  return model;
}

int64_t default_opset(const onnx::ModelProto& m, const std::string& path) {
  std::string others;
  for (const auto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") return o.version();
    others += (others.empty() ? "" : ", ") + o.domain();
  }
  if (!others.empty())
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: not supported: no opset of the default ONNX domain (the model imports {})", path, others));
  throw Error(ExitCode::BadModel, fmt::format("{}: bad model: no opset_import", path));
}

// Before checking and shape inference: every node's op must be one convgen lowers, or
// one it folds away when its inputs are constants, so that a model with an unsupported
// op is refused for that op, not for whatever fails first on the way.
void check_ops(const onnx::ModelProto& m, const std::string& path) {
  for (int i = 0; i < m.graph().node_size(); ++i) {
    const auto& n = m.graph().node(i);
    const std::string name = n.name().empty() ? fmt::format("{}_{}", n.op_type(), i) : n.name();
    if (!n.domain().empty() && n.domain() != "ai.onnx")
      throw Error(ExitCode::Unsupported, fmt::format("{}: node '{}' ({}): not supported: op {} of domain {}", path, name,
                                                     n.op_type(), n.op_type(), n.domain()));
    if (!is_lowered_op(n.op_type()) && !is_foldable_op(n.op_type()))
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: node '{}' ({}): not supported: op {}", path, name, n.op_type(), n.op_type()));
  }
}

const char* dtype_name(int t) {
  switch (t) {
    case onnx::TensorProto_DataType_FLOAT: return "float32";
    case onnx::TensorProto_DataType_DOUBLE: return "float64";
    case onnx::TensorProto_DataType_FLOAT16: return "float16";
    case onnx::TensorProto_DataType_BFLOAT16: return "bfloat16";
    case onnx::TensorProto_DataType_INT8: return "int8";
    case onnx::TensorProto_DataType_UINT8: return "uint8";
    case onnx::TensorProto_DataType_INT32: return "int32";
    case onnx::TensorProto_DataType_INT64: return "int64";
    case onnx::TensorProto_DataType_BOOL: return "bool";
    case onnx::TensorProto_DataType_STRING: return "string";
    default: return "another dtype";
  }
}

// The graph inputs that are not initializers, in order, each checked to be a tensor of
// float32 (or int64 when allow_int64: a caller may bind it to a constant). Runs before
// shape inference, whose own message would not say "dtype".
std::vector<std::string> checked_input_names(const onnx::ModelProto& m, const std::string& path, bool allow_int64) {
  std::set<std::string> initializers;
  for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
  std::vector<std::string> names;
  for (const auto& v : m.graph().input()) {
    if (initializers.count(v.name())) continue;
    if (!v.type().has_tensor_type())
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: input '{}': not a tensor (dtype: tensors of float32 only)", path, v.name()));
    const int elem = v.type().tensor_type().elem_type();
    if (elem != onnx::TensorProto_DataType_FLOAT && !(allow_int64 && elem == onnx::TensorProto_DataType_INT64))
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: input '{}': dtype {} not supported (float32 only)", path, v.name(), dtype_name(elem)));
    names.push_back(v.name());
  }
  return names;
}

// Dimension 0 of each real input (not an initializer) may be dynamic: it takes the
// batch size. Any other dynamic dimension cannot be bound.
void bind_batch(onnx::ModelProto& m, int64_t batch, const std::string& path) {
  std::set<std::string> initializers;
  for (const auto& t : m.graph().initializer()) initializers.insert(t.name());
  for (auto& input : *m.mutable_graph()->mutable_input()) {
    if (initializers.count(input.name())) continue;
    auto* tensor = input.mutable_type()->mutable_tensor_type();  // a tensor: checked_input_names
    if (!tensor->has_shape())
      throw Error(ExitCode::Unsupported, fmt::format("{}: input '{}': no shape (rank unknown)", path, input.name()));
    auto* shape = tensor->mutable_shape();
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto* dim = shape->mutable_dim(i);
      if (dim->has_dim_value()) continue;  // fixed, even when 0 (an empty tensor)
      if (i == 0) {
        dim->set_dim_value(batch);
        continue;
      }
      throw Error(ExitCode::Unsupported,
                  fmt::format("{}: input '{}': dimension {} is dynamic{}; only the batch dimension (0) may be", path,
                              input.name(), i, dim->has_dim_param() ? " ('" + dim->dim_param() + "')" : ""));
    }
  }
}

// A constant Value as an initializer of ONNX element type `dtype` (0: float32 or int64,
// as the Value holds it). Integer types other than int64, and bool, are held as int64.
void set_tensor(onnx::TensorProto* t, const std::string& name, const Value& v, int dtype = 0) {
  t->set_name(name);
  for (int64_t d : v.shape) t->add_dims(d);
  if (dtype == 0 || (dtype == onnx::TensorProto_DataType_FLOAT) == v.is_int64) dtype = v.is_int64 ? onnx::TensorProto_DataType_INT64 : onnx::TensorProto_DataType_FLOAT;
  t->set_data_type(dtype);
  if (dtype == onnx::TensorProto_DataType_FLOAT) {
    for (float x : v.data) t->add_float_data(x);
  } else if (dtype == onnx::TensorProto_DataType_INT64) {
    for (int64_t x : v.int64_data) t->add_int64_data(x);
  } else if (dtype == onnx::TensorProto_DataType_UINT32) {
    for (int64_t x : v.int64_data) t->add_uint64_data(static_cast<uint64_t>(x));
  } else {  // int32, int16, int8, uint16, uint8, bool: int32_data
    for (int64_t x : v.int64_data) t->add_int32_data(static_cast<int32_t>(x));
  }
}

void bind_constant_inputs(onnx::ModelProto& m, const std::map<std::string, Value>& values, const std::string& path) {
  for (const auto& [name, v] : values) {
    bool found = false;
    for (const auto& input : m.graph().input()) found = found || input.name() == name;
    if (!found) throw Error(ExitCode::Usage, fmt::format("{}: no graph input named '{}' to bind", path, name));
    set_tensor(m.mutable_graph()->add_initializer(), name, v);
  }
}


std::vector<int64_t> shape_of(const onnx::ValueInfoProto& v, bool* known) {
  std::vector<int64_t> shape;
  *known = v.type().has_tensor_type() && v.type().tensor_type().has_shape();
  if (!*known) return shape;
  for (const auto& dim : v.type().tensor_type().shape().dim()) {
    if (!dim.has_dim_value() || dim.dim_value() < 0) {
      *known = false;
      return {};
    }
    shape.push_back(dim.dim_value());
  }
  return shape;
}

void infer_shapes(onnx::ModelProto& model, const std::string& path) {
  try {
    onnx::ShapeInferenceOptions strict(/*check_type=*/true, /*error_mode=*/1, /*data_prop=*/true);
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), strict);
  } catch (const std::exception& e) {
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: shape inference failed: {}", path, first_line(e.what())));
  }
}

void collect_values(const onnx::ModelProto& model, Graph& g);

// Folded values become initializers and their nodes leave the graph.
void write_back_constants(onnx::ModelProto& model, const Graph& g) {
  auto* graph = model.mutable_graph();
  // Each folded value keeps the element type inference gave it (bool masks, int32 shapes).
  std::map<std::string, int> dtype;
  for (const auto* infos : {&graph->value_info(), &graph->output()})
    for (const auto& v : *infos)
      if (v.type().has_tensor_type()) dtype[v.name()] = v.type().tensor_type().elem_type();
  std::set<std::string> existing;
  for (const auto& t : graph->initializer()) existing.insert(t.name());
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (const auto& n : graph->node()) {
    bool folded = n.output_size() > 0;
    for (const auto& out : n.output()) {
      auto it = g.values.find(out);
      folded = folded && it != g.values.end() && it->second.is_constant;
    }
    if (!folded) {
      *kept.Add() = n;
      continue;
    }
    for (const auto& out : n.output()) {
      if (existing.count(out)) continue;
      const Value& v = g.values.at(out);
      if (model.ir_version() < 4) {
        // Before IR 4 every initializer must also be a graph input.
        auto* input = graph->add_input();
        input->set_name(out);
        auto* type = input->mutable_type()->mutable_tensor_type();
        type->set_elem_type(dtype.count(out) ? dtype[out]
                                             : v.is_int64 ? onnx::TensorProto_DataType_INT64 : onnx::TensorProto_DataType_FLOAT);
        auto* shape = type->mutable_shape();
        for (int64_t d : v.shape) shape->add_dim()->set_dim_value(d);
      }
      set_tensor(graph->add_initializer(), out, v, dtype.count(out) ? dtype[out] : 0);
    }
  }
  graph->mutable_node()->Swap(&kept);
  graph->clear_value_info();  // inferred afresh
}

}  // namespace

namespace {

// A tensor's n elements, from raw_data or the typed repeated field, checked against n.
template <typename T, typename Field>
void read_elements(const onnx::TensorProto& t, int64_t n, const char* type, const Field& typed,
                   const std::string& where, std::vector<T>* out) {
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != n * static_cast<int64_t>(sizeof(T)))
      throw Error(ExitCode::BadModel,
                  fmt::format("{}: {} bytes of data for {} {} elements", where, t.raw_data().size(), n, type));
    out->resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(out->data(), t.raw_data().data(), static_cast<size_t>(n) * sizeof(T));
    return;
  }
  if (typed.size() != n)
    throw Error(ExitCode::BadModel, fmt::format("{}: {} values for {} {} elements", where, typed.size(), n, type));
  out->assign(typed.begin(), typed.end());
}

}  // namespace

Value tensor_value(const onnx::TensorProto& t, const std::string& where) {
  Value v;
  v.name = t.name();
  v.is_constant = true;
  for (int64_t d : t.dims()) {
    if (d < 0) throw Error(ExitCode::BadModel, fmt::format("{}: negative dimension", where));
    v.shape.push_back(d);
  }
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    throw Error(ExitCode::Unsupported, fmt::format("{}: tensor data stored in an external file", where));
  const int64_t n = v.elements();
  if (t.data_type() == onnx::TensorProto_DataType_FLOAT) {
    read_elements(t, n, "float32", t.float_data(), where, &v.data);
    return v;
  }
  if (t.data_type() == onnx::TensorProto_DataType_INT64) {
    v.is_int64 = true;
    read_elements(t, n, "int64", t.int64_data(), where, &v.int64_data);
    return v;
  }
  // Other integer types and bool, for shapes and masks: held as int64.
  const auto width = [&]() -> int {
    switch (t.data_type()) {
      case onnx::TensorProto_DataType_INT32: return 4;
      case onnx::TensorProto_DataType_INT16: case onnx::TensorProto_DataType_UINT16: return 2;
      case onnx::TensorProto_DataType_INT8: case onnx::TensorProto_DataType_UINT8: case onnx::TensorProto_DataType_BOOL:
        return 1;
      default: return 0;
    }
  }();
  if (width == 0)
    throw Error(ExitCode::Unsupported, fmt::format("{}: dtype {} not supported (float32, and integers or bool for "
                                                   "shapes and masks)", where, dtype_name(t.data_type())));
  v.is_int64 = true;
  v.int64_data.resize(static_cast<size_t>(n));
  if (t.has_raw_data()) {
    if (static_cast<int64_t>(t.raw_data().size()) != n * width)
      throw Error(ExitCode::BadModel, fmt::format("{}: {} bytes of data for {} {} elements", where, t.raw_data().size(),
                                                  n, dtype_name(t.data_type())));
    const char* raw = t.raw_data().data();
    for (int64_t i = 0; i < n; ++i) {
      const char* at = raw + i * width;
      int64_t x = 0;
      switch (t.data_type()) {
        case onnx::TensorProto_DataType_INT32: { int32_t y; std::memcpy(&y, at, 4); x = y; break; }
        case onnx::TensorProto_DataType_INT16: { int16_t y; std::memcpy(&y, at, 2); x = y; break; }
        case onnx::TensorProto_DataType_UINT16: { uint16_t y; std::memcpy(&y, at, 2); x = y; break; }
        case onnx::TensorProto_DataType_INT8: x = static_cast<int8_t>(*at); break;
        case onnx::TensorProto_DataType_UINT8: x = static_cast<uint8_t>(*at); break;
        default: x = *at != 0; break;  // bool
      }
      v.int64_data[static_cast<size_t>(i)] = x;
    }
    return v;
  }
  if (t.int32_data_size() != n)
    throw Error(ExitCode::BadModel, fmt::format("{}: {} values for {} {} elements", where, t.int32_data_size(), n,
                                                dtype_name(t.data_type())));
  for (int64_t i = 0; i < n; ++i) v.int64_data[static_cast<size_t>(i)] = t.int32_data(static_cast<int>(i));
  return v;
}

std::vector<std::string> onnx_input_names(const std::string& path) {
  const onnx::ModelProto model = parse_model(path);
  check_ops(model, path);
  return checked_input_names(model, path, /*allow_int64=*/true);
}

namespace {

// Training exports' extra outputs and mode switches (ImportOptions::training), removed
// when unread; then Constant nodes nothing reads any more (Dropout's bool training_mode).
void strip_training_forms(onnx::ModelProto& model, const std::string& path) {
  auto* graph = model.mutable_graph();
  auto readers = [&] {
    std::set<std::string> used;
    for (const auto& n : graph->node())
      for (const auto& in : n.input()) used.insert(in);
    for (const auto& out : graph->output()) used.insert(out.name());
    return used;
  };
  const std::set<std::string> used = readers();
  std::set<std::string> dropped;
  for (auto& n : *graph->mutable_node()) {
    const bool bn = n.op_type() == "BatchNormalization", dropout = n.op_type() == "Dropout";
    if (!bn && !dropout) continue;
    for (int i = 1; i < n.output_size(); ++i)
      if (!n.output(i).empty() && used.count(n.output(i)))
        throw Error(ExitCode::Unsupported,
                    fmt::format("{}: node '{}' ({}): not supported in training: output {} ('{}') is read by another "
                                "node", path, n.name(), n.op_type(), i, n.output(i)));
    for (int i = 1; i < n.output_size(); ++i) dropped.insert(n.output(i));
    while (n.output_size() > 1) n.mutable_output()->RemoveLast();
    if (dropout)
      while (n.input_size() > 2) n.mutable_input()->RemoveLast();
    auto* attrs = n.mutable_attribute();
    for (int i = attrs->size() - 1; i >= 0; --i)
      if (attrs->Get(i).name() == "training_mode") attrs->DeleteSubrange(i, 1);
  }
  const std::set<std::string> still_used = readers();
  auto* nodes = graph->mutable_node();
  for (int i = nodes->size() - 1; i >= 0; --i)
    if (nodes->Get(i).op_type() == "Constant" && nodes->Get(i).output_size() == 1 &&
        !still_used.count(nodes->Get(i).output(0)))
      nodes->DeleteSubrange(i, 1);
  auto* infos = graph->mutable_value_info();
  for (int i = infos->size() - 1; i >= 0; --i)
    if (dropped.count(infos->Get(i).name())) infos->DeleteSubrange(i, 1);
}

}  // namespace

Graph import_onnx(const std::string& path, const ImportOptions& options) {
  if (options.batch < 1) throw Error(ExitCode::Usage, fmt::format("--batch {} must be at least 1", options.batch));
  onnx::ModelProto model = parse_model(path);
  const int64_t opset = default_opset(model, path);
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Error(ExitCode::Unsupported,
                fmt::format("{}: not supported: opset {} (convgen reads opsets {} to {})", path, opset, kMinOpset,
                            kMaxOpset));
  check_ops(model, path);
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    throw Error(ExitCode::BadModel, fmt::format("{}: bad model: {}", path, first_line(e.what())));
  }
  if (opset < kLoweringOpset) {
    try {
      model = onnx::version_conversion::ConvertVersion(model, static_cast<int>(kLoweringOpset));
    } catch (const std::exception& e) {
      throw Error(ExitCode::Unsupported, fmt::format("{}: not supported: opset {} (ONNX's version converter cannot "
                                                     "upgrade it: {})",
                                                     path, opset, first_line(e.what())));
    }
  }
  // Unnamed nodes are named <op>_<index in the file's node list> before anything is
  // folded away, so messages point at the node a user can find.
  for (int i = 0; i < model.graph().node_size(); ++i) {
    auto* n = model.mutable_graph()->mutable_node(i);
    if (n->name().empty()) n->set_name(fmt::format("{}_{}", n->op_type(), i));
  }
  if (options.training) strip_training_forms(model, path);
  bind_constant_inputs(model, options.constant_inputs, path);
  checked_input_names(model, path, /*allow_int64=*/false);
  bind_batch(model, options.batch, path);
  infer_shapes(model, path);
  Graph g;
  g.source = path;
  g.opset = opset;
  g.batch = options.batch;
  collect_values(model, g);
  // Fold what can be folded, write it back as initializers and infer again: ONNX's
  // inference does not always see through PyTorch's shape chains to Reshape's output.
  // Again while that makes more shapes known and more folds possible (a chain behind a
  // Reshape whose shape needed the first round); each round removes what it folded.
  while (fold_constants(model.graph(), g) > 0) {
    write_back_constants(model, g);
    infer_shapes(model, path);
    g.values.clear();
    g.inputs.clear();
    g.outputs.clear();
    collect_values(model, g);
  }
  lower_nodes(model.graph(), std::max(opset, kLoweringOpset), g);
  fold_channel_shuffles(g);
  return g;
}

namespace {

void collect_values(const onnx::ModelProto& model, Graph& g) {
  const std::string& path = g.source;
  const auto& graph = model.graph();
  for (const auto& t : graph.initializer())
    g.values[t.name()] = tensor_value(t, fmt::format("{}: initializer '{}'", path, t.name()));
  auto add_info = [&](const onnx::ValueInfoProto& v) {
    if (g.values.count(v.name()) && g.values[v.name()].is_constant) return;
    bool known = false;
    Value value;
    value.name = v.name();
    value.shape = shape_of(v, &known);
    if (!known) return;  // left unknown: lowering reports it if a node needs it
    const int elem = v.type().tensor_type().elem_type();
    value.is_int64 = elem == onnx::TensorProto_DataType_INT64;
    if (elem != onnx::TensorProto_DataType_FLOAT && !value.is_int64)
      throw Error(ExitCode::Unsupported, fmt::format("{}: value '{}': dtype {} not supported (float32 only)", path,
                                                     v.name(), dtype_name(elem)));
    g.values[v.name()] = value;
  };
  for (const auto& v : graph.input()) {
    add_info(v);
    if (!g.values.count(v.name()))
      throw Error(ExitCode::Unsupported, fmt::format("{}: input '{}': shape unknown", path, v.name()));
    if (!g.values[v.name()].is_constant) g.inputs.push_back(v.name());  // float32: checked_input_names
  }
  for (const auto& v : graph.value_info()) add_info(v);
  for (const auto& v : graph.output()) {
    add_info(v);
    g.outputs.push_back(v.name());
  }
}

}  // namespace

}  // namespace convgen::model
