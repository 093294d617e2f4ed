// The per-operator forward and backward dispatch of one micro-batch.
#include "runtime/train/trainer_impl.h"

#include <algorithm>

#include <fmt/format.h>

#include "runtime/graph/operators.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

// A dense tensor of rank 2 or more as the matrix of its rows: [d0 * ... * d(r-2), d(r-1)].
template <typename V>
V rows(const V& v) {
  if (v.shape.size() <= 2) return v;
  const int64_t last = v.shape.back();
  return {v.data, {v.elements() / last, last}, false};
}

// LayerNormalization and Gather (but along the channels) work on dense rows; a value a
// convolution reads or writes is channels-last. `v` itself when dense, else its dense copy in `scratch`.
ConstView dense(const ConstView& v, std::vector<float>& scratch) {
  if (!v.channels_last) return v;
  scratch.resize(static_cast<size_t>(v.elements()));
  copy_layout(v, View{scratch.data(), v.shape, false});
  return {scratch.data(), v.shape, false};
}

// Runs `compute(out)` on a dense destination of to's shape -- `to` itself when it is dense
// and written, else `scratch` -- then stores that into `to` in its layout, or adds it.
template <typename F>
void into(const View& to, bool accumulate, std::vector<float>& scratch, F compute) {
  if (!to.channels_last && !accumulate) return compute(to);
  scratch.resize(static_cast<size_t>(to.elements()));
  const View out{scratch.data(), to.shape, false};
  compute(out);
  if (!accumulate) return copy_layout(out, to);
  if (to.channels_last) {
    std::vector<float> laid(scratch.size());
    copy_layout(out, View{laid.data(), to.shape, true});
    for (size_t i = 0; i < laid.size(); ++i) to.data[i] += laid[i];
    return;
  }
  for (size_t i = 0; i < scratch.size(); ++i) to.data[i] += scratch[i];
}

}  // namespace

