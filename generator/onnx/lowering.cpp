#include "generator/onnx/lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "generator/onnx/constant_folding.h"
#include "generator/onnx/import.h"
#include "generator/onnx/node_context.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

// ---- lowering -------------------------------------------------------------------------

// The `pads` attribute (begins of every spatial axis, then ends) into a's pads.
void explicit_pads(const NodeContext& c, size_t n, Attributes& a) {
  const std::vector<int64_t> pads = c.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (pads.size() != 2 * n) c.bad_attr("pads", list(pads), fmt::format("needs {} values", 2 * n));
  for (size_t i = 0; i < n; ++i) {
    if (pads[i] < 0 || pads[n + i] < 0) c.bad_attr("pads", list(pads), "negative padding");
    a.pads_begin[i] = pads[i];
    a.pads_end[i] = pads[n + i];
  }
}

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
    explicit_pads(c, n, a);
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

// ConvTranspose: the window of the convolution whose backward-data it is
// (model_graph.h: conv_transpose_descriptor). Pads come from `pads`, or from
// `output_shape` / SAME auto_pad as ONNX Runtime computes them (the odd unit of total
// padding at the end for SAME_UPPER, at the start otherwise). `output_padding` and an
// output_shape beyond the padded extent only add rows and columns at the end, which
// the output's (inferred) shape carries; they must stay below the stride, where that
// convolution still has the ConvTranspose's input as its output.
void lower_conv_transpose(const NodeContext& c, Attributes& a) {
  const Value& x = c.input(0);
  const Value& w = c.input(1);
  const auto spatial = spatial_dims(c, x);
  const size_t n = spatial.size();
  if (w.shape.size() != x.shape.size())
    c.bad(fmt::format("weights of rank {} for an input of rank {}", w.shape.size(), x.shape.size()));
  a.group = c.attr_int("group", 1);
  if (a.group < 1 || w.shape[0] != x.shape[1] || x.shape[1] % a.group != 0)
    c.bad_attr("group", std::to_string(a.group),
               fmt::format("inconsistent with {} input channels and weights {}", x.shape[1], list(w.shape)));
  a.kernel = c.attr_ints("kernel_shape", std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()));
  if (a.kernel != std::vector<int64_t>(w.shape.begin() + 2, w.shape.end()))
    c.bad_attr("kernel_shape", list(a.kernel), fmt::format("differs from the weights {}", list(w.shape)));
  a.strides = c.attr_ints("strides", std::vector<int64_t>(n, 1));
  a.dilations = c.attr_ints("dilations", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> output_padding = c.attr_ints("output_padding", std::vector<int64_t>(n, 0));
  std::vector<int64_t> output_shape = c.attr_ints("output_shape", {});
  if (output_shape.size() == n + 2) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (a.strides.size() != n) c.bad_attr("strides", list(a.strides), fmt::format("needs {} values", n));
  if (a.dilations.size() != n) c.bad_attr("dilations", list(a.dilations), fmt::format("needs {} values", n));
  if (output_padding.size() != n)
    c.bad_attr("output_padding", list(output_padding), fmt::format("needs {} values", n));
  if (!output_shape.empty() && output_shape.size() != n)
    c.bad_attr("output_shape", list(output_shape), fmt::format("needs {} values", n));
  for (size_t i = 0; i < n; ++i) {
    if (a.strides[i] < 1) c.bad_attr("strides", list(a.strides), "must be positive");
    if (a.dilations[i] < 1) c.bad_attr("dilations", list(a.dilations), "must be positive");
    if (output_padding[i] < 0) c.bad_attr("output_padding", list(output_padding), "must not be negative");
  }
  const std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    c.bad_attr("auto_pad", "'" + auto_pad + "'", "expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  a.pads_begin.assign(n, 0);
  a.pads_end.assign(n, 0);
  if (output_shape.empty() && auto_pad == "NOTSET") {
    explicit_pads(c, n, a);
  } else if (!output_shape.empty() || auto_pad != "VALID") {
    for (size_t i = 0; i < n; ++i) {
      const int64_t target = output_shape.empty() ? spatial[i] * a.strides[i] : output_shape[i];
      const int64_t full = a.strides[i] * (spatial[i] - 1) + output_padding[i] + (a.kernel[i] - 1) * a.dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, full - target);
      a.pads_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      a.pads_end[i] = total - a.pads_begin[i];
    }
  }
  const std::vector<int64_t>& out = c.output_value(0).shape;
  if (out.size() != x.shape.size() || out[1] != w.shape[1] * a.group)
    c.bad(fmt::format("inferred output shape {} does not fit weights {} and group {}", list(out), list(w.shape), a.group));
  for (size_t i = 0; i < n; ++i) {
    // The convolution from the output back to the input must reach the input's extent
    // exactly: rows the output has beyond it are the stride's remainder at most.
    const int64_t reached = (out[2 + i] + a.pads_begin[i] + a.pads_end[i] - a.dilations[i] * (a.kernel[i] - 1) - 1);
    if (reached < 0 || reached / a.strides[i] + 1 != spatial[i])
      c.unsupported(fmt::format("an output extent of {} for an input of {}: {} {} adds the stride {} or more",
                                out[2 + i], spatial[i], output_shape.empty() ? "output_padding" : "output_shape",
                                list(output_shape.empty() ? output_padding : output_shape), a.strides[i]));
  }
  if (c.has_input(2) && c.input(2).elements() != out[1])
    c.bad(fmt::format("bias of {} values for {} output channels", c.input(2).elements(), out[1]));
}

