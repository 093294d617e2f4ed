#include "generator/model/plan.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "runtime/ops/ops.h"
#include "schedules/errors.h"

namespace convgen::model {

int64_t PlanBuffer::elements() const {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

int conv_bias_input(const PlanStep& s) { return s.inputs.size() > 2 ? s.inputs[2] : -1; }
int conv_residual_input(const PlanStep& s) { return s.inputs.size() > 3 ? s.inputs[3] : -1; }

namespace {

constexpr int64_t kAlign = 16;  // floats: 64-byte aligned places

int64_t aligned(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool can_be_channels_last(const std::vector<int64_t>& shape) { return shape.size() == 3 || shape.size() == 4; }

// Elements per (image, channel): the product of the dimensions after the first two.
int64_t pixels_per_image(const std::vector<int64_t>& shape) {
  int64_t pixels = 1;
  for (size_t d = 2; d < shape.size(); ++d) pixels *= shape[d];
  return pixels;
}

class Planner {
 public:
  Planner(const Graph& g, const std::vector<PlannedKernel>& kernels) : g_(g) {
    for (const auto& k : kernels)
      for (const auto& layer : k.layers) kernel_of_[layer] = &k;
  }

  Plan run() {
    for (const auto& name : g_.inputs) plan_.inputs.push_back(define(name, g_.value(name).shape, false));
    for (const Node& n : g_.nodes) plan_node(n);
    for (const auto& name : g_.outputs) plan_.outputs.push_back(in_layout(buffer_of(name), false, "output layout"));
    place();
    return plan_;
  }

 private:
  int define(const std::string& value, const std::vector<int64_t>& shape, bool channels_last) {
    PlanBuffer b;
    b.value = value;
    b.shape = shape;
    b.channels_last = channels_last && can_be_channels_last(shape);
    plan_.buffers.push_back(b);
    const int id = static_cast<int>(plan_.buffers.size()) - 1;
    by_value_[value] = id;
    return id;
  }

  int buffer_of(const std::string& value) {
    auto it = by_value_.find(value);
    if (it != by_value_.end()) return it->second;
    const Value& v = g_.value(value);
    if (!v.is_constant) throw Error(ExitCode::Internal, fmt::format("plan: value '{}' used before it is computed", value));
    const int id = define(value, v.shape, false);
    plan_.buffers[id].constant = true;
    return id;
  }

  // The constant `weights` packed into kernel k's panels: one buffer per (weights, kernel).
  int packed_weights(const std::string& weights, const PlannedKernel& k) {
    const std::string name = weights + ".panels." + k.name;
    auto it = by_value_.find(name);
    if (it != by_value_.end()) return it->second;
    const int id = define(name, {k.weight_panels.floats}, false);
    PlanBuffer& b = plan_.buffers[id];
    b.constant = true;
    b.packed_from = weights;
    b.panels = k.weight_panels;
    return id;
  }

  int step(StepKind kind, const Node& n, std::vector<int> inputs, int output) {
    PlanStep s;
    s.kind = kind;
    s.node = n.name;
    s.op = n.op;
    s.attributes = n.attributes;
    s.inputs = std::move(inputs);
    s.output = output;
    plan_.steps.push_back(s);
    return output;
  }

  // A relabelling node (n.outputs[0] = n.inputs[0] under `shape`, in the given layout)
  // whose input nothing else reads and whose memory order it keeps costs no copy: its
  // output becomes an alias of the input's buffer. Same order: both dense, both
  // channels-last of one shape, or channels-last of one pixel per image read as dense
  // (a global pool's [N, C, 1, 1] before Flatten: the GlobalAveragePool-Flatten-Gemm tail).
  bool relabel_in_place(const Node& n, int x, const std::vector<int64_t>& shape, bool channels_last) {
    const PlanBuffer& b = plan_.buffers[x];
    if (b.constant || b.slice_of >= 0 || std::count(plan_.inputs.begin(), plan_.inputs.end(), x) > 0) return false;
    if (g_.readers_of(n.inputs[0]).size() != 1 || g_.is_output(n.inputs[0])) return false;
    const int64_t pixels = pixels_per_image(b.shape);
    const bool y_channels_last = channels_last && can_be_channels_last(shape);
    const bool same_order = (!b.channels_last && !y_channels_last) ||
                            (b.channels_last && y_channels_last && b.shape == shape) ||
                            (b.channels_last && !y_channels_last && pixels == 1);
    if (!same_order) return false;
    plan_.buffers[define(n.outputs[0], shape, channels_last)].alias_of = x;
    return true;
  }

  // The buffer holding `id`'s values in the wanted layout: itself, or a copy converted
  // by an Identity step named after the node that needs it.
  int in_layout(int id, bool channels_last, const std::string& for_node) {
    const PlanBuffer b = plan_.buffers[id];
    const bool want = channels_last && can_be_channels_last(b.shape);
    if (b.channels_last == want) return id;
    const std::string name = b.value + (want ? ".channels_last" : ".dense");
    auto it = by_value_.find(name);
    if (it != by_value_.end()) return it->second;
    const int out = define(name, b.shape, want);
    const int64_t pixels = pixels_per_image(b.shape);
    if (!b.constant && b.shape.size() >= 2 && (pixels == 1 || b.shape[1] == 1)) {
      plan_.buffers[out].alias_of = id;  // one pixel or one channel: the same memory order
      return out;
    }
    Node copy;
    copy.name = for_node;
    step(StepKind::Copy, copy, {id}, out);
    return out;
  }

  void plan_node(const Node& n) {
    const std::vector<int64_t>& out_shape = g_.value(n.outputs[0]).shape;
    auto in = [&](size_t i) { return buffer_of(n.inputs[i]); };
    auto layout_of = [&](int id) { return plan_.buffers[id].channels_last; };
    switch (n.op) {
      case Op::Conv:
      case Op::ConvTranspose: {
        const int x = in_layout(in(0), true, n.name);
        const PlannedKernel* k = kernel_of_.at(n.name);
        const int w = k->weight_panels.empty() ? in_layout(in(1), false, n.name) : packed_weights(n.inputs[1], *k);
        std::vector<int> ins = {x, w};
        const bool bias = n.inputs.size() > 2 && !n.inputs[2].empty();
        const bool residual = n.inputs.size() > 3 && !n.inputs[3].empty();
        if (bias || residual) ins.push_back(bias ? in(2) : -1);
        if (residual) ins.push_back(in_layout(in(3), true, n.name));  // read as the output is written
        int y;
        if (!n.attributes.slice_of.empty()) {
          // Its slice of the Concat's output (defined here by its first writer).
          auto parent = by_value_.find(n.attributes.slice_of);
          const int p = parent != by_value_.end() ? parent->second
                                                  : define(n.attributes.slice_of, g_.value(n.attributes.slice_of).shape, true);
          y = define(n.outputs[0], out_shape, true);
          plan_.buffers[y].slice_of = p;
          plan_.buffers[y].slice_channel = n.attributes.slice_channel;
        } else {
          y = define(n.outputs[0], out_shape, true);
        }
        step(n.op == Op::Conv ? StepKind::Conv : StepKind::ConvTranspose, n, ins, y);
        PlanStep& s = plan_.steps.back();
        s.kernel = k->name;
        s.descriptor = k->descriptor;
        return;
      }
      case Op::Relu: case Op::LeakyRelu: case Op::Clip: case Op::Sigmoid: case Op::HardSigmoid: case Op::HardSwish:
      case Op::Tanh: case Op::Exp: case Op::Log: case Op::Sqrt: case Op::Neg: case Op::Abs: case Op::Softplus:
      case Op::Elu: case Op::Erf: case Op::Reciprocal: case Op::Selu: case Op::Sin: case Op::Cos: case Op::Floor:
      case Op::Ceil: {
        const int x = in(0);
        step(StepKind::Unary, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::Identity:
      case Op::Dropout: {
        const int x = in(0);
        if (relabel_in_place(n, x, out_shape, layout_of(x))) return;
        step(StepKind::Copy, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div:
      case Op::Pow:
      case Op::PRelu:
      case Op::Max:
      case Op::Min: {
        const int a = in(0), b = in(1);
        step(StepKind::Binary, n, {a, b}, define(n.outputs[0], out_shape, binary_layout(a, b, out_shape)));
        return;
      }
      case Op::Sum: {
        int acc = in(0);
        if (n.inputs.size() == 1) {
          step(StepKind::Copy, n, {acc}, define(n.outputs[0], out_shape, layout_of(acc)));
          return;
        }
        Node add = n;
        add.op = Op::Add;
        for (size_t i = 1; i < n.inputs.size(); ++i) {
          const int b = in(i);
          const std::string name = i + 1 == n.inputs.size() ? n.outputs[0] : fmt::format("{}.partial{}", n.outputs[0], i);
          acc = step(StepKind::Binary, add, {acc, b}, define(name, out_shape, binary_layout(acc, b, out_shape)));
        }
        return;
      }
      case Op::MaxPool:
      case Op::AveragePool:
      case Op::GlobalAveragePool:
      case Op::GlobalMaxPool:
      case Op::BatchNormalization:
      case Op::LRN:
      case Op::Pad: {
        const int x = in(0);
        std::vector<int> ins = {x};
        for (size_t i = 1; i < n.inputs.size(); ++i) ins.push_back(in(i));
        const StepKind kind = n.op == Op::MaxPool             ? StepKind::MaxPool
                              : n.op == Op::AveragePool       ? StepKind::AveragePool
                              : n.op == Op::BatchNormalization ? StepKind::BatchNorm
                              : n.op == Op::LRN               ? StepKind::LRN
                              : n.op == Op::Pad               ? StepKind::Pad
                                                              : StepKind::GlobalPool;
        step(kind, n, ins, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::Concat: {
        if (n.attributes.written_in_place) return;  // its Convs wrote it: nothing to copy
        std::vector<int> ins;
        bool all_cl = true;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          ins.push_back(in(i));
          all_cl = all_cl && layout_of(ins.back());
        }
        step(StepKind::Concat, n, ins, define(n.outputs[0], out_shape, all_cl));
        return;
      }
      case Op::Flatten:
      case Op::Reshape:
        if (relabel_in_place(n, in(0), out_shape, false)) return;
        step(StepKind::Copy, n, {in(0)}, define(n.outputs[0], out_shape, false));
        return;
      case Op::Transpose:
        step(StepKind::Transpose, n, {in(0)}, define(n.outputs[0], out_shape, false));
        return;
      case Op::Gemm: {
        std::vector<int> ins = {in_layout(in(0), false, n.name), in_layout(in(1), false, n.name)};
        if (n.inputs.size() > 2 && !n.inputs[2].empty()) ins.push_back(in_layout(in(2), false, n.name));
        step(StepKind::Gemm, n, ins, define(n.outputs[0], out_shape, false));
        return;
      }
      case Op::MatMul:
        step(StepKind::MatMul, n, {in_layout(in(0), false, n.name), in_layout(in(1), false, n.name)},
             define(n.outputs[0], out_shape, false));
        return;
      case Op::ReduceMean: case Op::ReduceSum: case Op::ReduceMax: case Op::ReduceL2: case Op::ReduceMin:
      case Op::ReduceProd: case Op::ReduceSumSquare: case Op::ReduceL1: case Op::ReduceLogSum: case Op::ReduceLogSumExp:
        step(StepKind::Reduce, n, {in(0)}, define(n.outputs[0], out_shape, false));
        return;
      case Op::Gather: {
        // Channels of an activation (a shuffle) stay in its layout; other axes read dense.
        const int x = in(0);
        if (ops::gather_layouts_supported(plan_.buffers[x].shape, n.attributes.axis, out_shape)) {
          step(StepKind::Gather, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
          return;
        }
        step(StepKind::Gather, n, {in_layout(x, false, n.name)}, define(n.outputs[0], out_shape, false));
        return;
      }
      case Op::DepthToSpace:
      case Op::SpaceToDepth: {
        const int x = in(0);
        step(StepKind::DepthSpace, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::Resize: {
        const int x = in(0);
        step(StepKind::Resize, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::Slice: {
        // Any window reads through strides: the output keeps the input's layout (Split's
        // channel halves before a Conv need no conversion).
        const int x = in(0);
        step(StepKind::Slice, n, {x}, define(n.outputs[0], out_shape, layout_of(x)));
        return;
      }
      case Op::LayerNormalization: {
        // Absent scale or bias: -1.
        std::vector<int> ins = {in_layout(in(0), false, n.name)};
        for (size_t i = 1; i <= 2; ++i)
          ins.push_back(i < n.inputs.size() && !n.inputs[i].empty() ? in_layout(in(i), false, n.name) : -1);
        step(StepKind::LayerNorm, n, ins, define(n.outputs[0], out_shape, false));
        return;
      }
      case Op::NegativeLogLikelihoodLoss: {
        const int weight = n.inputs.size() > 1 && !n.inputs[1].empty() ? in_layout(in(1), false, n.name) : -1;
        step(StepKind::NllLoss, n, {in_layout(in(0), false, n.name), weight}, define(n.outputs[0], out_shape, false));
        return;
      }
      case Op::Softmax:
      case Op::LogSoftmax:
        step(StepKind::Softmax, n, {in_layout(in(0), false, n.name)}, define(n.outputs[0], out_shape, false));
        return;
      case Op::WithinChannelLRN:
        throw Error(ExitCode::Internal, fmt::format("node '{}': a training-only fused op reached the inference plan",
                                                    n.name));
    }
  }

  bool binary_layout(int a, int b, const std::vector<int64_t>& out_shape) const {
    const PlanBuffer& x = plan_.buffers[a];
    const PlanBuffer& y = plan_.buffers[b];
    return can_be_channels_last(out_shape) &&
           ((x.channels_last && x.shape == out_shape) || (y.channels_last && y.shape == out_shape));
  }

  // Offsets: constants packed in order; activations by lifetime, first fit.
  void place() {
    const int nb = static_cast<int>(plan_.buffers.size());
    const int end = static_cast<int>(plan_.steps.size());
    std::vector<int> first(nb, -1), last(nb, -1);
    for (int id : plan_.inputs) first[id] = last[id] = -1;
    // A slice lives in its parent and an alias is its buffer: their writes and reads are
    // the owner's.
    auto owner = [&](int id) {
      for (;;) {
        const PlanBuffer& b = plan_.buffers[id];
        if (b.slice_of >= 0) id = b.slice_of;
        else if (b.alias_of >= 0) id = b.alias_of;
        else return id;
      }
    };
    for (int s = 0; s < end; ++s) {
      const PlanStep& st = plan_.steps[s];
      for (int i : st.inputs)
        if (i >= 0) last[owner(i)] = std::max(last[owner(i)], s);
      const int o = owner(st.output);
      if (first[o] < 0) first[o] = s;  // steps run in order: its first writer
      last[o] = std::max(last[o], s);
    }
    for (int id : plan_.outputs) last[owner(id)] = end;
    for (int id : plan_.inputs) first[id] = -1;
    std::vector<int> placed;
    for (int id = 0; id < nb; ++id) {
      PlanBuffer& b = plan_.buffers[id];
      if (b.slice_of >= 0 || b.alias_of >= 0) continue;  // placed with its owner, below
      if (b.constant) {
        b.offset = plan_.weights_floats;
        plan_.weights_floats += aligned(b.elements());
        continue;
      }
      // Lowest offset free over [first, last] among placed buffers alive then.
      std::vector<std::pair<int64_t, int64_t>> busy;
      for (int o : placed)
        if (!(last[o] < first[id] || last[id] < first[o]))
          busy.emplace_back(plan_.buffers[o].offset, plan_.buffers[o].offset + aligned(plan_.buffers[o].elements()));
      std::sort(busy.begin(), busy.end());
      int64_t at = 0;
      const int64_t size = aligned(b.elements());
      for (const auto& [lo, hi] : busy) {
        if (at + size <= lo) break;
        at = std::max(at, hi);
      }
      b.offset = at;
      plan_.arena_floats = std::max(plan_.arena_floats, at + size);
      placed.push_back(id);
    }
    for (int id = 0; id < nb; ++id) {
      PlanBuffer& b = plan_.buffers[id];
      if (b.slice_of >= 0 || b.alias_of >= 0) b.offset = plan_.buffers[owner(id)].offset;
      if (b.slice_of >= 0) b.offset += b.slice_channel;
    }
  }

  const Graph& g_;
  std::map<std::string, const PlannedKernel*> kernel_of_;
  std::map<std::string, int> by_value_;
  Plan plan_;
};

}  // namespace

Plan make_plan(const Graph& g, const std::vector<PlannedKernel>& kernels) { return Planner(g, kernels).run(); }

std::vector<float> weights_blob(const Graph& g, const Plan& p) {
  std::vector<float> blob(static_cast<size_t>(p.weights_floats), 0.0f);
  for (const PlanBuffer& b : p.buffers) {
    if (!b.constant) continue;
    if (!b.panels.empty()) {
      pack_weight_panels(b.panels, g.value(b.packed_from).data.data(), blob.data() + b.offset);
      continue;
    }
    const Value& v = g.value(b.value);
    if (v.is_int64) {
      for (size_t i = 0; i < v.int64_data.size(); ++i) blob[b.offset + i] = static_cast<float>(v.int64_data[i]);
    } else {
      std::copy(v.data.begin(), v.data.end(), blob.begin() + b.offset);
    }
  }
  return blob;
}

}  // namespace convgen::model
