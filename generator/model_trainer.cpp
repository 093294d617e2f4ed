#include "model_trainer.h"

#include <fmt/format.h>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>

#include "errors.h"
#include "model_ops.h"
#include "ops.h"
#include "tensor.h"
#include "train_conv.h"
#include "train_ops.h"

namespace convgen::model {

int64_t default_micro_batch(int64_t batch) {
  // Four micro-batches or more per mini-batch, as large as that allows: large enough for
  // efficient kernels and few private gradient copies, enough to share among threads.
  for (int64_t m = std::max<int64_t>(1, batch / 4); m >= 1; --m)
    if (batch % m == 0) return m;
  return 1;
}

namespace {

// What the trainer knows of each graph value.
struct ValueInfo {
  std::string name;
  std::vector<int64_t> shape;   // at the micro-batch size m (constants: as they are)
  bool constant = false;
  int parameter = -1;           // index into the parameters, or -1 (frozen / activation)
  int frozen = -1;              // index into the frozen constants
  bool state = false;           // frozen but updated by training (BatchNormalization running statistics)
  bool channels_last = false;   // activations of rank 3 and 4: the kernels' layout
  bool requires_grad = false;   // depends on a parameter: backward reaches it
  int64_t sample_elements = 0;  // activations: elements per sample
};


// The buffers of one micro-batch: first allocated (and first touched) by the thread that
// always runs that micro-batch.
struct Slot {
  int64_t size = 0;
  std::vector<std::vector<float>> act, grad;   // per value (activations; gradients where required)
  std::vector<std::vector<float>> param_grad;  // per parameter
  std::vector<std::vector<float>> masks;       // per node (Dropout)
  std::vector<std::vector<int32_t>> argmax;    // per node (MaxPool): each output's source
  std::vector<std::vector<double>> bn_partial;  // per node (BatchNormalization): per-channel sums
  std::vector<char> grad_written, param_written;
  std::vector<float> scratch;
  double loss = 0.0;
  int64_t correct = 0;
  std::vector<double> seconds;  // profiling: per node, [3 * node + pass]
  // This micro-batch's part of the mini-batch.
  int64_t first_sample = 0;
  const float* pixels = nullptr;
  const int32_t* labels = nullptr;
};

// Mini-batch statistics of one BatchNormalization node, combined over micro-batches.
struct BatchStats {
  std::vector<double> mean, var;       // biased variance
  std::vector<float> invstd;           // 1 / sqrt(var + epsilon)
  std::vector<double> dy_sum, dy_xhat_sum;
};

// Per-micro-batch work between two barriers (docs/training.md): a phase runs its actions
// for every micro-batch, then `combine` (if any) runs once, on one thread.
enum class Action { Forward, Loss, Backward, BnSums, BnSquares, BnBackwardSums, GemmForward, GemmBackward };
struct Step {
  Action action;
  size_t node = 0;
};
struct Phase {
  std::vector<Step> steps;
  Action combine = Action::Forward;  // Forward: nothing to combine
  size_t combine_node = 0;
};


}  // namespace

struct Trainer::Impl {
  TrainerOptions options;
  TargetInfo target;
  TrainGraph tg;
  int64_t m = 1;
  std::vector<ValueInfo> values;
  std::map<std::string, int> value_id;
  std::vector<Parameter> parameters;
  std::vector<std::vector<float>> frozen;
  int input = -1, logits = -1;
  std::vector<Slot> slots;
  // Identical layers (the same descriptor and needs) share one implementation.
  std::map<std::string, std::unique_ptr<TrainConv>> convs;
  std::map<std::pair<size_t, int64_t>, TrainConv*> kernels;  // (node index, micro-batch size)
  std::vector<std::string>* why = nullptr;
  int64_t steps = 0;
  // Builds a layer's convolutions (generated kernels unless TrainerOptions says otherwise).
  TrainConvFactory make_conv;
  // Micro-batches in sequence with intra-kernel parallel kernels: asked for, or a full
  // mini-batch has fewer micro-batches than threads. Fixed per trainer.
  bool intra = false;
  std::vector<Phase> train_phases, eval_phases;
  // Gemm / MatMul weight gradients computed once per mini-batch, after the backward pass,
  // as one GEMM over all its samples (below): by node, and the parameters they fill.
  std::vector<char> deferred_node, deferred_param;
  std::vector<std::vector<float>> deferred_grad;   // per parameter (deferred ones only)
  std::map<size_t, BatchStats> batch_stats;  // by node index
  std::vector<std::string> state_names;      // running statistics, in graph order
  int64_t active = 0;                        // micro-batches of the running mini-batch
  int64_t batch_count = 0;                   // samples of the running mini-batch

  // ---- views -------------------------------------------------------------------
  std::vector<int64_t> shape_at(int id, int64_t n) const {
    std::vector<int64_t> s = values[id].shape;
    if (!values[id].constant && !s.empty()) s[0] = n;
    return s;
  }
  float* data_of(Slot& slot, int id) {
    const ValueInfo& v = values[id];
    if (v.parameter >= 0) return parameters[v.parameter].value.data();
    if (v.frozen >= 0) return frozen[v.frozen].data();
    return slot.act[id].data();
  }
  View view(Slot& slot, int id) { return {data_of(slot, id), shape_at(id, slot.size), values[id].channels_last}; }
  View grad_view(Slot& slot, int id) {
    return {slot.grad[id].data(), shape_at(id, slot.size), values[id].channels_last};
  }
  int id(const std::string& name) const { return name.empty() ? -1 : value_id.at(name); }

  // ---- setup -------------------------------------------------------------------
  // Batched GEMM layers. A Gemm (or MatMul) whose weight is a parameter read by it alone
  // and whose A operand has the samples in its rows runs over the whole mini-batch at a
  // barrier instead of per micro-batch: Y = A W' for all samples at once, and backward
  // dA = dY W'^T, dW = A^T dY (the mini-batch as the reduction) and db in one go. One
  // GEMM packs the weight once instead of once per micro-batch, and the weight gradient
  // needs no private copies and no tree (LeNet's 500x800 ip1). Threads share fixed
  // blocks of the output's columns (dW: rows), so every element is BLIS's fixed-order sum,
  // the same for every thread count.
  struct BatchedGemm {
    std::vector<float> a;  // A of the whole mini-batch, [B x K], kept from forward to backward
    int bias_param = -1;
    bool as_conv = false;  // Y = A W^T + b: runs as a 1x1 convolution (gemm_conv)
    std::map<int64_t, std::unique_ptr<TrainConv>> convs;  // by mini-batch rows
  };
  std::map<size_t, BatchedGemm> batched;  // by node index
  std::vector<float> gemm_y, gemm_dy, gemm_da;
  std::vector<double> gemm_seconds;  // profiling, as Slot::seconds
  static constexpr int64_t kGemmBlock = 128;  // columns (rows of dW) per work item

