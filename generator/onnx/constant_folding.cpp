#include "generator/onnx/constant_folding.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "generator/onnx/lowering.h"
#include "runtime/ops/tensor.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

// A folded tensor larger than this is refused: constants feed shapes and masks, and a
// ConstantOfShape or Expand that large is a model better run than folded.
constexpr int64_t kMaxFoldedElements = int64_t(1) << 26;

int64_t elements_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// An empty constant of `like`'s storage (integers or float32) and the given shape.
Value empty_like(const Value& like, const std::string& name, std::vector<int64_t> shape) {
  Value v;
  v.name = name;
  v.is_constant = true;
  v.is_int64 = like.is_int64;
  v.shape = std::move(shape);
  return v;
}

Value integer_value(const std::string& name, std::vector<int64_t> data, std::vector<int64_t> shape) {
  Value v;
  v.name = name;
  v.is_constant = true;
  v.is_int64 = true;
  v.int64_data = std::move(data);
  v.shape = std::move(shape);
  return v;
}

// out[i] = sources[from[i].first] element from[i].second, for sources of one storage.
Value pick(const NodeContext& c, const std::vector<const Value*>& sources, const std::string& name,
           std::vector<int64_t> shape, const std::vector<std::pair<int, int64_t>>& from) {
  for (const Value* s : sources)
    if (s->is_int64 != sources[0]->is_int64)
      c.bad("operands of different element types (integer and float)");
  Value out = empty_like(*sources[0], name, std::move(shape));
  if (out.is_int64) {
    out.int64_data.reserve(from.size());
    for (const auto& [k, i] : from) out.int64_data.push_back(sources[size_t(k)]->int64_data[size_t(i)]);
  } else {
    out.data.reserve(from.size());
    for (const auto& [k, i] : from) out.data.push_back(sources[size_t(k)]->data[size_t(i)]);
  }
  return out;
}

Value pick(const NodeContext& c, const Value& source, const std::string& name, std::vector<int64_t> shape,
           const std::vector<int64_t>& indices) {
  std::vector<std::pair<int, int64_t>> from;
  from.reserve(indices.size());
  for (int64_t i : indices) from.emplace_back(0, i);
  return pick(c, {&source}, name, std::move(shape), from);
}

// Linear index into a tensor of shape `in` for each element of `out` it broadcasts to.
std::vector<int64_t> broadcast_indices(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  const size_t rank = out.size(), offset = rank - in.size();
  const std::vector<int64_t> in_strides = layout_strides(in, false);
  std::vector<int64_t> step(rank, 0);  // the input's stride along each output axis, 0 when broadcast
  for (size_t i = offset; i < rank; ++i) step[i] = in[i - offset] == 1 ? 0 : in_strides[i - offset];
  std::vector<int64_t> indices(size_t(elements_of(out)));
  std::vector<int64_t> at(rank, 0);
  int64_t linear = 0;
  for (int64_t& index : indices) {
    index = linear;
    for (size_t i = rank; i-- > 0;) {  // next output element: odometer over the axes
      linear += step[i];
      if (++at[i] < out[i]) break;
      linear -= step[i] * out[i];
      at[i] = 0;
    }
  }
  return indices;
}

void check_size(const NodeContext& c, const std::vector<int64_t>& shape) {
  for (int64_t d : shape)
    if (d < 0) c.bad(fmt::format("negative dimension in the folded shape {}", list(shape)));
  double n = 1;
  for (int64_t d : shape) n *= double(d);
  if (n > double(kMaxFoldedElements))
    c.unsupported(fmt::format("folding a constant of shape {} ({} elements; at most {})", list(shape), n,
                              kMaxFoldedElements));
}

// An integer-held ONNX type, wrapped to its width; nullptr for types the evaluator does not hold.
std::function<int64_t(int64_t)> integer_cast(int to) {
  switch (to) {
    case onnx::TensorProto_DataType_INT64: return [](int64_t x) { return x; };
    case onnx::TensorProto_DataType_INT32: return [](int64_t x) { return int64_t(int32_t(x)); };
    case onnx::TensorProto_DataType_INT16: return [](int64_t x) { return int64_t(int16_t(x)); };
    case onnx::TensorProto_DataType_INT8: return [](int64_t x) { return int64_t(int8_t(x)); };
    case onnx::TensorProto_DataType_UINT8: return [](int64_t x) { return int64_t(uint8_t(x)); };
    case onnx::TensorProto_DataType_UINT16: return [](int64_t x) { return int64_t(uint16_t(x)); };
    case onnx::TensorProto_DataType_UINT32: return [](int64_t x) { return int64_t(uint32_t(x)); };
    case onnx::TensorProto_DataType_BOOL: return [](int64_t x) { return int64_t(x != 0); };
    default: return nullptr;
  }
}