void Trainer::Impl::forward(Slot& slot, size_t node_index, bool train) {
  const int64_t first_sample = slot.first_sample;
  const Node& n = tg.graph.nodes[node_index];
  const Attributes& a = n.attributes;
  auto x = [&](size_t i) -> ConstView { return view(slot, id(n.inputs[i])); };
  const View y = view(slot, id(n.outputs[0]));
  // The element-wise functions and the reductions: one operator each, its op a parameter.
  if (is_unary(n.op)) return ops::unary(x(0), y, unary_of(n.op), a.alpha, a.clip_min, a.clip_max, a.beta);
  if (is_reduction(n.op)) return ops::reduce(x(0), a.axes, reduce_of(n.op), y);
  switch (n.op) {
    case Op::Conv:
    case Op::ConvTranspose: {
      TrainConv& k = *kernels.at({node_index, slot.size});
      const ConvLayer& layer = conv_layers.at(node_index);
      const float* bias = n.inputs.size() > 2 && !n.inputs[2].empty() ? x(2).data : nullptr;
      k.forward(x(0).data, weights_for(node_index, k, kForwardPanels, layer.crop ? layer.cropped_w.data() : x(1).data),
                bias, y.data);
      return;
    }
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::PRelu: case Op::Max: case Op::Min:
      ops::binary(x(0), x(1), y, binary_of(n.op));
      return;
    case Op::MaxPool:
      if (!train) {
        ops::max_pool(x(0), window_of(a), y);
        if (a.fused_relu) ops::unary(y, y, ops::Unary::Relu);
        return;
      }
      slot.argmax[node_index].resize(static_cast<size_t>(y.elements()));
      ops::max_pool_forward_argmax(x(0), window_of(a), y, slot.argmax[node_index].data(), a.fused_relu);
      return;
    case Op::AveragePool: ops::average_pool(x(0), window_of(a), a.count_include_pad, y); return;
    case Op::GlobalAveragePool: ops::global_pool(x(0), false, y); return;
    case Op::Slice: ops::slice(x(0), a.slice_first, a.slice_step, y); return;
    case Op::Transpose: ops::transpose(x(0), a.perm, y); return;
    case Op::Resize: ops::resize(x(0), a.resize, y); return;
    case Op::DepthToSpace: case Op::SpaceToDepth:
      ops::depth_space(x(0), y, a.blocksize, a.crd, n.op == Op::DepthToSpace, false);
      return;
    case Op::Gather: {
      if (ops::gather_layouts_supported(x(0).shape, a.axis, y.shape)) return ops::gather(x(0), a.axis, a.indices, y);
      thread_local std::vector<float> in_scratch, out_scratch;
      const ConstView in = dense(x(0), in_scratch);
      return into(y, false, out_scratch, [&](const View& out) { ops::gather(in, a.axis, a.indices, out); });
    }
    case Op::LayerNormalization: {
      const bool scale = n.inputs.size() > 1 && !n.inputs[1].empty(), bias = n.inputs.size() > 2 && !n.inputs[2].empty();
      thread_local std::vector<float> in_scratch, out_scratch;
      const ConstView in = dense(x(0), in_scratch);
      return into(y, false, out_scratch, [&](const View& out) {
        ops::layer_norm(in, scale ? x(1).data : nullptr, scale ? x(1).elements() : 0, bias ? x(2).data : nullptr,
                        bias ? x(2).elements() : 0, a.axis, a.epsilon, out);
      });
    }
    case Op::Gemm: {
      const ConstView c = n.inputs.size() > 2 && !n.inputs[2].empty() ? x(2) : ConstView{};
      ops::gemm_1t(rows(x(0)), x(1), c.data ? &c : nullptr, a.alpha, a.beta, a.trans_a, a.trans_b, rows(y));
      return;
    }
    case Op::MatMul: ops::gemm_1t(rows(x(0)), x(1), nullptr, 1.0f, 0.0f, false, false, rows(y)); return;
    case Op::Concat: {
      std::vector<ConstView> xs;
      for (size_t i = 0; i < n.inputs.size(); ++i) xs.push_back(x(i));
      ops::concat(xs, a.axis, y);
      return;
    }
    case Op::Pad: ops::pad(x(0), a.pad_amounts, a.pad_value, y); return;
    case Op::LRN: ops::lrn(x(0), a.size, a.alpha, a.beta, a.lrn_bias, y); return;
    case Op::WithinChannelLRN: {
      // s (x's size) in the node's mask buffer, for the backward.
      std::vector<float>& kept = slot.masks[node_index];
      kept.resize(static_cast<size_t>(y.elements()));
      ops::within_channel_lrn_forward(x(0), a.size, a.alpha, a.lrn_bias, a.beta, y, kept.data());
      return;
    }
    case Op::Dropout: {
      if (!train) return copy_layout(x(0), y);
      std::vector<float>& mask = slot.masks[node_index];
      mask.resize(static_cast<size_t>(y.elements()));
      ops::dropout_forward(x(0), a.ratio, options.seed, ops::dropout_stream(n.outputs[0]), steps, first_sample, y,
                           mask.data());
      return;
    }
    case Op::BatchNormalization:
      if (!train) {
        ops::batch_norm(x(0), x(1), x(2), x(3), x(4), a.epsilon, y);
        if (a.fused_relu) ops::unary(y, y, ops::Unary::Relu);
        if (a.fused_clip) ops::unary(y, y, ops::Unary::Clip, 0.0f, a.clip_min, a.clip_max);
        return;
      }
      return batch_norm_forward(slot, node_index);
    case Op::Flatten: case Op::Reshape: case Op::Identity: {
      // The same values in ONNX order: x's dense order, relaid into y's layout.
      const ConstView in = x(0);
      if (in.shape == y.shape) return copy_layout(in, y);
      if (!y.channels_last) return copy_layout(in, View{y.data, in.shape, false});
      slot.scratch.resize(static_cast<size_t>(y.elements()));
      copy_layout(in, View{slot.scratch.data(), in.shape, false});
      copy_layout(ConstView{slot.scratch.data(), y.shape, false}, y);
      return;
    }
    default:
      throw Error(ExitCode::Internal, fmt::format("trainer: no forward for node '{}' ({})", n.name, op_name(n.op)));
  }
}

auto Trainer::Impl::target_for(Slot& slot, int v) -> Target {
  const ValueInfo& info = values[v];
  if (info.parameter >= 0) {
    const int p = info.parameter;
    const bool acc = slot.param_written[p] != 0;
    slot.param_written[p] = 1;
    return {View{slot.param_grad[p].data(), info.shape, false}, acc};
  }
  const bool acc = slot.grad_written[v] != 0;
  slot.grad_written[v] = 1;
  return {grad_view(slot, v), acc};
}

