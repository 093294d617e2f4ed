// Gemm / MatMul layers over the whole mini-batch at a barrier (no private gradient copies).
#include "runtime/train/trainer_impl.h"

#include <algorithm>

#include <fmt/format.h>
#include <omp.h>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"

namespace convgen::model {

TrainConv* Trainer::Impl::gemm_conv(size_t node, int64_t rows) {
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

auto Trainer::Impl::gemm_shape(size_t node) const -> GemmShape {
  const Node& nd = tg.graph.nodes[node];
  const bool gemm = nd.op == Op::Gemm;
  const int c = gemm && nd.inputs.size() > 2 && !nd.inputs[2].empty() ? id(nd.inputs[2]) : -1;
  return {id(nd.inputs[0]), id(nd.inputs[1]), c, id(nd.outputs[0]), values[id(nd.inputs[0])].sample_elements,
          values[id(nd.outputs[0])].sample_elements, gemm && nd.attributes.trans_b, gemm ? nd.attributes.alpha : 1.0f,
          gemm ? nd.attributes.beta : 0.0f};
}

void Trainer::Impl::batched_gemm(Action a, size_t node, const Guard& guarded) {
  const GemmShape sh = gemm_shape(node);
  BatchedGemm& bg = batched.at(node);
  const int64_t rows = batch_count;
  Slot& first = slots[0];
  const float* w = data_of(first, sh.w);
  if (a == Action::GemmForward) {
    bg.a.resize(static_cast<size_t>(rows * sh.k));
    gemm_y.resize(static_cast<size_t>(rows * sh.n));
  } else {
    gemm_dy.resize(static_cast<size_t>(rows * sh.n));
    gemm_da.resize(static_cast<size_t>(rows * sh.k));
  }
  // Gather the micro-batches' rows in sample order (across ranks: this rank's, then
  // every rank's rows to every rank).
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
  for (int64_t s = own_begin; s < own_end; ++s)
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
  if (distributed()) {
    if (a == Action::GemmForward) share_samples(bg.a.data(), sh.k);
    else share_samples(gemm_dy.data(), sh.n);
  }
  if (TrainConv* conv = gemm_conv(node, rows)) {
    // Y = A W^T + b is a 1x1 convolution of a 1 x B "image" of K channels: convgen's
    // generated kernels, the samples as the pixels they tile.
    const float* bias = sh.c >= 0 ? data_of(first, sh.c) : nullptr;
    if (a == Action::GemmForward) {
      const float* wf = weights_for(node, *conv, kForwardPanels, w);
      guarded([&] { conv->forward(bg.a.data(), wf, bias, gemm_y.data()); });
    } else {
      float* db = bg.bias_param >= 0 ? deferred_grad[bg.bias_param].data() : nullptr;
      guarded([&] { conv->backward_weights(bg.a.data(), gemm_dy.data(), nullptr, deferred_grad[values[sh.w].parameter].data(), db); });
      const float* wd = weights_for(node, *conv, kBackwardDataPanels, w);
      if (values[sh.a].requires_grad) guarded([&] { conv->backward_data(gemm_dy.data(), wd, nullptr, gemm_da.data()); });
    }
    scatter_gemm(a, sh, guarded);
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
    scatter_gemm(a, sh, guarded);
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
  scatter_gemm(a, sh, guarded);
}

void Trainer::Impl::scatter_gemm(Action a, const GemmShape& sh, const Guard& guarded) {
  if (a == Action::GemmBackward && !values[sh.a].requires_grad) return;
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
  for (int64_t s = own_begin; s < own_end; ++s)
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

}  // namespace convgen::model