int64_t float_to_integer(const NodeContext& c, float f) {
  if (!std::isfinite(f) || std::fabs(f) >= 9.2e18f) c.bad(fmt::format("{} cast to an integer type", f));
  return static_cast<int64_t>(f);  // toward zero, as ONNX's Cast
}

// ---- the ops -------------------------------------------------------------------------

Value fold_constant_op(const NodeContext& c, const std::string& name) {
  Value v;
  if (const auto* t = c.attr("value"); t && t->has_t()) {
    v = tensor_value(t->t(), c.where());
  } else if (const auto* f = c.attr("value_float")) {
    v.is_constant = true;
    v.data = {f->f()};
  } else if (const auto* fs = c.attr("value_floats")) {
    v.is_constant = true;
    v.data.assign(fs->floats().begin(), fs->floats().end());
    v.shape = {static_cast<int64_t>(v.data.size())};
  } else if (const auto* i = c.attr("value_int")) {
    v = integer_value("", {i->i()}, {});
  } else if (const auto* is = c.attr("value_ints")) {
    v = integer_value("", std::vector<int64_t>(is->ints().begin(), is->ints().end()), {is->ints_size()});
  } else {
    c.unsupported("a Constant without a tensor, float(s) or int(s) value");
  }
  v.name = name;
  return v;
}

Value fold_shape_op(const NodeContext& c, const Value& x, const std::string& name) {
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (c.op() == "Size") return integer_value(name, {elements_of(x.shape)}, {});
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return integer_value(name, std::vector<int64_t>(x.shape.begin() + start, x.shape.begin() + end), {end - start});
}

Value fold_constant_of_shape(const NodeContext& c, const std::string& name) {
  const std::vector<int64_t> shape = integers_of(c.input(0));
  check_size(c, shape);
  Value fill;
  if (const auto* t = c.attr("value"); t && t->has_t()) {
    fill = tensor_value(t->t(), c.where());
    if (fill.elements() != 1) c.bad_attr("value", list(fill.shape), "must hold one element");
  } else {
    fill.is_constant = true;
    fill.data = {0.0f};
  }
  return pick(c, fill, name, shape, std::vector<int64_t>(size_t(elements_of(shape)), 0));
}

Value fold_range(const NodeContext& c, const std::string& name) {
  const Value &start = c.input(0), &limit = c.input(1), &delta = c.input(2);
  for (const Value* v : {&start, &limit, &delta})
    if (v->elements() != 1) c.bad(fmt::format("Range's inputs must be scalars, not of shape {}", list(v->shape)));
  if (start.is_int64) {
    const int64_t s = start.int64_data[0], l = limit.int64_data.at(0), d = delta.int64_data.at(0);
    if (d == 0) c.bad("Range's delta is 0");
    const int64_t n = std::max<int64_t>(0, (l - s + d + (d > 0 ? -1 : 1)) / d);
    check_size(c, {n});
    std::vector<int64_t> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = s + i * d;
    return integer_value(name, std::move(values), {n});
  }
  const float s = start.data[0], l = limit.data.at(0), d = delta.data.at(0);
  if (d == 0.0f || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d))
    c.bad(fmt::format("Range({}, {}, {}) has no finite length", s, l, d));
  const double count = std::max(0.0, std::ceil((double(l) - double(s)) / double(d)));
  check_size(c, {int64_t(std::min(count, 1e18))});
  Value out = empty_like(start, name, {int64_t(count)});
  for (int64_t i = 0; i < int64_t(count); ++i) out.data.push_back(s + float(i) * d);
  return out;
}

Value fold_gather(const NodeContext& c, const std::string& name) {
  const Value& data = c.input(0);
  const Value& index = c.input(1);
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  if (rank == 0) c.bad("Gather of a scalar");
  const int64_t axis = normalise_axis(c, c.attr_int("axis", 0), rank, "axis");
  const int64_t extent = data.shape[size_t(axis)];
  std::vector<int64_t> shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), index.shape.begin(), index.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  check_size(c, shape);
  const int64_t outer = elements_of({data.shape.begin(), data.shape.begin() + axis});
  const int64_t inner = elements_of({data.shape.begin() + axis + 1, data.shape.end()});
  std::vector<int64_t> picks;
  const std::vector<int64_t> indices = integers_of(index);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : indices) {
      if (i < -extent || i >= extent) c.bad(fmt::format("index {} out of range for an axis of {}", i, extent));
      const int64_t at = i < 0 ? i + extent : i;
      for (int64_t k = 0; k < inner; ++k) picks.push_back((o * extent + at) * inner + k);
    }
  return pick(c, data, name, shape, picks);
}