void only_first_output(const NodeContext& c, const char* what) {
  for (int i = 1; i < c.proto().output_size(); ++i)
    if (!c.proto().output(i).empty()) c.unsupported(fmt::format("optional output {} ({})", i, what));
}

// Split: one Slice node per output, named NODE:INDEX, each a window of step 1 along
// the axis (sizes from the `split` input -- an attribute before opset 13 -- or equal).
std::vector<Node> lower_split(const NodeContext& c, int opset) {
  const Value& x = c.input(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalise_axis(c, c.attr_int("axis", 0), rank, "axis");
  const int outputs = c.proto().output_size();
  std::vector<int64_t> sizes = opset >= 13 ? (c.has_input(1) ? integers_of(c.constant_input(1, "Split's sizes"))
                                                             : std::vector<int64_t>{})
                                           : c.attr_ints("split", {});
  const int64_t extent = x.shape[size_t(axis)];
  if (sizes.empty()) {
    if (outputs < 1 || extent % outputs != 0)
      c.bad(fmt::format("{} outputs cannot split an axis of {} equally", outputs, extent));
    sizes.assign(size_t(outputs), extent / outputs);
  }
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) c.bad_attr("split", list(sizes), "negative size");
    total += s;
  }
  if (static_cast<int>(sizes.size()) != outputs || total != extent)
    c.bad_attr("split", list(sizes), fmt::format("must be {} sizes adding up to {}", outputs, extent));
  std::vector<Node> parts;
  int64_t offset = 0;
  for (int i = 0; i < outputs; ++i) {
    Node node;
    node.name = fmt::format("{}:{}", c.name(), i);
    node.op = Op::Slice;
    node.inputs = {c.proto().input(0)};
    node.outputs = {c.proto().output(i)};
    node.attributes.slice_first.assign(size_t(rank), 0);
    node.attributes.slice_step.assign(size_t(rank), 1);
    node.attributes.slice_first[size_t(axis)] = offset;
    offset += sizes[size_t(i)];
    if (!node.outputs[0].empty()) parts.push_back(std::move(node));
  }
  return parts;
}