  void choose_deferred_gradients() {
    const Graph& g = tg.graph;
    deferred_node.assign(g.nodes.size(), 0);
    deferred_param.assign(parameters.size(), 0);
    deferred_grad.assign(parameters.size(), {});
    std::map<std::string, int> uses;
    for (const Node& n : g.nodes)
      for (const std::string& in : n.inputs) ++uses[in];
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (n.op != Op::Gemm && n.op != Op::MatMul) continue;
      if (n.op == Op::Gemm && n.attributes.trans_a) continue;
      const int w = id(n.inputs[1]);
      if (values[w].parameter < 0 || uses[n.inputs[1]] != 1) continue;
      const bool has_c = n.op == Op::Gemm && n.inputs.size() > 2 && !n.inputs[2].empty();
      if (has_c) {
        // C: a bias parameter [N] read by this node alone; anything else stays per micro-batch.
        const int c = id(n.inputs[2]);
        if (values[c].parameter < 0 || uses[n.inputs[2]] != 1 || values[c].shape.size() != 1 ||
            values[c].shape[0] != values[id(n.outputs[0])].sample_elements)
          continue;
      }
      deferred_node[i] = 1;
      BatchedGemm bg;
      for (int input : {1, 2}) {
        if (static_cast<size_t>(input) >= n.inputs.size() || n.inputs[input].empty()) continue;
        const int v = id(n.inputs[input]);
        if (values[v].parameter < 0) continue;
        deferred_param[values[v].parameter] = 1;
        deferred_grad[values[v].parameter].assign(parameters[values[v].parameter].value.size(), 0.0f);
        if (input == 2) bg.bias_param = values[v].parameter;
      }
      const Attributes& at = n.attributes;
      bg.as_conv = n.op == Op::Gemm && at.trans_b && at.alpha == 1.0f && (!has_c || at.beta == 1.0f);
      batched[i] = std::move(bg);
    }
  }

  // The convolution kernels of a Gemm that is a 1x1 convolution of a 1 x rows image:
  // input NHWC [1][1][rows][K] = A, weights OIHW [N][K][1][1] = W (transB), output
  // [1][1][rows][N] = Y, bias [N]. Compiled for each mini-batch size when first needed,
  // with the intra-kernel parallel variant: they run between phases, on all threads.
  TrainConv* gemm_conv(size_t node, int64_t rows) {
    BatchedGemm& bg = batched.at(node);
    if (!bg.as_conv) return nullptr;
    auto it = bg.convs.find(rows);
    if (it != bg.convs.end()) return it->second.get();
    const GemmShape sh = gemm_shape(node);
    TrainConvRequest r;
    ConvDescriptor& d = r.descriptor;
    d.mb = 1, d.ic = sh.k, d.ih = 1, d.iw = rows, d.oc = sh.n, d.kh = d.kw = 1;
    d.bias = sh.c >= 0;
    r.needs_backward_data = values[sh.a].requires_grad;
    // The parallel variant for every T (one image: pixel blocks), so the schedule -- and
    // the bits -- never depend on the thread count; T only sets how many threads run it.
    r.intra_kernel = true;
    r.threads = 1;
    r.records = options.records;
    r.target = target;
    auto conv = make_conv(r);
    if (why) why->push_back(fmt::format("{}: Gemm as a 1x1 convolution: {}", tg.graph.nodes[node].name, conv->describe()));
    return bg.convs.emplace(rows, std::move(conv)).first->second.get();
  }

  struct GemmShape {
    int a, w, c, y;
    int64_t k, n;  // A's columns, Y's columns
    bool trans_b;
    float alpha, beta;
  };
  GemmShape gemm_shape(size_t node) const {
    const Node& nd = tg.graph.nodes[node];
    const bool gemm = nd.op == Op::Gemm;
    const int c = gemm && nd.inputs.size() > 2 && !nd.inputs[2].empty() ? id(nd.inputs[2]) : -1;
    return {id(nd.inputs[0]), id(nd.inputs[1]), c, id(nd.outputs[0]), values[id(nd.inputs[0])].sample_elements,
            values[id(nd.outputs[0])].sample_elements, gemm && nd.attributes.trans_b, gemm ? nd.attributes.alpha : 1.0f,
            gemm ? nd.attributes.beta : 0.0f};
  }