Value fold_slice(const NodeContext& c, const std::string& name) {
  const Value& data = c.input(0);
  const int64_t rank = static_cast<int64_t>(data.shape.size());
  const SliceWindow w = slice_window(c, data.shape);
  const std::vector<int64_t>& first = w.first;
  const std::vector<int64_t>& step = w.step;
  const std::vector<int64_t>& shape = w.shape;
  const std::vector<int64_t> in_strides = layout_strides(data.shape, false);
  std::vector<int64_t> picks(size_t(elements_of(shape)));
  std::vector<int64_t> at(size_t(rank), 0);
  for (int64_t& p : picks) {
    p = 0;
    for (int64_t a = 0; a < rank; ++a) p += (first[size_t(a)] + at[size_t(a)] * step[size_t(a)]) * in_strides[size_t(a)];
    for (int64_t a = rank; a-- > 0;) {
      if (++at[size_t(a)] < shape[size_t(a)]) break;
      at[size_t(a)] = 0;
    }
  }
  return pick(c, data, name, shape, picks);
}

Value fold_concat(const NodeContext& c, const std::string& name) {
  std::vector<const Value*> parts;
  for (int i = 0; i < c.inputs(); ++i)
    if (c.has_input(i)) parts.push_back(&c.input(i));
  if (parts.empty()) c.bad("Concat without inputs");
  const int64_t rank = static_cast<int64_t>(parts[0]->shape.size());
  if (!c.attr("axis")) c.bad("attribute 'axis' missing");
  const int64_t axis = normalise_axis(c, c.attr_int("axis", 0), rank, "axis");
  std::vector<int64_t> shape = parts[0]->shape;
  shape[size_t(axis)] = 0;
  for (const Value* p : parts) {
    std::vector<int64_t> s = p->shape;
    if (s.size() != size_t(rank)) c.bad("Concat of inputs of different ranks");
    shape[size_t(axis)] += s[size_t(axis)];
    s[size_t(axis)] = shape[size_t(axis)];
    if (s != shape) c.bad(fmt::format("Concat of shapes {} and {} along axis {}", list(parts[0]->shape), list(p->shape), axis));
  }
  const int64_t outer = elements_of({shape.begin(), shape.begin() + axis});
  const int64_t inner = elements_of({shape.begin() + axis + 1, shape.end()});
  std::vector<std::pair<int, int64_t>> from;
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < parts.size(); ++k) {
      const int64_t block = parts[k]->shape[size_t(axis)] * inner;
      for (int64_t i = 0; i < block; ++i) from.emplace_back(int(k), o * block + i);
    }
  return pick(c, parts, name, shape, from);
}

Value fold_transpose(const NodeContext& c, const std::string& name) {
  const Value& x = c.input(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  std::vector<int64_t> reversed;
  for (int64_t i = rank - 1; i >= 0; --i) reversed.push_back(i);
  const std::vector<int64_t> perm = c.attr_ints("perm", reversed);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != [&] { std::vector<int64_t> v; for (int64_t i = 0; i < rank; ++i) v.push_back(i); return v; }())
    c.bad_attr("perm", list(perm), fmt::format("not a permutation of {} axes", rank));
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(x.shape[size_t(p)]);
  if (rank == 2 && perm == std::vector<int64_t>{1, 0} && !x.is_int64)
    c.graph().transposed_constants[name] = c.proto().input(0);
  const std::vector<int64_t> in_strides = layout_strides(x.shape, false);
  std::vector<int64_t> picks(size_t(x.elements()));
  std::vector<int64_t> at(size_t(rank), 0);
  for (int64_t& p : picks) {
    p = 0;
    for (int64_t a = 0; a < rank; ++a) p += at[size_t(a)] * in_strides[size_t(perm[size_t(a)])];
    for (int64_t a = rank; a-- > 0;) {
      if (++at[size_t(a)] < shape[size_t(a)]) break;
      at[size_t(a)] = 0;
    }
  }
  return pick(c, x, name, shape, picks);
}