// Resize (opset 11 on: X, roi, scales, sizes; opset 10 and Upsample: X, scales) over the
// spatial axes. Refused, naming the attribute: resizing the batch or channel axis,
// tf_crop_and_resize (its roi) and other values outside ONNX's list.
void lower_resize(const NodeContext& c, int opset, Attributes& a) {
  const Value& x = c.input(0);
  const std::vector<int64_t>& out = c.output_value(0).shape;
  const size_t rank = x.shape.size();
  if (rank != 3 && rank != 4) c.unsupported(fmt::format("input of rank {} (resizing N, C, [H,] W tensors only)", rank));
  // Models below opset 11 reach lowering upgraded by ONNX's converter: Upsample became
  // Resize, which now has a roi input, but no coordinate_transformation_mode -- the old
  // semantics come from the file's own opset.
  const bool upsample = c.op() == "Upsample";
  const int scales_input = upsample || c.proto().input_size() == 2 ? 1 : 2;
  std::vector<float> scales;
  if (upsample && !c.has_input(1)) scales = c.attr_floats("scales", {});
  // An empty scales tensor stands for "absent" when sizes are given.
  if (c.has_input(scales_input)) scales = c.constant_input(scales_input, "the scales").data;
  ops::ResizeSpec& r = a.resize;
  const std::string mode = c.attr_string("mode", "nearest");
  if (mode == "nearest") r.mode = ops::ResizeMode::Nearest;
  else if (mode == "linear" || mode == "bilinear") r.mode = ops::ResizeMode::Linear;
  else if (mode == "cubic" && !upsample) r.mode = ops::ResizeMode::Cubic;
  else c.bad_attr("mode", "'" + mode + "'", upsample ? "expected nearest or linear" : "expected nearest, linear or cubic");
  // Upsample and opset-10 Resize: asymmetric coordinates, nearest rounds down.
  const bool old = upsample || opset < 11 || c.graph().opset < 11;
  const std::string coordinates = old ? "asymmetric" : c.attr_string("coordinate_transformation_mode", "half_pixel");
  static const std::map<std::string, ops::ResizeCoordinates> coordinate_modes = {
      {"half_pixel", ops::ResizeCoordinates::HalfPixel},
      {"pytorch_half_pixel", ops::ResizeCoordinates::PytorchHalfPixel},
      {"align_corners", ops::ResizeCoordinates::AlignCorners},
      {"asymmetric", ops::ResizeCoordinates::Asymmetric},
      {"tf_half_pixel_for_nn", ops::ResizeCoordinates::TfHalfPixelForNn}};
  auto cm = coordinate_modes.find(coordinates);
  if (coordinates == "tf_crop_and_resize")
    c.bad_attr("coordinate_transformation_mode", "'tf_crop_and_resize'", "an unclaimed attribute value (cropping to a "
               "region of interest)");
  if (cm == coordinate_modes.end())
    c.bad_attr("coordinate_transformation_mode", "'" + coordinates + "'",
               "expected half_pixel, pytorch_half_pixel, align_corners, asymmetric or tf_half_pixel_for_nn");
  r.coordinates = cm->second;
  const std::string nearest = old ? "floor" : c.attr_string("nearest_mode", "round_prefer_floor");
  static const std::map<std::string, ops::NearestRounding> nearest_modes = {
      {"round_prefer_floor", ops::NearestRounding::RoundPreferFloor},
      {"round_prefer_ceil", ops::NearestRounding::RoundPreferCeil},
      {"floor", ops::NearestRounding::Floor},
      {"ceil", ops::NearestRounding::Ceil}};
  auto nm = nearest_modes.find(nearest);
  if (nm == nearest_modes.end())
    c.bad_attr("nearest_mode", "'" + nearest + "'", "expected round_prefer_floor, round_prefer_ceil, floor or ceil");
  r.nearest = nm->second;
  r.cubic_a = c.attr_float("cubic_coeff_a", -0.75f);
  r.exclude_outside = c.attr_int("exclude_outside", 0) != 0;
  if (!scales.empty() && scales.size() != rank)
    c.bad_attr("scales", fmt::format("of {} values", scales.size()), fmt::format("needs {} values", rank));
  if (out.size() != rank) c.bad(fmt::format("inferred output shape {} for an input of rank {}", list(out), rank));
  for (size_t i = 0; i < rank; ++i) {
    if (!scales.empty() && !(scales[i] > 0.0f))
      c.bad_attr("scales", fmt::format("{} on axis {}", scales[i], i), "must be positive");
    if (i < 2 && out[i] != x.shape[i])
      c.unsupported(fmt::format("resizing axis {} ({} -> {}): the batch and channel axes keep their extent", i,
                                x.shape[i], out[i]));
    if (i >= 2)
      r.scales.push_back(scales.empty() ? static_cast<float>(out[i]) / static_cast<float>(x.shape[i]) : scales[i]);
  }
}