void Trainer::Impl::backward(Slot& slot, size_t node_index) {
  const Node& n = tg.graph.nodes[node_index];
  const Attributes& a = n.attributes;
  const int out = id(n.outputs[0]);
  if (!values[out].requires_grad) return;
  if (!slot.grad_written[out]) {
    // Nothing downstream reached this value: its gradient is zero.
    std::fill(slot.grad[out].begin(), slot.grad[out].end(), 0.0f);
    slot.grad_written[out] = 1;
  }
  auto x = [&](size_t i) -> ConstView { return view(slot, id(n.inputs[i])); };
  const ConstView y = view(slot, out);
  const ConstView dy = grad_view(slot, out);
  auto in_id = [&](size_t i) { return i < n.inputs.size() ? id(n.inputs[i]) : -1; };
  if (is_unary(n.op) || is_reduction(n.op)) {
    if (!wants_grad(in_id(0))) return;
    const Target t = target_for(slot, in_id(0));
    if (is_unary(n.op))
      return ops::unary_backward(x(0), y, dy, t.view, unary_of(n.op), a.alpha, a.clip_min, a.clip_max, t.accumulate,
                                 a.beta);
    return ops::reduce_backward(x(0), y, dy, a.axes, reduce_of(n.op), t.view, t.accumulate);
  }
  switch (n.op) {
    case Op::Conv:
    case Op::ConvTranspose: {
      TrainConv& k = *kernels.at({node_index, slot.size});
      const ConvLayer& layer = conv_layers.at(node_index);
      const float* yp = n.attributes.fused_relu ? y.data : nullptr;
      const float* wp = layer.crop ? layer.cropped_w.data() : x(1).data;
      const int w = in_id(1), b = in_id(2);
      // Whole-batch layers' weight gradients run once the whole mini-batch's dY is in (run_batch).
      if (wants_grad(w) && layer.mode == ParallelMode::MicroBatch) {
        const Target tw = target_for(slot, w);
        Target tb{};
        const bool has_bias = b >= 0;
        if (has_bias) tb = target_for(slot, b);
        if (!layer.crop && !tw.accumulate && (!has_bias || !tb.accumulate)) {
          k.backward_weights(x(0).data, dy.data, yp, tw.view.data, has_bias ? tb.view.data : nullptr);
        } else {
          // Cropped, or adding to a gradient another node wrote: through scratch buffers
          // of this thread (a micro-batch runs on one thread), reused from call to call.
          thread_local std::vector<float> dw_scratch, full_scratch, db_scratch;
          auto scratch = [](std::vector<float>& v, int64_t n) {
            if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
            return v.data();
          };
          auto add_into = [](float* to, const float* from, int64_t n) {
            for (int64_t i = 0; i < n; ++i) to[i] += from[i];
          };
          const ConvDescriptor& d = layer.full;
          const int64_t kernel_dw = d.oc * d.icg() * layer.taps.kh * layer.taps.kw;
          float* dw = !layer.crop && !tw.accumulate ? tw.view.data : scratch(dw_scratch, kernel_dw);
          float* db = !has_bias ? nullptr : !tb.accumulate ? tb.view.data : scratch(db_scratch, tb.view.elements());
          k.backward_weights(x(0).data, dy.data, yp, dw, db);
          if (layer.crop) {
            float* full = tw.accumulate ? scratch(full_scratch, tw.view.elements()) : tw.view.data;
            expand_weight_gradient(d, layer.taps, dw, full, 0, d.oc);
            if (tw.accumulate) add_into(tw.view.data, full, tw.view.elements());
          } else if (tw.accumulate) {
            add_into(tw.view.data, dw, kernel_dw);
          }
          if (has_bias && tb.accumulate) add_into(tb.view.data, db, tb.view.elements());
        }
      }
      if (values[in_id(0)].requires_grad) {
        const Target tx = target_for(slot, in_id(0));
        const float* w = weights_for(node_index, k, kBackwardDataPanels, wp);
        write_or_add(slot, tx, [&](float* dx) { k.backward_data(dy.data, w, yp, dx); });
      }
      return;
    }
    case Op::Identity: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      return ops::relabel_backward(dy, t.view, t.accumulate);
    }
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow: case Op::PRelu: case Op::Max: case Op::Min:
      for (int which = 0; which < 2; ++which) {
        if (!wants_grad(in_id(which))) continue;
        const Target t = target_for(slot, in_id(which));
        ops::binary_backward(x(0), x(1), y, dy, binary_of(n.op), which, t.view, t.accumulate);
      }
      return;
    case Op::MaxPool: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::max_pool_backward_argmax(dy, slot.argmax[node_index].data(), t.view, t.accumulate);
      return;
    }
    case Op::AveragePool: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::average_pool_backward(window_of(a), a.count_include_pad, dy, t.view, t.accumulate);
      return;
    }
    case Op::LayerNormalization: {
      thread_local std::vector<float> x_scratch, dy_scratch, dx_scratch;
      const ConstView in = dense(x(0), x_scratch), g = dense(dy, dy_scratch);
      if (wants_grad(in_id(0))) {
        const Target t = target_for(slot, in_id(0));
        const bool scale = n.inputs.size() > 1 && !n.inputs[1].empty();
        into(t.view, t.accumulate, dx_scratch, [&](const View& out) {
          ops::layer_norm_backward_input(in, scale ? x(1).data : nullptr, scale ? x(1).elements() : 0, g, a.axis,
                                         a.epsilon, out, false);
        });
      }
      for (int which : {1, 2}) {
        if (size_t(which) >= n.inputs.size() || n.inputs[size_t(which)].empty() || !wants_grad(in_id(which))) continue;
        const Target t = target_for(slot, in_id(which));
        ops::layer_norm_backward_parameter(in, g, a.axis, a.epsilon, which, t.view.data, t.view.elements(),
                                           t.accumulate);
      }
      return;
    }
    case Op::Gather: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      if (ops::gather_layouts_supported(t.view.shape, a.axis, dy.shape))
        return ops::gather_backward(dy, a.axis, a.indices, t.view, t.accumulate);
      thread_local std::vector<float> dy_scratch, dx_scratch;
      const ConstView g = dense(dy, dy_scratch);
      return into(t.view, t.accumulate, dx_scratch,
                  [&](const View& out) { ops::gather_backward(g, a.axis, a.indices, out, false); });
    }
    case Op::DepthToSpace: case Op::SpaceToDepth: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      return ops::depth_space(dy, t.view, a.blocksize, a.crd, n.op == Op::SpaceToDepth, t.accumulate);
    }
    case Op::Slice: case Op::Transpose: case Op::Resize: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      if (n.op == Op::Slice) ops::slice_backward(dy, a.slice_first, a.slice_step, t.view, t.accumulate);
      else if (n.op == Op::Resize) ops::resize_backward(dy, a.resize, t.view, t.accumulate);
      else ops::transpose_backward(dy, a.perm, t.view, t.accumulate);
      return;
    }
    case Op::GlobalAveragePool: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::global_average_pool_backward(dy, t.view, t.accumulate);
      return;
    }
    case Op::Gemm: case Op::MatMul: {
      const bool gemm = n.op == Op::Gemm;
      const float alpha = gemm ? a.alpha : 1.0f, beta = gemm ? a.beta : 0.0f;
      const bool ta = gemm && a.trans_a, tb = gemm && a.trans_b;
      Target t0{}, t1{}, t2{};
      const bool g0 = wants_grad(in_id(0)), g2 = gemm && wants_grad(in_id(2));
      const bool g1 = wants_grad(in_id(1)) && !deferred_node[node_index];
      if (g0) t0 = target_for(slot, in_id(0));
      if (g1) t1 = target_for(slot, in_id(1));
      if (g2) t2 = target_for(slot, in_id(2));
      if (g0) t0.view = rows(t0.view);
      ops::gemm_backward(rows(x(0)), x(1), rows(dy), alpha, beta, ta, tb, g0 ? &t0.view : nullptr, t0.accumulate,
                         g1 ? &t1.view : nullptr, t1.accumulate, g2 ? &t2.view : nullptr, t2.accumulate);
      return;
    }
    case Op::Concat: {
      std::vector<std::vector<int64_t>> shapes;
      for (size_t i = 0; i < n.inputs.size(); ++i) shapes.push_back(shape_at(in_id(i), slot.size));
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (!wants_grad(in_id(i))) continue;
        const Target t = target_for(slot, in_id(i));
        ops::concat_backward(dy, a.axis, shapes, static_cast<int>(i), t.view, t.accumulate);
      }
      return;
    }
    case Op::Pad: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::pad_backward(dy, a.pad_amounts, t.view, t.accumulate);
      return;
    }
    case Op::LRN: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::lrn_backward(x(0), dy, a.size, a.alpha, a.beta, a.lrn_bias, t.view, t.accumulate);
      return;
    }
    case Op::WithinChannelLRN: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      const std::vector<float>& kept = slot.masks[node_index];
      slot.scratch.resize(static_cast<size_t>(y.elements() / y.shape[0]));  // one image
      ops::within_channel_lrn_backward(x(0), kept.data(), dy, a.size, a.alpha, a.beta, t.view, t.accumulate,
                                       slot.scratch.data());
      return;
    }
    case Op::Dropout: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      ops::dropout_backward(dy, slot.masks[node_index].data(), t.view, t.accumulate);
      return;
    }
    case Op::BatchNormalization: return batch_norm_backward(slot, node_index);
    case Op::Flatten: case Op::Reshape: {
      if (!wants_grad(in_id(0))) return;
      const Target t = target_for(slot, in_id(0));
      // The forward's mirror: dy in ONNX order (y's dense order) read in x's shape.
      if (y.shape == t.view.shape) return ops::relabel_backward(dy, t.view, t.accumulate);
      if (!y.channels_last)
        return ops::relabel_backward(ConstView{dy.data, t.view.shape, false}, t.view, t.accumulate);
      slot.scratch.resize(static_cast<size_t>(dy.elements()));
      copy_layout(dy, View{slot.scratch.data(), dy.shape, false});
      ops::relabel_backward(ConstView{slot.scratch.data(), t.view.shape, false}, t.view, t.accumulate);
      return;
    }
    default:
      throw Error(ExitCode::Internal, fmt::format("trainer: no backward for node '{}' ({})", n.name, op_name(n.op)));
  }
}

}  // namespace convgen::model