// Reshape, Squeeze, Unsqueeze, Identity, Flatten: the same elements under a new shape.
Value fold_relabel(const NodeContext& c, const std::string& name) {
  const Value& x = c.input(0);
  const std::string& op = c.op();
  std::vector<int64_t> shape = x.shape;
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  if (op == "Reshape") {
    shape = integers_of(c.input(1));
    const bool allow_zero = c.attr_int("allowzero", 0) != 0;
    int64_t known = 1, unknown = -1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0 && !allow_zero) {
        if (i >= x.shape.size()) c.bad(fmt::format("shape {}: no input dimension {} to copy", list(shape), i));
        shape[i] = x.shape[i];
      }
      if (shape[i] == -1) {
        if (unknown >= 0) c.bad(fmt::format("shape {} has two -1", list(shape)));
        unknown = int64_t(i);
      } else if (shape[i] < 0) {
        c.bad(fmt::format("shape {} has a negative dimension", list(shape)));
      } else {
        known *= shape[i];
      }
    }
    if (unknown >= 0) {
      if (known == 0 || x.elements() % known != 0)
        c.bad(fmt::format("cannot reshape {} elements to {}", x.elements(), list(shape)));
      shape[size_t(unknown)] = x.elements() / known;
    }
  } else if (op == "Unsqueeze") {
    std::vector<int64_t> axes = c.has_input(1) ? integers_of(c.input(1)) : c.attr_ints("axes", {});
    axes = normalised_axes(c, axes, rank + static_cast<int64_t>(axes.size()), "axes");
    for (int64_t a : axes) shape.insert(shape.begin() + a, 1);
  } else if (op == "Squeeze") {
    const bool given = c.has_input(1) || c.attr("axes");
    std::vector<int64_t> axes = c.has_input(1) ? integers_of(c.input(1)) : c.attr_ints("axes", {});
    for (int64_t& a : axes) a = normalise_axis(c, a, rank, "axes");
    shape.clear();
    for (int64_t i = 0; i < rank; ++i) {
      const bool listed = std::find(axes.begin(), axes.end(), i) != axes.end();
      if (listed && x.shape[size_t(i)] != 1)
        c.bad_attr("axes", list(axes), fmt::format("axis {} has extent {}, not 1", i, x.shape[size_t(i)]));
      if (given ? !listed : x.shape[size_t(i)] != 1) shape.push_back(x.shape[size_t(i)]);
    }
  } else if (op == "Flatten") {
    const int64_t axis = normalise_axis(c, c.attr_int("axis", 1), rank + 1, "axis");
    shape = {elements_of({x.shape.begin(), x.shape.begin() + axis}), elements_of({x.shape.begin() + axis, x.shape.end()})};
  }
  if (elements_of(shape) != x.elements())
    c.bad(fmt::format("cannot reshape {} elements to {}", x.elements(), list(shape)));
  Value out = x;
  out.name = name;
  out.shape = shape;
  return out;
}

Value fold_expand(const NodeContext& c, const std::string& name) {
  const Value& x = c.input(0);
  const std::vector<int64_t> shape = broadcast(c, x.shape, integers_of(c.input(1)));
  check_size(c, shape);
  return pick(c, x, name, shape, broadcast_indices(x.shape, shape));
}

Value fold_cast(const NodeContext& c, const std::string& name) {
  const Value& x = c.input(0);
  const int to = static_cast<int>(c.attr_int("to", 0));
  if (to == onnx::TensorProto_DataType_FLOAT) {
    Value out = empty_like(x, name, x.shape);
    out.is_int64 = false;
    out.data = x.is_int64 ? std::vector<float>(x.int64_data.begin(), x.int64_data.end()) : x.data;
    return out;
  }
  const auto wrap = integer_cast(to);
  if (!wrap) c.bad_attr("to", std::to_string(to), "the constant evaluator holds float32 and integer types only");
  Value out = integer_value(name, {}, x.shape);
  if (x.is_int64)
    for (int64_t v : x.int64_data) out.int64_data.push_back(wrap(v));
  else
    for (float v : x.data)
      out.int64_data.push_back(to == onnx::TensorProto_DataType_BOOL ? int64_t(v != 0.0f) : wrap(float_to_integer(c, v)));
  return out;
}