// LayerNormalization (opset 17): Y by one LayerNormalization node; the optional Mean and
// InvStdDev outputs, when read, by the ops that define them: ReduceMean over the
// normalised axes, and Reciprocal(Sqrt(ReduceMean((x - mean)^2) + epsilon)). Each
// helper value is named NODE:what.
std::vector<Node> lower_layer_norm(const NodeContext& c) {
  const Value& x = c.input(0);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalise_axis(c, c.attr_int("axis", -1), rank, "axis");
  const float epsilon = c.attr_float("epsilon", 1e-5f);
  if (!(epsilon >= 0.0f)) c.bad_attr("epsilon", std::to_string(epsilon), "must not be negative");
  int64_t normalised = 1;
  for (int64_t d = axis; d < rank; ++d) normalised *= x.shape[size_t(d)];
  for (int i = 1; i <= 2; ++i) {
    if (!c.has_input(i)) continue;
    const int64_t e = c.input(i).elements();
    if (e != 1 && e != normalised)
      c.unsupported(fmt::format("{} of shape {} for normalised axes of {} elements (one value, or one per element)",
                                i == 1 ? "Scale" : "B", list(c.input(i).shape), normalised));
  }
  Graph& g = c.graph();
  auto value = [&](const std::string& name, std::vector<int64_t> shape) {
    Value v;
    v.name = name;
    v.shape = std::move(shape);
    g.values[name] = v;
    return name;
  };
  auto node = [&](Op op, std::vector<std::string> inputs, std::string output, const std::string& suffix) {
    Node n;
    n.name = c.name() + suffix;
    n.op = op;
    n.inputs = std::move(inputs);
    n.outputs = {std::move(output)};
    return n;
  };
  std::vector<Node> out;
  Node y = node(Op::LayerNormalization, {c.proto().input(0), c.proto().input(1)}, c.proto().output(0), "");
  if (c.has_input(2)) y.inputs.push_back(c.proto().input(2));
  y.attributes.axis = axis;
  y.attributes.epsilon = epsilon;
  if (!y.outputs[0].empty()) out.push_back(y);
  const std::string mean_out = c.proto().output_size() > 1 ? c.proto().output(1) : "";
  const std::string inv_out = c.proto().output_size() > 2 ? c.proto().output(2) : "";
  if (mean_out.empty() && inv_out.empty()) return out;
  std::vector<int64_t> kept = x.shape, axes;
  for (int64_t d = axis; d < rank; ++d) kept[size_t(d)] = 1, axes.push_back(d);
  const std::string& in = c.proto().input(0);
  const std::string mean = mean_out.empty() ? value(c.name() + ":mean", kept) : mean_out;
  Node m = node(Op::ReduceMean, {in}, mean, ":mean");
  m.attributes.axes = axes;
  out.push_back(m);
  if (inv_out.empty()) return out;
  out.push_back(node(Op::Sub, {in, mean}, value(c.name() + ":centred", x.shape), ":centred"));
  out.push_back(node(Op::Mul, {c.name() + ":centred", c.name() + ":centred"}, value(c.name() + ":squared", x.shape),
                     ":squared"));
  Node var = node(Op::ReduceMean, {c.name() + ":squared"}, value(c.name() + ":variance", kept), ":variance");
  var.attributes.axes = axes;
  out.push_back(var);
  Value eps;
  eps.name = c.name() + ":epsilon";
  eps.shape = {1};
  eps.is_constant = true;
  eps.data = {epsilon};
  g.values[eps.name] = eps;
  out.push_back(node(Op::Add, {c.name() + ":variance", eps.name}, value(c.name() + ":shifted", kept), ":shifted"));
  out.push_back(node(Op::Sqrt, {c.name() + ":shifted"}, value(c.name() + ":deviation", kept), ":deviation"));
  out.push_back(node(Op::Reciprocal, {c.name() + ":deviation"}, inv_out, ":inverse"));
  return out;
}