  // Runs between phases, outside any parallel region: its loops open their own teams
  // (fixed blocks, so the bits do not depend on T), and its generated kernels run their
  // intra-kernel parallel variant.
  template <typename Guard>
  void batched_gemm(Action a, size_t node, const Guard& guarded) {
    const GemmShape sh = gemm_shape(node);
    BatchedGemm& bg = batched.at(node);
    const int64_t rows = batch_count, micro = active;
    Slot& first = slots[0];
    const float* w = data_of(first, sh.w);
    if (a == Action::GemmForward) {
      bg.a.resize(static_cast<size_t>(rows * sh.k));
      gemm_y.resize(static_cast<size_t>(rows * sh.n));
    } else {
      gemm_dy.resize(static_cast<size_t>(rows * sh.n));
      gemm_da.resize(static_cast<size_t>(rows * sh.k));
    }
    // Gather the micro-batches' rows in sample order.
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
    for (int64_t s = 0; s < micro; ++s)
      guarded([&] {
        Slot& slot = slots[s];
        if (a == Action::GemmForward) {
          std::copy(slot.act[sh.a].begin(), slot.act[sh.a].end(), bg.a.begin() + s * m * sh.k);
        } else {
          if (!slot.grad_written[sh.y]) std::fill(slot.grad[sh.y].begin(), slot.grad[sh.y].end(), 0.0f);
          slot.grad_written[sh.y] = 1;
          std::copy(slot.grad[sh.y].begin(), slot.grad[sh.y].end(), gemm_dy.begin() + s * m * sh.n);
        }
      });
    if (TrainConv* conv = gemm_conv(node, rows)) {
      // Y = A W^T + b is a 1x1 convolution of a 1 x B "image" of K channels: convgen's
      // generated kernels, the samples as the pixels they tile.
      const float* bias = sh.c >= 0 ? data_of(first, sh.c) : nullptr;
      if (a == Action::GemmForward) {
        guarded([&] { conv->forward(bg.a.data(), w, bias, gemm_y.data()); });
      } else {
        float* db = bg.bias_param >= 0 ? deferred_grad[bg.bias_param].data() : nullptr;
        guarded([&] { conv->backward_weights(bg.a.data(), gemm_dy.data(), nullptr, deferred_grad[values[sh.w].parameter].data(), db); });
        if (values[sh.a].requires_grad) guarded([&] { conv->backward_data(gemm_dy.data(), w, nullptr, gemm_da.data()); });
      }
      scatter_gemm(a, sh, micro, guarded);
      return;
    }
    if (a == Action::GemmForward) {
      const int64_t blocks = (sh.n + kGemmBlock - 1) / kGemmBlock;
#pragma omp parallel for schedule(static) num_threads(options.threads)
      for (int64_t b = 0; b < blocks; ++b)
        guarded([&] {
          const int64_t j0 = b * kGemmBlock, cols = std::min(kGemmBlock, sh.n - j0);
          const float* c = sh.c >= 0 ? data_of(first, sh.c) : nullptr;  // a [N] bias (choose_deferred_gradients)
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = j0; j < j0 + cols; ++j) gemm_y[r * sh.n + j] = c ? sh.beta * c[j] : 0.0f;
          // op(W) columns j0.. : W [N x K] transposed (rows j0..), or W [K x N] (columns j0..).
          ops::sgemm_1t(false, sh.trans_b, rows, cols, sh.k, sh.alpha, bg.a.data(), sh.k,
                        sh.trans_b ? w + j0 * sh.k : w + j0, sh.trans_b ? sh.k : sh.n, 1.0f, gemm_y.data() + j0, sh.n);
        });
      scatter_gemm(a, sh, micro, guarded);
      return;
    }
    // Backward: dA blocks (columns of dA), dW blocks (rows of dW), db columns: one list.
    const bool need_da = values[sh.a].requires_grad;
    const int wp = values[sh.w].parameter;
    const int64_t da_blocks = need_da ? (sh.k + kGemmBlock - 1) / kGemmBlock : 0;
    const int64_t dw_rows = sh.trans_b ? sh.n : sh.k, dw_cols = sh.trans_b ? sh.k : sh.n;
    const int64_t dw_blocks = (dw_rows + kGemmBlock - 1) / kGemmBlock;
    const int64_t db_blocks = bg.bias_param >= 0 ? (sh.n + kGemmBlock - 1) / kGemmBlock : 0;
#pragma omp parallel for schedule(static) num_threads(options.threads)
    for (int64_t b = 0; b < da_blocks + dw_blocks + db_blocks; ++b)
      guarded([&] {
        if (b < da_blocks) {
          // dA[:, k0..] = alpha dY op(W)^T: op(W)^T rows k0.. are W's rows k0.. (W [K x N],
          // transposed) or W's columns k0.. (W [N x K]).
          const int64_t k0 = b * kGemmBlock, cols = std::min(kGemmBlock, sh.k - k0);
          ops::sgemm_1t(false, !sh.trans_b, rows, cols, sh.n, sh.alpha, gemm_dy.data(), sh.n,
                        sh.trans_b ? w + k0 : w + k0 * sh.n, sh.trans_b ? sh.k : sh.n, 0.0f, gemm_da.data() + k0, sh.k);
        } else if (b < da_blocks + dw_blocks) {
          // trans_b: dW [N x K] = alpha dY^T A; else dW [K x N] = alpha A^T dY.
          const int64_t r0 = (b - da_blocks) * kGemmBlock, r = std::min(kGemmBlock, dw_rows - r0);
          float* dw = deferred_grad[wp].data() + r0 * dw_cols;
          if (sh.trans_b)
            ops::sgemm_1t(true, false, r, dw_cols, rows, sh.alpha, gemm_dy.data() + r0, sh.n, bg.a.data(), sh.k, 0.0f,
                          dw, dw_cols);
          else
            ops::sgemm_1t(true, false, r, dw_cols, rows, sh.alpha, bg.a.data() + r0, sh.k, gemm_dy.data(), sh.n, 0.0f,
                          dw, dw_cols);
        } else {
          // db = beta * column sums of dY, rows in sample order.
          const int64_t j0 = (b - da_blocks - dw_blocks) * kGemmBlock, cols = std::min(kGemmBlock, sh.n - j0);
          float* db = deferred_grad[bg.bias_param].data();
          for (int64_t j = j0; j < j0 + cols; ++j) {
            double sum = 0.0;
            for (int64_t r = 0; r < rows; ++r) sum += gemm_dy[r * sh.n + j];
            db[j] = float(double(sh.beta) * sum);
          }
        }
      });
    scatter_gemm(a, sh, micro, guarded);
  }

  // The whole-mini-batch results back into the micro-batches: Y rows (forward), dA rows
  // (backward, added when the value already has a gradient).
  template <typename Guard>
  void scatter_gemm(Action a, const GemmShape& sh, int64_t micro, const Guard& guarded) {
    if (a == Action::GemmBackward && !values[sh.a].requires_grad) return;
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
    for (int64_t s = 0; s < micro; ++s)
      guarded([&] {
        Slot& slot = slots[s];
        if (a == Action::GemmForward) {
          std::copy(gemm_y.begin() + s * m * sh.n, gemm_y.begin() + (s * m + slot.size) * sh.n, slot.act[sh.y].begin());
          return;
        }
        const Target t = target_for(slot, sh.a);
        const float* from = gemm_da.data() + s * m * sh.k;
        for (int64_t e = 0, e_end = t.view.elements(); e < e_end; ++e) t.view.data[e] = t.accumulate ? t.view.data[e] + from[e] : from[e];
      });
  }


  void index_values() {
    const Graph& g = tg.graph;
    std::map<std::string, int> trainable;
    for (size_t i = 0; i < tg.trainable.size(); ++i) trainable[tg.trainable[i]] = static_cast<int>(i);
    for (const auto& [name, v] : g.values) {
      ValueInfo info;
      info.name = name;
      info.shape = v.shape;
      info.constant = v.is_constant;
      if (v.is_constant) {
        auto t = trainable.find(name);
        if (t != trainable.end()) {
          info.parameter = t->second;
        } else {
          info.frozen = static_cast<int>(frozen.size());
          std::vector<float> data = v.data;
          if (v.is_int64) data.assign(v.int64_data.begin(), v.int64_data.end());
          frozen.push_back(std::move(data));
        }
      } else {
        info.channels_last = v.shape.size() == 3 || v.shape.size() == 4;
        int64_t e = 1;
        for (size_t d = 1; d < v.shape.size(); ++d) e *= v.shape[d];
        info.sample_elements = e;
      }
      value_id[name] = static_cast<int>(values.size());
      values.push_back(std::move(info));
    }
    parameters.resize(tg.trainable.size());
    for (size_t i = 0; i < tg.trainable.size(); ++i) {
      const Value& v = g.value(tg.trainable[i]);
      parameters[i] = Parameter{v.name, v.shape, v.data, std::vector<float>(v.data.size(), 0.0f)};
    }
    for (const Node& n : g.nodes) {
      bool any = false;
      for (const std::string& in : n.inputs)
        if (!in.empty()) any = any || values[id(in)].requires_grad || values[id(in)].parameter >= 0;
      for (const std::string& out : n.outputs) values[id(out)].requires_grad = any;
    }
    for (const Node& n : g.nodes)
      if (n.op == Op::BatchNormalization)
        for (int i : {3, 4}) {
          ValueInfo& v = values[id(n.inputs[i])];
          if (v.frozen < 0)
            throw Error(ExitCode::Unsupported, fmt::format("{}: node '{}' (BatchNormalization): not supported in "
                                                           "training: running statistics that are not initializers",
                                                           g.source, n.name));
          if (!v.state) state_names.push_back(v.name);
          v.state = true;
        }
    input = id(tg.input);
    logits = id(tg.logits);
    if (!values[logits].requires_grad)
      throw Error(ExitCode::Unsupported, fmt::format("{}: not supported in training: no trainable parameter reaches "
                                                     "the logits '{}'", g.source, tg.logits));
  }

  // Kernels of every Conv layer at micro-batch size n (compiled once per size).
  void ensure_kernels(int64_t n) {
    const Graph& g = tg.graph;
    for (size_t index = 0; index < g.nodes.size(); ++index) {
      const Node& node = g.nodes[index];
      if (node.op != Op::Conv) continue;
      auto key = std::make_pair(index, n);
      if (kernels.count(key)) continue;
      ConvDescriptor d = conv_descriptor(g, node);
      d.mb = n;
      d.name.clear();
      TrainConvRequest request;
      request.descriptor = d;
      request.needs_backward_data = values[id(node.inputs[0])].requires_grad;
      request.intra_kernel = intra;
      request.threads = options.threads;
      request.records = options.records;
      request.target = target;
      const std::string shared = d.normalised() + (request.needs_backward_data ? "+dx" : "");
      auto it = convs.find(shared);
      if (it == convs.end()) it = convs.emplace(shared, make_conv(request)).first;
      if (why) why->push_back(fmt::format("{}: {}", node.name, it->second->describe()));
      kernels.emplace(key, it->second.get());
    }
  }

  // Every kernel a mini-batch of `count` samples needs: its micro-batch sizes' and its
  // whole-mini-batch Gemm layers'.
  void ensure_batch_kernels(int64_t count) {
    const int64_t micro = (count + m - 1) / m, last = count - (micro - 1) * m;
    ensure_kernels(m);
    if (last != m) ensure_kernels(last);
    for (auto& entry : batched) gemm_conv(entry.first, count);
  }

  void prepare_slot(Slot& slot, int64_t n) {
    if (slot.size == n && !slot.act.empty()) return;
    slot.size = n;
    slot.act.assign(values.size(), {});
    slot.grad.assign(values.size(), {});
    for (size_t i = 0; i < values.size(); ++i) {
      const ValueInfo& v = values[i];
      if (v.constant) continue;
      slot.act[i].assign(static_cast<size_t>(v.sample_elements * n), 0.0f);
      if (v.requires_grad) slot.grad[i].assign(slot.act[i].size(), 0.0f);
    }
    slot.param_grad.assign(parameters.size(), {});
    for (size_t p = 0; p < parameters.size(); ++p)
      if (!deferred_param[p]) slot.param_grad[p].assign(parameters[p].value.size(), 0.0f);
    slot.masks.assign(tg.graph.nodes.size(), {});
    slot.bn_partial.assign(tg.graph.nodes.size(), {});
    slot.argmax.assign(tg.graph.nodes.size(), {});
    slot.grad_written.assign(values.size(), 0);
    slot.param_written.assign(parameters.size(), 0);
  }

  // ---- forward -------------------------------------------------------------------
  void forward(Slot& slot, size_t node_index, bool train) {
    const int64_t first_sample = slot.first_sample;
    const Node& n = tg.graph.nodes[node_index];
    const Attributes& a = n.attributes;
    auto x = [&](size_t i) -> ConstView { return view(slot, id(n.inputs[i])); };
    const View y = view(slot, id(n.outputs[0]));
    switch (n.op) {
      case Op::Conv: {
        TrainConv& k = *kernels.at({node_index, slot.size});
        const float* bias = n.inputs.size() > 2 && !n.inputs[2].empty() ? x(2).data : nullptr;
        k.forward(x(0).data, x(1).data, bias, y.data);
        return;
      }
      case Op::Relu: case Op::LeakyRelu: case Op::Clip: case Op::Sigmoid:
        ops::unary(x(0), y, unary_of(n.op), a.alpha, a.clip_min, a.clip_max);
        return;
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow:
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
      case Op::Gemm: {
        const ConstView c = n.inputs.size() > 2 && !n.inputs[2].empty() ? x(2) : ConstView{};
        ops::gemm_1t(x(0), x(1), c.data ? &c : nullptr, a.alpha, a.beta, a.trans_a, a.trans_b, y);
        return;
      }
      case Op::MatMul: ops::gemm_1t(x(0), x(1), nullptr, 1.0f, 0.0f, false, false, y); return;
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
        ops::dropout_forward(x(0), a.ratio, options.seed, node_index, steps, first_sample, y, mask.data());
        return;
      }
      case Op::BatchNormalization:
        if (!train) return ops::batch_norm(x(0), x(1), x(2), x(3), x(4), a.epsilon, y);
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

  // ---- backward ------------------------------------------------------------------
  // The gradient buffer of value `v` for a contribution: dx = c the first time, dx += c
  // after (returned flag). Constants that are parameters get their slot's gradient.
  struct Target {
    View view;
    bool accumulate = false;
  };
  Target target_for(Slot& slot, int v) {
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
  bool wants_grad(int v) const { return v >= 0 && (values[v].requires_grad || values[v].parameter >= 0); }

  // Runs a kernel that writes (never adds) into t: straight in, or through scratch.
  template <typename F>
  void write_or_add(Slot& slot, const Target& t, F write) {
    if (!t.accumulate) return write(t.view.data);
    slot.scratch.resize(static_cast<size_t>(t.view.elements()));
    write(slot.scratch.data());
    for (int64_t i = 0, i_end = t.view.elements(); i < i_end; ++i) t.view.data[i] += slot.scratch[i];
  }

  void backward(Slot& slot, size_t node_index) {
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
    switch (n.op) {
      case Op::Conv: {
        TrainConv& k = *kernels.at({node_index, slot.size});
        const float* yp = n.attributes.fused_relu ? y.data : nullptr;
        const int w = in_id(1), b = in_id(2);
        if (wants_grad(w)) {
          const Target tw = target_for(slot, w);
          Target tb{};
          const bool has_bias = b >= 0;
          if (has_bias) tb = target_for(slot, b);
          if (!tw.accumulate && (!has_bias || !tb.accumulate)) {
            k.backward_weights(x(0).data, dy.data, yp, tw.view.data, has_bias ? tb.view.data : nullptr);
          } else {
            std::vector<float> dw(static_cast<size_t>(tw.view.elements())), db(has_bias ? tb.view.elements() : 0);
            k.backward_weights(x(0).data, dy.data, yp, dw.data(), has_bias ? db.data() : nullptr);
            for (size_t i = 0; i < dw.size(); ++i) tw.view.data[i] = tw.accumulate ? tw.view.data[i] + dw[i] : dw[i];
            for (size_t i = 0; i < db.size(); ++i) tb.view.data[i] = tb.accumulate ? tb.view.data[i] + db[i] : db[i];
          }
        }
        if (values[in_id(0)].requires_grad) {
          const Target tx = target_for(slot, in_id(0));
          write_or_add(slot, tx, [&](float* dx) { k.backward_data(dy.data, x(1).data, yp, dx); });
        }
        return;
      }
      case Op::Relu: case Op::LeakyRelu: case Op::Clip: case Op::Sigmoid: case Op::Identity: {
        if (!wants_grad(in_id(0))) return;
        const Target t = target_for(slot, in_id(0));
        if (n.op == Op::Identity) return ops::relabel_backward(dy, t.view, t.accumulate);
        ops::unary_backward(x(0), y, dy, t.view, unary_of(n.op), a.alpha, a.clip_min, a.clip_max, t.accumulate);
        return;
      }
      case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Pow:
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
        ops::gemm_backward(x(0), x(1), dy, alpha, beta, ta, tb, g0 ? &t0.view : nullptr, t0.accumulate,
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

  // ---- one micro-batch -------------------------------------------------------------
  void load_input(Slot& slot, const float* pixels) {
    const View in = view(slot, input);
    copy_layout(ConstView{pixels, in.shape, false}, in);
  }

  // ---- BatchNormalization in training mode -------------------------------------
  // Mini-batch statistics need every micro-batch: each computes per-channel sums in a
  // fixed order (BnSums, BnSquares, BnBackwardSums), a barrier, and one thread combines
  // them by the pairwise tree (combine_*). Then each micro-batch normalises (forward) or
  // computes dx (backward) with the mini-batch's numbers.
  struct ChannelWalk {
    int64_t channels, pixels;
  };
  ChannelWalk walk(Slot& slot, int v) {
    const View x = view(slot, v);
    if (!x.channels_last && x.rank() > 2)
      throw Error(ExitCode::Internal, "trainer: BatchNormalization expects channels-last or 2-D activations");
    return {x.shape[1], x.elements() / x.shape[1]};
  }

  void bn_partial_sums(Slot& slot, size_t node_index, Action a) {
    const Node& n = tg.graph.nodes[node_index];
    const int xv = id(n.inputs[0]);
    const ChannelWalk w = walk(slot, xv);
    const float* x = view(slot, xv).data;
    std::vector<double>& acc = slot.bn_partial[node_index];
    acc.assign(static_cast<size_t>(2 * w.channels), 0.0);
    const BatchStats& st = batch_stats.at(node_index);
    if (a == Action::BnSums) {
      for (int64_t p = 0; p < w.pixels; ++p)
        for (int64_t c = 0; c < w.channels; ++c) acc[c] += x[p * w.channels + c];
    } else if (a == Action::BnSquares) {
      for (int64_t p = 0; p < w.pixels; ++p)
        for (int64_t c = 0; c < w.channels; ++c) {
          const double d = double(x[p * w.channels + c]) - st.mean[c];
          acc[c] += d * d;
        }
    } else {
      const int out = id(n.outputs[0]);
      if (!slot.grad_written[out]) std::fill(slot.grad[out].begin(), slot.grad[out].end(), 0.0f), slot.grad_written[out] = 1;
      const float* dy = slot.grad[out].data();
      for (int64_t p = 0; p < w.pixels; ++p)
        for (int64_t c = 0; c < w.channels; ++c) {
          const int64_t i = p * w.channels + c;
          const double xhat = (double(x[i]) - st.mean[c]) * double(st.invstd[c]);
          acc[c] += dy[i];
          acc[w.channels + c] += double(dy[i]) * xhat;
        }
      // This micro-batch's scale and bias gradients; the parameter tree adds them up.
      for (int input : {1, 2}) {
        const int v = id(n.inputs[input]);
        if (values[v].parameter < 0) continue;
        const Target t = target_for(slot, v);
        for (int64_t c = 0; c < w.channels; ++c) {
          const float g = float(acc[input == 1 ? w.channels + c : c]);
          t.view.data[c] = t.accumulate ? t.view.data[c] + g : g;
        }
      }
    }
  }

  // The pairwise tree over micro-batches of one node's partial sums.
  std::vector<double> combined(size_t node_index) {
    std::vector<std::vector<double>*> parts;
    for (int64_t i = 0; i < active; ++i) parts.push_back(&slots[i].bn_partial[node_index]);
    for (size_t stride = 1; stride < parts.size(); stride *= 2)
      for (size_t i = 0; i + stride < parts.size(); i += 2 * stride)
        for (size_t c = 0; c < parts[i]->size(); ++c) (*parts[i])[c] += (*parts[i + stride])[c];
    return *parts[0];
  }

  void combine(Action a, size_t node_index) {
    const Node& n = tg.graph.nodes[node_index];
    BatchStats& st = batch_stats.at(node_index);
    const std::vector<double> total = combined(node_index);
    const int64_t channels = int64_t(total.size() / 2);
    const double elements = double(batch_count) * double(values[id(n.inputs[0])].sample_elements / channels);
    if (a == Action::BnSums) {
      st.mean.assign(total.begin(), total.begin() + channels);
      for (double& v : st.mean) v /= elements;
    } else if (a == Action::BnSquares) {
      st.var.assign(total.begin(), total.begin() + channels);
      st.invstd.resize(static_cast<size_t>(channels));
      float* running_mean = frozen[values[id(n.inputs[3])].frozen].data();
      float* running_var = frozen[values[id(n.inputs[4])].frozen].data();
      const float momentum = n.attributes.momentum;  // ONNX: running = momentum * running + (1 - momentum) * batch
      for (int64_t c = 0; c < channels; ++c) {
        const double sum_sq = st.var[c];
        st.var[c] = sum_sq / elements;
        st.invstd[c] = float(1.0 / std::sqrt(st.var[c] + double(n.attributes.epsilon)));
        const double unbiased = elements > 1 ? sum_sq / (elements - 1) : st.var[c];
        running_mean[c] = momentum * running_mean[c] + (1.0f - momentum) * float(st.mean[c]);
        running_var[c] = momentum * running_var[c] + (1.0f - momentum) * float(unbiased);
      }
    } else {
      st.dy_sum.assign(total.begin(), total.begin() + channels);
      st.dy_xhat_sum.assign(total.begin() + channels, total.end());
    }
  }

  void batch_norm_forward(Slot& slot, size_t node_index) {
    const Node& n = tg.graph.nodes[node_index];
    const int xv = id(n.inputs[0]);
    const ChannelWalk w = walk(slot, xv);
    const float* x = view(slot, xv).data;
    float* y = view(slot, id(n.outputs[0])).data;
    const float* scale = view(slot, id(n.inputs[1])).data;
    const float* bias = view(slot, id(n.inputs[2])).data;
    const BatchStats& st = batch_stats.at(node_index);
    // y = x * alpha + beta per channel, PyTorch's CPU form.
    std::vector<float> alpha(static_cast<size_t>(w.channels)), beta(alpha.size());
    for (int64_t c = 0; c < w.channels; ++c) {
      alpha[c] = st.invstd[c] * scale[c];
      beta[c] = bias[c] - float(st.mean[c]) * alpha[c];
    }
    for (int64_t p = 0; p < w.pixels; ++p)
      for (int64_t c = 0; c < w.channels; ++c) y[p * w.channels + c] = x[p * w.channels + c] * alpha[c] + beta[c];
  }

  void batch_norm_backward(Slot& slot, size_t node_index) {
    const Node& n = tg.graph.nodes[node_index];
    const int xv = id(n.inputs[0]);
    if (!values[xv].requires_grad) return;
    const ChannelWalk w = walk(slot, xv);
    const float* x = view(slot, xv).data;
    const float* dy = slot.grad[id(n.outputs[0])].data();
    const float* scale = view(slot, id(n.inputs[1])).data;
    const BatchStats& st = batch_stats.at(node_index);
    const double elements = double(batch_count) * double(w.pixels / slot.size);
    const Target t = target_for(slot, xv);
    // dx = scale * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)), means over the mini-batch.
    for (int64_t p = 0; p < w.pixels; ++p)
      for (int64_t c = 0; c < w.channels; ++c) {
        const int64_t i = p * w.channels + c;
        const double xhat = (double(x[i]) - st.mean[c]) * double(st.invstd[c]);
        const double g = double(scale[c]) * double(st.invstd[c]) *
                         (double(dy[i]) - st.dy_sum[c] / elements - xhat * st.dy_xhat_sum[c] / elements);
        t.view.data[i] = t.accumulate ? t.view.data[i] + float(g) : float(g);
      }
  }

  // ---- phases ------------------------------------------------------------------------
  std::vector<Phase> make_phases(const Graph& g, bool train) const {
    std::vector<Phase> phases(1);
    auto barrier = [&](Action a, size_t node) {
      phases.back().combine = a;
      phases.back().combine_node = node;
      phases.emplace_back();
    };
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (train && g.nodes[i].op == Op::BatchNormalization) {
        phases.back().steps.push_back({Action::BnSums, i});
        barrier(Action::BnSums, i);
        phases.back().steps.push_back({Action::BnSquares, i});
        barrier(Action::BnSquares, i);
      }
      if (deferred_node[i]) {
        barrier(Action::GemmForward, i);  // the whole mini-batch at once, at the barrier
        continue;
      }
      phases.back().steps.push_back({Action::Forward, i});
    }
    phases.back().steps.push_back({Action::Loss, 0});
    if (!train) return phases;
    for (size_t i = g.nodes.size(); i-- > 0;) {
      if (g.nodes[i].op == Op::BatchNormalization) {
        phases.back().steps.push_back({Action::BnBackwardSums, i});
        barrier(Action::BnBackwardSums, i);
      }
      if (deferred_node[i]) {
        barrier(Action::GemmBackward, i);
        continue;
      }
      phases.back().steps.push_back({Action::Backward, i});
    }
    return phases;
  }

  void run_steps(Slot& slot, const Phase& phase, bool train, double scale) {
    if (options.profile) slot.seconds.resize(3 * tg.graph.nodes.size() + 3, 0.0);
    for (const Step& st : phase.steps) {
      const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      run_step(slot, st, train, scale);
      if (!options.profile) continue;
      const int pass = st.action == Action::Forward || st.action == Action::Loss ? 0 : st.action == Action::Backward ? 1 : 2;
      const size_t node = st.action == Action::Loss ? tg.graph.nodes.size() : st.node;
      slot.seconds[3 * node + pass] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  }

  void run_step(Slot& slot, const Step& st, bool train, double scale) {
    {
      switch (st.action) {
        case Action::Forward: forward(slot, st.node, train); break;
        case Action::Backward: backward(slot, st.node); break;
        case Action::BnSums: case Action::BnSquares: case Action::BnBackwardSums:
          bn_partial_sums(slot, st.node, st.action);
          break;
        case Action::Loss:
          if (!train) {
            slot.loss = ops::softmax_cross_entropy_loss(view(slot, logits), slot.labels, &slot.correct);
            break;
          }
          slot.loss = ops::softmax_cross_entropy(view(slot, logits), slot.labels, scale, slot.grad[logits].data(),
                                                 &slot.correct);
          slot.grad_written[logits] = 1;
          break;
        case Action::GemmForward: case Action::GemmBackward:
          break;  // phase combines, never per-micro-batch steps
      }
    }
  }

  void begin_micro_batch(Slot& slot, int64_t n) {
    prepare_slot(slot, n);
    load_input(slot, slot.pixels);
    std::fill(slot.grad_written.begin(), slot.grad_written.end(), 0);
    std::fill(slot.param_written.begin(), slot.param_written.end(), 0);
  }

  void end_micro_batch(Slot& slot) {
    for (size_t p = 0; p < parameters.size(); ++p)
      if (!slot.param_written[p]) std::fill(slot.param_grad[p].begin(), slot.param_grad[p].end(), 0.0f);
  }

  // Runs a mini-batch's phases over its micro-batches: on the threads (micro-batch i on
  // thread i mod T in every phase, a barrier between phases), or in order with
  // intra-kernel parallel kernels.
  StepStats run_batch(const float* pixels, const int32_t* labels, int64_t count, bool train) {
    if (count < 1 || count > options.batch)
      throw Error(ExitCode::Internal, fmt::format("trainer: a batch of {} samples (batch size {})", count, options.batch));
    const int64_t micro = (count + m - 1) / m, last = count - (micro - 1) * m;
    ensure_batch_kernels(count);
    if (static_cast<int64_t>(slots.size()) < micro) slots.resize(static_cast<size_t>(micro));
    const int64_t sample_floats = values[input].sample_elements;
    for (int64_t i = 0; i < micro; ++i) {
      slots[i].first_sample = i * m;
      slots[i].pixels = pixels + i * m * sample_floats;
      slots[i].labels = labels + i * m;
    }
    active = micro;
    batch_count = count;
    const double scale = 1.0 / double(count);
    const std::vector<Phase>& phases = train ? train_phases : eval_phases;
    auto run = [&](size_t phase, int64_t i) {
      Slot& slot = slots[i];
      if (phase == 0) begin_micro_batch(slot, i + 1 == micro ? last : m);
      run_steps(slot, phases[phase], train, scale);
      if (phase + 1 == phases.size()) end_micro_batch(slot);
    };
    std::exception_ptr failure;
    std::mutex failure_mutex;
    std::atomic<bool> failed{false};
    auto guarded = [&](auto&& f) {
      try {
        f();
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        failed = true;
      }
    };
    // A phase's combine, between phases and outside any parallel region: batched GEMMs
    // open their own teams (or run intra-kernel parallel kernels), BatchNormalization's
    // statistics are combined on this thread.
    auto combine_phase = [&](const Phase& p) {
      if (p.combine == Action::GemmForward || p.combine == Action::GemmBackward) {
        const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
        batched_gemm(p.combine, p.combine_node, guarded);
        if (options.profile)
          gemm_seconds[3 * p.combine_node + (p.combine == Action::GemmForward ? 0 : 1)] +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * options.threads;
      } else if (p.combine != Action::Forward) {
        guarded([&] { combine(p.combine, p.combine_node); });
      }
    };
    omp_set_num_threads(options.threads);  // the kernels' own parallel loops
    for (size_t ph = 0; ph < phases.size() && !failed; ++ph) {
      if (intra) {
        for (int64_t i = 0; i < micro && !failed; ++i) guarded([&] { run(ph, i); });
      } else {
        // Micro-batch i on thread i mod T in every phase: the same static schedule over
        // the same team size gives every phase the same mapping.
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
        for (int64_t i = 0; i < micro; ++i) guarded([&] { run(ph, i); });
      }
      if (!failed) combine_phase(phases[ph]);
    }
    if (failure) std::rethrow_exception(failure);

    // The loss and the correct count: a pairwise tree over the micro-batch index.
    std::vector<double> losses(static_cast<size_t>(micro));
    StepStats stats;
    for (int64_t i = 0; i < micro; ++i) losses[i] = slots[i].loss, stats.correct += slots[i].correct;
    for (int64_t stride = 1; stride < micro; stride *= 2)
      for (int64_t i = 0; i + stride < micro; i += 2 * stride) losses[i] += losses[i + stride];
    stats.loss = losses[0] / double(count);
    stats.count = count;
    if (train) {
      reduce_and_update(micro);
      for (const Parameter& p : parameters)
        if (!std::all_of(p.value.begin(), p.value.end(), [](float v) { return std::isfinite(v); })) {
          stats.non_finite = p.name;
          break;
        }
    }
    return stats;
  }

  // Gradients summed over micro-batches by the tree, then the SGD update; threads split
  // the elements (each element's sum and update are the same whoever computes them).
  void reduce_and_update(int64_t micro) {
    constexpr int64_t chunk = 16384;
    struct Work {
      int p;
      int64_t begin, end;
    };
    std::vector<Work> work;
    for (size_t p = 0; p < parameters.size(); ++p)
      for (int64_t b = 0; b < static_cast<int64_t>(parameters[p].value.size()); b += chunk)
        work.push_back({static_cast<int>(p), b, std::min<int64_t>(b + chunk, parameters[p].value.size())});
    const bool first = steps == 0;
#pragma omp parallel for schedule(static) num_threads(options.threads)
    for (size_t i = 0; i < work.size(); ++i) {
      const Work& w = work[i];
      const float* g = deferred_param[w.p] ? deferred_grad[w.p].data() : nullptr;
      if (!g) {
        std::vector<float*> grads(static_cast<size_t>(micro));
        for (int64_t s = 0; s < micro; ++s) grads[s] = slots[s].param_grad[w.p].data();
        ops::tree_sum(grads.data(), micro, w.begin, w.end);
        g = grads[0];
      }
      Parameter& par = parameters[w.p];
      ops::sgd_update(par.value.data(), par.momentum.data(), g, w.begin, w.end, options.lr, options.momentum,
                      options.weight_decay, first);
    }
    ++steps;
  }
};

int64_t checked_micro_batch(const TrainerOptions& options) {
  if (options.batch < 1) throw Error(ExitCode::Usage, "--batch must be at least 1");
  if (options.threads < 1) throw Error(ExitCode::Usage, "--threads must be at least 1");
  const int64_t m = options.micro_batch > 0 ? options.micro_batch : default_micro_batch(options.batch);
  if (m > options.batch)
    throw Error(ExitCode::Usage, fmt::format("--micro-batch {} is larger than --batch {}", m, options.batch));
  return m;
}

Trainer::Trainer(TrainGraph graph, const TrainerOptions& options, const TargetInfo& t, TrainConvFactory make_conv,
                 std::vector<std::string>* why)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.options = options;
  s.m = checked_micro_batch(s.options);
  s.options.micro_batch = s.m;
  if (graph.graph.batch != s.m)
    throw Error(ExitCode::Internal, fmt::format("trainer: graph bound to batch {}, micro-batch {}", graph.graph.batch, s.m));
  if (!make_conv) throw Error(ExitCode::Internal, "trainer: no convolution factory");
  s.target = t;
  s.why = why;
  s.make_conv = std::move(make_conv);
  s.tg = std::move(graph);
  s.index_values();
  s.choose_deferred_gradients();
  s.gemm_seconds.assign(3 * s.tg.graph.nodes.size() + 3, 0.0);
  // Every map the threads read is complete before any step: no insertion under threads.
  for (size_t i = 0; i < s.tg.graph.nodes.size(); ++i)
    if (s.tg.graph.nodes[i].op == Op::BatchNormalization) s.batch_stats[i];
  s.train_phases = s.make_phases(s.tg.graph, true);
  s.eval_phases = s.make_phases(s.tg.graph, false);
  const int64_t full_micro = (s.options.batch + s.m - 1) / s.m;
  s.intra = s.options.threads > 1 && (s.options.intra_kernel || full_micro < s.options.threads);
}

Trainer::~Trainer() = default;

std::vector<NodeTime> Trainer::profile() const {
  const Impl& s = *impl_;
  const size_t nodes = s.tg.graph.nodes.size();
  std::vector<double> total = s.gemm_seconds;
  for (const Slot& slot : s.slots)
    for (size_t i = 0; i < slot.seconds.size(); ++i) total[i] += slot.seconds[i];
  std::vector<NodeTime> out;
  const char* passes[] = {"forward", "backward", "statistics"};
  for (size_t n = 0; n <= nodes; ++n)
    for (int p = 0; p < 3; ++p) {
      if (total[3 * n + p] == 0.0) continue;
      const bool loss = n == nodes;
      out.push_back({loss ? "loss" : s.tg.graph.nodes[n].name, loss ? "SoftmaxCrossEntropy" : op_name(s.tg.graph.nodes[n].op),
                     passes[p], total[3 * n + p]});
    }
  return out;
}

void Trainer::prepare(int64_t count) {
  Impl& s = *impl_;
  if (count < 1 || count > s.options.batch)
    throw Error(ExitCode::Internal, fmt::format("trainer: prepare({}) with batch size {}", count, s.options.batch));
  s.ensure_batch_kernels(count);
}

StepStats Trainer::train_step(const float* pixels, const int32_t* labels, int64_t count) {
  return impl_->run_batch(pixels, labels, count, true);
}

StepStats Trainer::evaluate(const float* pixels, const int32_t* labels, int64_t count) {
  return impl_->run_batch(pixels, labels, count, false);
}

void Trainer::forward(const float* pixels, int64_t count, float* logits) {
  Impl& s = *impl_;
  const std::vector<int32_t> no_labels(static_cast<size_t>(std::max<int64_t>(count, 0)), 0);
  s.run_batch(pixels, no_labels.data(), count, false);
  // Each micro-batch's rows, in sample order ([N, classes] logits are dense).
  float* out = logits;
  for (int64_t i = 0; i < s.active; ++i) {
    Slot& slot = s.slots[i];
    const size_t floats = static_cast<size_t>(slot.size * s.tg.classes);
    std::copy(s.data_of(slot, s.logits), s.data_of(slot, s.logits) + floats, out);
    out += floats;
  }
}

std::vector<std::vector<float>> Trainer::last_gradients() const {
  const Impl& s = *impl_;
  std::vector<std::vector<float>> out;
  for (size_t p = 0; p < s.parameters.size(); ++p)
    out.push_back(s.deferred_param[p] ? s.deferred_grad[p] : s.slots.at(0).param_grad[p]);  // the tree's root
  return out;
}

const std::vector<Parameter>& Trainer::parameters() const { return impl_->parameters; }
std::vector<Parameter>& Trainer::parameters() { return impl_->parameters; }
std::vector<std::pair<std::string, std::vector<float>>> Trainer::state_tensors() const {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const std::string& name : impl_->state_names)
    out.emplace_back(name, impl_->frozen[impl_->values[impl_->value_id.at(name)].frozen]);
  return out;
}

void Trainer::set_state_tensor(const std::string& name, const std::vector<float>& data) {
  auto it = impl_->value_id.find(name);
  if (it == impl_->value_id.end() || !impl_->values[it->second].state)
    throw Error(ExitCode::Internal, fmt::format("trainer: no state tensor '{}'", name));
  std::vector<float>& to = impl_->frozen[impl_->values[it->second].frozen];
  if (to.size() != data.size()) throw Error(ExitCode::Internal, fmt::format("trainer: state tensor '{}' size", name));
  to = data;
}

int64_t Trainer::steps_taken() const { return impl_->steps; }
void Trainer::set_steps_taken(int64_t steps) { impl_->steps = steps; }
void Trainer::set_learning_rate(float lr) { impl_->options.lr = lr; }
const TrainGraph& Trainer::graph() const { return impl_->tg; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
int64_t Trainer::micro_batch() const { return impl_->m; }

double Trainer::step_flops(int64_t count) const {
  const Impl& s = *impl_;
  double flops = 0.0;
  for (const Node& n : s.tg.graph.nodes) {
    if (n.op == Op::Conv) {
      ConvDescriptor d = conv_descriptor(s.tg.graph, n);
      d.mb = count;
      const bool data_pass = s.values[s.value_id.at(n.inputs[0])].requires_grad;
      flops += d.flops() * (data_pass ? 3.0 : 2.0);
    } else if (n.op == Op::Gemm || n.op == Op::MatMul) {
      const auto& a = s.tg.graph.value(n.inputs[0]).shape;
      const auto& b = s.tg.graph.value(n.inputs[1]).shape;
      const bool ta = n.op == Op::Gemm && n.attributes.trans_a, tb = n.op == Op::Gemm && n.attributes.trans_b;
      const double k = double(ta ? a[0] : a[1]), cols = double(tb ? b[0] : b[1]);
      const bool data_pass = s.values[s.value_id.at(n.inputs[0])].requires_grad;
      flops += 2.0 * double(count) * k * cols * (data_pass ? 3.0 : 2.0);
    }
  }
  return flops;
}

}  // namespace convgen::model