// Element-wise ops on broadcast operands: arithmetic, comparisons, Min/Max, Where.
Value fold_elementwise(const NodeContext& c, const std::string& name) {
  const std::string& op = c.op();
  std::vector<const Value*> in;
  for (int i = 0; i < c.inputs(); ++i)
    if (c.has_input(i)) in.push_back(&c.input(i));
  if (in.empty()) c.bad("no inputs");
  std::vector<int64_t> shape = in[0]->shape;
  for (const Value* v : in) shape = broadcast(c, shape, v->shape);
  check_size(c, shape);
  std::vector<std::vector<int64_t>> at;
  for (const Value* v : in) at.push_back(broadcast_indices(v->shape, shape));
  const size_t n = size_t(elements_of(shape));
  if (op == "Where") {
    std::vector<std::pair<int, int64_t>> from(n);
    const std::vector<int64_t> cond = integers_of(*in.at(0));
    if (in.size() != 3) c.bad("Where needs three inputs");
    for (size_t i = 0; i < n; ++i) from[i] = cond[size_t(at[0][i])] ? std::make_pair(0, at[1][i]) : std::make_pair(1, at[2][i]);
    return pick(c, {in[1], in[2]}, name, shape, from);
  }
  if (op == "Not" || op == "Neg" || op == "Abs") {
    const Value& x = *in[0];
    Value out = empty_like(x, name, shape);
    if (x.is_int64)
      for (int64_t v : x.int64_data) out.int64_data.push_back(op == "Not" ? !v : op == "Neg" ? -v : std::llabs(v));
    else if (op == "Not")
      c.bad("Not of a float tensor");
    else
      for (float v : x.data) out.data.push_back(op == "Neg" ? -v : std::fabs(v));
    return out;
  }
  for (const Value* v : in)
    if (v->is_int64 != in[0]->is_int64) c.bad("operands of different element types (integer and float)");
  const bool integers = in[0]->is_int64;
  const bool compare = op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual";
  if (op != "Min" && op != "Max" && in.size() != 2) c.bad(fmt::format("{} needs two inputs", op));
  Value out = compare ? integer_value(name, {}, shape) : empty_like(*in[0], name, shape);
  auto combine = [&](auto x, auto y) {
    if (op == "Add") return x + y;
    if (op == "Sub") return x - y;
    if (op == "Mul") return x * y;
    if (op == "Div") return x / y;
    if (op == "Min") return std::min(x, y);
    return std::max(x, y);
  };
  auto relate = [&](auto x, auto y) {
    if (op == "Equal") return x == y;
    if (op == "Less") return x < y;
    if (op == "Greater") return x > y;
    if (op == "LessOrEqual") return x <= y;
    return x >= y;
  };
  for (size_t i = 0; i < n; ++i) {
    if (integers) {
      int64_t acc = in[0]->int64_data[size_t(at[0][i])];
      if (compare) {
        out.int64_data.push_back(relate(acc, in[1]->int64_data[size_t(at[1][i])]));
        continue;
      }
      for (size_t k = 1; k < in.size(); ++k) {
        const int64_t y = in[k]->int64_data[size_t(at[k][i])];
        if (op == "Div" && y == 0) c.bad("integer division by zero");
        acc = combine(acc, y);
      }
      out.int64_data.push_back(acc);
    } else {
      float acc = in[0]->data[size_t(at[0][i])];
      if (compare) {
        out.int64_data.push_back(relate(acc, in[1]->data[size_t(at[1][i])]));
        continue;
      }
      for (size_t k = 1; k < in.size(); ++k) acc = combine(acc, in[k]->data[size_t(at[k][i])]);
      out.data.push_back(acc);
    }
  }
  return out;
}

using Folder = Value (*)(const NodeContext&, const std::string&);

const std::map<std::string, Folder>& folders() {
  static const std::map<std::string, Folder> table = {
      {"ConstantOfShape", fold_constant_of_shape}, {"Range", fold_range}, {"Gather", fold_gather},
      {"Slice", fold_slice}, {"Concat", fold_concat}, {"Transpose", fold_transpose}, {"Reshape", fold_relabel},
      {"Squeeze", fold_relabel}, {"Unsqueeze", fold_relabel}, {"Identity", fold_relabel}, {"Flatten", fold_relabel},
      {"Expand", fold_expand}, {"Cast", fold_cast}, {"Where", fold_elementwise}, {"Equal", fold_elementwise},
      {"Less", fold_elementwise}, {"Greater", fold_elementwise}, {"LessOrEqual", fold_elementwise},
      {"GreaterOrEqual", fold_elementwise}, {"Not", fold_elementwise}, {"Neg", fold_elementwise},
      {"Abs", fold_elementwise}, {"Min", fold_elementwise}, {"Max", fold_elementwise}, {"Add", fold_elementwise},
      {"Sub", fold_elementwise}, {"Mul", fold_elementwise}, {"Div", fold_elementwise}};
  return table;
}

}  // namespace