// Max, Min and Mean of any number of inputs (numpy broadcasting): a chain of binary
// nodes in input order -- Max/Min, or Add then a division by the count for Mean, as
// ONNX's reference sums -- its partial results named NODE:partialI; one input is a copy.
std::vector<Node> lower_variadic(const NodeContext& c) {
  const std::string& op = c.op();
  const int n = c.inputs();
  if (n < 1) c.bad(fmt::format("{} needs at least one input", op));
  for (int i = 0; i < n; ++i)
    if (!c.has_input(i)) c.bad(fmt::format("input {} of {} is empty", i, op));
  Graph& g = c.graph();
  const Op binary = op == "Max" ? Op::Max : op == "Min" ? Op::Min : Op::Add;
  const bool mean = op == "Mean";
  const std::string& out = c.proto().output(0);
  std::vector<Node> nodes;
  auto emit = [&](Op kind, std::vector<std::string> inputs, const std::string& output, const std::string& suffix) {
    Node node;
    node.name = c.name() + suffix;
    node.op = kind;
    node.inputs = std::move(inputs);
    node.outputs = {output};
    nodes.push_back(node);
  };
  std::string acc = c.proto().input(0);
  std::vector<int64_t> shape = c.input(0).shape;
  if (n == 1) {
    emit(Op::Identity, {acc}, out, "");
    return nodes;
  }
  for (int i = 1; i < n; ++i) {
    shape = broadcast(c, shape, c.input(i).shape);
    const bool last = i + 1 == n && !mean;
    const std::string partial = last ? out : fmt::format("{}:partial{}", c.name(), i);
    if (!last) {
      Value v;
      v.name = partial;
      v.shape = shape;
      g.values[partial] = v;
    }
    emit(binary, {acc, c.proto().input(i)}, partial, last ? "" : fmt::format(":partial{}", i));
    acc = partial;
  }
  if (mean) {
    Value count;
    count.name = c.name() + ":count";
    count.shape = {};  // 0-D: broadcasts to any output, scalars' included
    count.is_constant = true;
    count.data = {static_cast<float>(n)};
    g.values[count.name] = count;
    emit(Op::Div, {acc, count.name}, out, "");
  }
  return nodes;
}

// NegativeLogLikelihoodLoss with constant labels; SoftmaxCrossEntropyLoss as ONNX defines
// it: LogSoftmax over the channels (into its optional log_prob output, else NODE:log_prob),
// then NegativeLogLikelihoodLoss named after the node.
std::vector<Node> lower_loss(const NodeContext& c) {
  const bool softmax = c.op() == "SoftmaxCrossEntropyLoss";
  const Value& x = c.input(0);
  if (x.shape.size() < 2) c.bad(fmt::format("input of shape {}: needs [N, C, ...]", list(x.shape)));
  const int64_t C = x.shape[1];
  const Value& target = c.constant_input(1, softmax ? "the labels" : "the target");
  std::vector<int64_t> want = x.shape;
  want.erase(want.begin() + 1);
  if (target.shape != want)
    c.bad(fmt::format("labels of shape {} for an input of shape {} (want {})", list(target.shape), list(x.shape),
                      list(want)));
  Node loss;
  loss.name = c.name();
  loss.op = Op::NegativeLogLikelihoodLoss;
  loss.outputs = {c.proto().output(0)};
  Attributes& a = loss.attributes;
  const std::string reduction = c.attr_string("reduction", "mean");
  if (reduction == "none") a.loss_reduction = ops::LossReduction::None;
  else if (reduction == "sum") a.loss_reduction = ops::LossReduction::Sum;
  else if (reduction == "mean") a.loss_reduction = ops::LossReduction::Mean;
  else c.bad_attr("reduction", reduction, "one of none, sum, mean");
  a.has_ignore_index = c.attr("ignore_index") != nullptr;
  a.ignore_index = c.attr_int("ignore_index", 0);
  a.indices = integers_of(target);
  for (size_t i = 0; i < a.indices.size(); ++i) {
    const int64_t label = a.indices[i];
    if ((label < 0 || label >= C) && !(a.has_ignore_index && label == a.ignore_index))
      c.bad(fmt::format("label {} at position {} outside [0, {}){}", label, i, C,
                        a.has_ignore_index ? fmt::format(" and not ignore_index {}", a.ignore_index) : ""));
  }
  if (c.has_input(2)) {
    const Value& weight = c.input(2);
    if (weight.shape != std::vector<int64_t>{C})
      c.bad(fmt::format("class weights of shape {} for {} classes", list(weight.shape), C));
  }
  std::vector<Node> out;
  std::string scores = c.proto().input(0);
  if (softmax) {
    Node log_softmax;
    log_softmax.name = c.name() + ":log_prob";
    log_softmax.op = Op::LogSoftmax;
    log_softmax.inputs = {scores};
    const bool kept = c.proto().output_size() > 1 && !c.proto().output(1).empty();
    scores = kept ? c.proto().output(1) : c.name() + ":log_prob";
    if (!kept) {
      Value v;
      v.name = scores;
      v.shape = x.shape;
      c.graph().values[scores] = v;
    }
    log_softmax.outputs = {scores};
    log_softmax.attributes.axis = 1;
    out.push_back(log_softmax);
  }
  loss.inputs = {scores};
  if (c.has_input(2)) loss.inputs.push_back(c.proto().input(2));
  out.push_back(loss);
  return out;
}