std::vector<int64_t> broadcast(const NodeContext& c, const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i + a.size() >= rank ? a[i + a.size() - rank] : 1;
    const int64_t y = i + b.size() >= rank ? b[i + b.size() - rank] : 1;
    if (x != y && x != 1 && y != 1)
      c.bad(fmt::format("shapes {} and {} do not broadcast", list(a), list(b)));
    out[i] = x == 1 ? y : x;
  }
  return out;
}

SliceWindow slice_window(const NodeContext& c, const std::vector<int64_t>& shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  const std::vector<int64_t> starts = integers_of(c.constant_input(1, "Slice's starts"));
  const std::vector<int64_t> ends = integers_of(c.constant_input(2, "Slice's ends"));
  std::vector<int64_t> axes, steps;
  if (c.has_input(3)) axes = integers_of(c.constant_input(3, "Slice's axes"));
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  steps = c.has_input(4) ? integers_of(c.constant_input(4, "Slice's steps")) : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.bad(fmt::format("starts, ends, axes and steps of different lengths ({}, {}, {}, {})", starts.size(), ends.size(),
                      axes.size(), steps.size()));
  SliceWindow w{std::vector<int64_t>(size_t(rank), 0), std::vector<int64_t>(size_t(rank), 1), shape};
  std::set<int64_t> seen;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalise_axis(c, axes[i], rank, "axes");
    if (!seen.insert(axis).second) c.bad(fmt::format("axis {} sliced twice", axis));
    const int64_t dim = shape[size_t(axis)], st = steps[i];
    if (st == 0) c.bad("a slice step of 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < -dim ? -1 : s + dim;  // no overflow near INT64_MIN
    if (e < 0) e = e < -dim ? -1 : e + dim;
    int64_t len;
    if (st > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + st - 1) / st : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e - st - 1) / -st : 0;
    }
    w.first[size_t(axis)] = s;
    w.step[size_t(axis)] = st;
    w.shape[size_t(axis)] = len;
  }
  return w;
}

std::vector<int64_t> integers_of(const Value& v) {
  if (v.is_int64) return v.int64_data;
  std::vector<int64_t> out;
  for (float f : v.data) out.push_back(static_cast<int64_t>(f));
  return out;
}

bool is_foldable_op(const std::string& op) {
  return op == "Constant" || op == "Shape" || op == "Size" || folders().count(op) > 0;
}

bool fold_node(const NodeContext& c, Graph& g) {
  const onnx::NodeProto& n = c.proto();
  if (!n.domain().empty() && n.domain() != "ai.onnx")
    c.unsupported(fmt::format("op {} of domain {}", n.op_type(), n.domain()));
  if (n.output_size() != 1 || n.output(0).empty()) return false;
  const std::string& name = n.output(0);
  Value out;
  if (n.op_type() == "Constant") {
    out = fold_constant_op(c, name);
  } else if (n.op_type() == "Shape" || n.op_type() == "Size") {
    auto it = g.values.find(n.input(0));
    if (it == g.values.end()) return false;  // not known yet
    out = fold_shape_op(c, it->second, name);
  } else {
    const auto folder = folders().find(n.op_type());
    if (folder == folders().end() || n.input_size() == 0) return false;
    for (int i = 0; i < n.input_size(); ++i) {
      if (!c.has_input(i)) continue;
      auto it = g.values.find(n.input(i));
      if (it == g.values.end() || !it->second.is_constant) return false;
    }
    out = folder->second(c, name);
  }
  // What shape inference said, when it said anything, must be what was computed.
  if (auto it = g.values.find(name); it != g.values.end() && !it->second.is_constant && it->second.shape != out.shape)
    c.bad(fmt::format("output '{}' folds to shape {}, shape inference says {}", name, list(out.shape),
                      list(it->second.shape)));
  g.values[name] = std::move(out);
  return true;
}

int fold_constants(const onnx::GraphProto& graph, Graph& g) {
  int index = 0, folded = 0;
  for (const auto& n : graph.node()) {
    NodeContext c(n, index++, g);
    if (fold_node(c, g)) ++folded;
  }
  return folded;
}

}  // namespace convgen::model