// InstanceNormalization: each (image, channel) normalised over its pixels, then scaled
// and shifted per channel -- a LayerNormalization over axes [2, rank) without scale,
// then Mul and Add of the scale and bias viewed as [C, 1, ...] (so they train as any
// per-channel Mul / Add parameter does, under their own names, even with one channel:
// Graph::parameter_constants).
std::vector<Node> lower_instance_norm(const NodeContext& c) {
  const Value& x = c.input(0);
  const size_t rank = x.shape.size();
  if (rank < 3) c.unsupported(fmt::format("input of rank {} (N, C and at least one spatial axis)", rank));
  Graph& g = c.graph();
  for (int i = 1; i <= 2; ++i) {
    const std::string& name = c.proto().input(i);
    c.constant_input(i, i == 1 ? "InstanceNormalization's scale" : "InstanceNormalization's bias");
    if (c.input(i).elements() != x.shape[1])
      c.bad(fmt::format("input {} of {} values for {} channels", i, c.input(i).elements(), x.shape[1]));
    g.values.at(name).shape.assign(rank - 1, 1);
    g.values.at(name).shape[0] = x.shape[1];
    g.parameter_constants.insert(name);
  }
  const std::string normalised = c.name() + ":normalised", scaled = c.name() + ":scaled";
  for (const std::string& name : {normalised, scaled}) {
    Value v;
    v.name = name;
    v.shape = x.shape;
    g.values[name] = v;
  }
  std::vector<Node> out(3);
  out[0].name = c.name();
  out[0].op = Op::LayerNormalization;
  out[0].inputs = {c.proto().input(0)};  // no scale: one
  out[0].outputs = {normalised};
  out[0].attributes.axis = 2;
  out[0].attributes.epsilon = c.attr_float("epsilon", 1e-5f);
  out[1].name = c.name() + ":scale";
  out[1].op = Op::Mul;
  out[1].inputs = {normalised, c.proto().input(1)};
  out[1].outputs = {scaled};
  out[2].name = c.name() + ":bias";
  out[2].op = Op::Add;
  out[2].inputs = {scaled, c.proto().input(2)};
  out[2].outputs = {c.proto().output(0)};
  return out;
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
      {"Mul", Op::Mul}, {"Div", Op::Div}, {"Pow", Op::Pow}, {"PRelu", Op::PRelu}, {"Sum", Op::Sum}, {"Identity", Op::Identity}};
  if (auto it = simple.find(op); it != simple.end()) {
    node.op = it->second;
    if (node.op == Op::PRelu && c.graph().opset < 7 && c.input(0).shape.size() > 2 && c.input(1).shape.size() == 1 &&
        c.input(1).shape[0] == c.input(0).shape[1] && c.graph().is_float_constant(c.proto().input(1))) {
      // Before opset 7 a 1-D slope of C values is per channel, not broadcast from the
      // right: its data as [C, 1, ...] says the same in numpy's terms.
      Value& slope = c.graph().values.at(c.proto().input(1));
      slope.shape.resize(c.input(0).shape.size() - 1, 1);
    }
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
  if (op == "ConvTranspose") {
    node.op = Op::ConvTranspose;
    lower_conv_transpose(c, a);
    return node;
  }
  if (op == "Cast" || op == "CastLike") {
    // Of an activation (a constant folds): float32 to float32 only, which is a copy
    // (LayerNormalization's expanded form casts its statistics to their stash type).
    const int to = op == "Cast" ? static_cast<int>(c.attr_int("to", 0))
                                : (c.input(1).is_int64 ? onnx::TensorProto_DataType_INT64 : onnx::TensorProto_DataType_FLOAT);
    if (to != onnx::TensorProto_DataType_FLOAT)
      c.unsupported(fmt::format("{} of a value that is not a constant to dtype {} (float32 only)", op,
                                onnx::TensorProto_DataType_Name(onnx::TensorProto_DataType(to))));
    node.op = Op::Identity;
    node.inputs.resize(1);
    return node;
  }
  if (op == "Gather") {
    // Of an activation (a constant folds) by constant indices.
    node.op = Op::Gather;
    const Value& x = c.input(0);
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    if (rank == 0) c.bad("Gather of a scalar");
    a.axis = normalise_axis(c, c.attr_int("axis", 0), rank, "axis");
    const int64_t extent = x.shape[size_t(a.axis)];
    for (int64_t i : integers_of(c.constant_input(1, "Gather's indices"))) {
      if (i < -extent || i >= extent) c.bad(fmt::format("index {} out of range for an axis of {}", i, extent));
      a.indices.push_back(i < 0 ? i + extent : i);
    }
    node.inputs.resize(1);
    return node;
  }
  if (op == "DepthToSpace" || op == "SpaceToDepth") {
    node.op = op == "DepthToSpace" ? Op::DepthToSpace : Op::SpaceToDepth;
    const Value& x = c.input(0);
    if (x.shape.size() != 4) c.unsupported(fmt::format("input of rank {} ({} takes N, C, H, W)", x.shape.size(), op));
    if (!c.attr("blocksize")) c.bad("attribute 'blocksize' missing");
    a.blocksize = c.attr_int("blocksize", 0);
    if (a.blocksize < 1) c.bad_attr("blocksize", std::to_string(a.blocksize), "must be positive");
    const std::string mode = node.op == Op::DepthToSpace ? c.attr_string("mode", "DCR") : "DCR";
    if (mode != "DCR" && mode != "CRD") c.bad_attr("mode", "'" + mode + "'", "expected DCR or CRD");
    a.crd = mode == "CRD";
    const int64_t b = a.blocksize;
    if (node.op == Op::DepthToSpace && x.shape[1] % (b * b) != 0)
      c.bad(fmt::format("{} channels are not a multiple of blocksize^2 = {}", x.shape[1], b * b));
    if (node.op == Op::SpaceToDepth && (x.shape[2] % b != 0 || x.shape[3] % b != 0))
      c.bad(fmt::format("{}x{} pixels are not a multiple of blocksize {}", x.shape[2], x.shape[3], b));
    return node;
  }
  if (op == "Resize" || op == "Upsample") {
    node.op = Op::Resize;
    lower_resize(c, opset, a);
    node.inputs.resize(1);
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
  static const std::map<std::string, Op> functions = {
      {"HardSigmoid", Op::HardSigmoid}, {"HardSwish", Op::HardSwish}, {"Tanh", Op::Tanh}, {"Exp", Op::Exp},
      {"Log", Op::Log}, {"Sqrt", Op::Sqrt}, {"Neg", Op::Neg}, {"Abs", Op::Abs}, {"Softplus", Op::Softplus},
      {"Elu", Op::Elu}, {"Erf", Op::Erf}, {"Reciprocal", Op::Reciprocal}, {"Selu", Op::Selu}, {"Sin", Op::Sin},
      {"Cos", Op::Cos}, {"Floor", Op::Floor}, {"Ceil", Op::Ceil}};
  if (auto it = functions.find(op); it != functions.end()) {
    node.op = it->second;
    if (node.op == Op::HardSigmoid) {
      a.alpha = c.attr_float("alpha", 0.2f);
      a.beta = c.attr_float("beta", 0.5f);
    } else if (node.op == Op::HardSwish) {  // no attributes: HardSigmoid's with alpha 1/6
      a.alpha = 1.0f / 6.0f;
      a.beta = 0.5f;
    } else if (node.op == Op::Elu) {
      a.alpha = c.attr_float("alpha", 1.0f);
    } else if (node.op == Op::Selu) {  // gamma in beta
      a.alpha = c.attr_float("alpha", 1.67326319217681884765625f);
      a.beta = c.attr_float("gamma", 1.05070102214813232421875f);
    }
    return node;
  }
  if (op == "Clip") {
    node.op = Op::Clip;
    if (c.has_input(1)) a.clip_min = c.constant_input(1, "Clip's min").data.at(0);
    if (c.has_input(2)) a.clip_max = c.constant_input(2, "Clip's max").data.at(0);
    node.inputs.resize(1);
    return node;
  }
  if (op == "Slice") {
    node.op = Op::Slice;
    const SliceWindow w = slice_window(c, c.input(0).shape);
    if (w.shape != c.output_value(0).shape)
      c.bad(fmt::format("Slice's window {} differs from the inferred shape {}", list(w.shape), list(c.output_value(0).shape)));
    a.slice_first = w.first;
    a.slice_step = w.step;
    node.inputs.resize(1);
    return node;
  }
  static const std::map<std::string, Op> reductions = {
      {"ReduceMean", Op::ReduceMean}, {"ReduceSum", Op::ReduceSum}, {"ReduceMax", Op::ReduceMax},
      {"ReduceL2", Op::ReduceL2}, {"ReduceMin", Op::ReduceMin}, {"ReduceProd", Op::ReduceProd},
      {"ReduceSumSquare", Op::ReduceSumSquare}, {"ReduceL1", Op::ReduceL1}, {"ReduceLogSum", Op::ReduceLogSum},
      {"ReduceLogSumExp", Op::ReduceLogSumExp}};
  if (auto it = reductions.find(op); it != reductions.end()) {
    node.op = it->second;
    const int64_t rank = static_cast<int64_t>(c.input(0).shape.size());
    // Opset 13 made ReduceSum's axes an input (the others follow at 18); empty axes
    // reduce everything unless noop_with_empty_axes.
    std::vector<int64_t> axes = c.has_input(1) ? integers_of(c.constant_input(1, "the axes")) : c.attr_ints("axes", {});
    if (axes.empty() && c.attr_int("noop_with_empty_axes", 0) != 0) {
      node.op = Op::Identity;
      node.inputs.resize(1);
      return node;
    }
    axes = normalised_axes(c, axes, rank, "axes");
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    a.axes = axes;
    a.keepdims = c.attr_int("keepdims", 1) != 0;
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
    // ONNX's shape inference does not check this when the target shape is all explicit.
    if (c.output_value(0).elements() != c.input(0).elements())
      c.bad(fmt::format("{} to shape {}: {} elements into {}", op, list(a.shape), c.input(0).elements(),
                        c.output_value(0).elements()));
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
    a.pad_amounts = integers_of(c.constant_input(1, "Pad's pads"));
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
  if (is_foldable_op(op))
    c.unsupported(fmt::format("op {} on a value that is not a constant (convgen evaluates {} at import, on constants "
                              "only)", op, op));
  c.unsupported(fmt::format("op {}{}", op, c.proto().domain().empty() ? "" : " of domain " + c.proto().domain()));
}

}  // namespace

bool is_lowered_op(const std::string& op) {
  static const std::set<std::string> ops = {
      "Conv", "ConvTranspose", "Gather", "InstanceNormalization", "PRelu", "DepthToSpace", "SpaceToDepth", "Resize", "Upsample", "LayerNormalization", "Cast", "CastLike", "Relu", "LeakyRelu", "Clip", "Sigmoid", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
      "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Pow", "Sum", "Concat", "Flatten", "Reshape", "Unsqueeze",
      "Squeeze", "Transpose", "BatchNormalization", "LRN", "Pad", "Dropout", "Identity", "Softmax", "LogSoftmax",
      "Constant", "HardSigmoid", "HardSwish", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Softplus", "Elu", "Erf", "ReduceMean",
      "ReduceSum", "ReduceMax", "ReduceL2", "Slice", "Split", "Reciprocal", "Selu", "Sin", "Cos", "Floor", "Ceil",
      "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "Max", "Min", "Mean", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"};
  return ops.count(op) > 0;
}

void lower_nodes(const onnx::GraphProto& graph, int64_t opset, Graph& g) {
  int index = 0;
  for (const auto& n : graph.node()) {
    NodeContext c(n, index++, g);
    if (fold_node(c, g)) continue;
    std::vector<Node> lowered;
    if (n.op_type() == "Split") lowered = lower_split(c, static_cast<int>(opset));
    else if (n.op_type() == "LayerNormalization") lowered = lower_layer_norm(c);
    else if (n.op_type() == "InstanceNormalization") lowered = lower_instance_norm(c);
    else if (n.op_type() == "Max" || n.op_type() == "Min" || n.op_type() == "Mean") lowered = lower_variadic(c);
    else if (n.op_type() == "NegativeLogLikelihoodLoss" || n.op_type() == "SoftmaxCrossEntropyLoss")
      lowered = lower_loss(c);
    else lowered.push_back(lower_node(c, static_cast<int>(opset)));
    for (int i = 0; i < n.output_size(); ++i)
      if (!n.output(i).empty() && c.output_value(i).is_int64)
        c.unsupported(fmt::format("int64 output '{}' (float32 only)", n.output(i)));
    for (Node& node : lowered) g.nodes.push_back(std::move(node));
  }
  for (const std::string& out : g.outputs) {
    auto it = g.values.find(out);
    if (it == g.values.end()) throw Error(ExitCode::BadModel, fmt::format("{}: bad model: output '{}' has no known shape", g.source, out));
  }
}

}  // namespace convgen::model
