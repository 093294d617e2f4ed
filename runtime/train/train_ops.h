// The training driver's operators besides convolution: backward passes of the model
// operators (runtime/ops/ops.h), softmax cross-entropy, single-threaded BLIS GEMMs, and the
// optimizer. Each is a plain loop in a fixed order over caller-owned views, with no
// thread of its own: the batch-parallel driver calls them from its threads, one
// micro-batch each, so every result depends only on its inputs (docs/training.md).
//
// `accumulate` selects dx += contribution (a value read by several nodes receives the
// sum of their gradients, added in the driver's fixed node order) or dx = contribution.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"

namespace convgen::ops {

// y = f(x) backward: dx = dy * f'(.) -- Relu from y (y > 0, PyTorch's rule at 0),
// LeakyRelu from x (x > 0 ? 1 : alpha), Clip from x (lo <= x <= hi, torch.clamp),
// Sigmoid from y (y * (1 - y)), Identity 1; HardSigmoid alpha inside (0, 1), HardSwish
// 2 alpha x + beta inside [0, 1] (PyTorch's rules at the kinks), Tanh 1 - y^2, Exp y,
// Log 1 / x, Sqrt 0.5 / y, Neg -1, Abs sign(x) (0 at 0), Softplus sigmoid(x), Elu
// x > 0 ? 1 : y + alpha, Erf 2 / sqrt(pi) exp(-x^2), Reciprocal -y^2, Selu x > 0 ? gamma
// (beta) : y + gamma alpha, Sin cos x, Cos -sin x, Floor and Ceil 0. Views share one
// shape and layout.
void unary_backward(const ConstView& x, const ConstView& y, const ConstView& dy, const View& dx, Unary op,
                    float alpha, float lo, float hi, bool accumulate, float beta = 0.0f);

// y = a op b (numpy broadcasting) backward for operand `which` (0: a, 1: b): the
// element-wise partial times dy, summed over the dimensions that operand was broadcast
// along, in y's row-major order. y is the forward output (Pow's exponent gradient).
void binary_backward(const ConstView& a, const ConstView& b, const ConstView& y, const ConstView& dy, Binary op,
                     int which, const View& d_operand, bool accumulate);

// Pooling. Training's MaxPool: ops::max_pool's output (the same bits) and, per output element, the
// flat offset in x of its window's first maximum (-1 for a window with no tap inside),
// so the backward is one scatter.
// With `relu`, y = max(0, pool(x)) and outputs that are not positive get no source
// (ReLU's gradient is 0 there, as PyTorch's is at 0): Relu fused into the pooling.
void max_pool_forward_argmax(const ConstView& x, const Window& w, const View& y, int32_t* argmax, bool relu = false);
// Its backward: dy to each output's recorded source (the window's first maximum).
void max_pool_backward_argmax(const ConstView& dy, const int32_t* argmax, const View& dx, bool accumulate);
// Average: dy / count to every tap inside the input, count as the forward's divisor.
void average_pool_backward(const Window& w, bool count_include_pad, const ConstView& dy, const View& dx,
                           bool accumulate);
void global_average_pool_backward(const ConstView& dy, const View& dx, bool accumulate);

// y = slice(x, first, step) backward: dy into its window of dx, zeros elsewhere.
void slice_backward(const ConstView& dy, const std::vector<int64_t>& first, const std::vector<int64_t>& step,
                    const View& dx, bool accumulate);
// y = transpose(x, perm) backward: dx[perm(i)] (+)= dy[i].
void transpose_backward(const ConstView& dy, const std::vector<int64_t>& perm, const View& dx, bool accumulate);

// y = reduce(x, axes) backward: Mean dy / count, Sum dy, L2 dy * x / y (0 where y is 0),
// Max and Min dy to the first extreme of each reduced group (x's row-major order),
// SumSquare 2 x dy, L1 sign(x) dy, LogSum dy / exp(y), LogSumExp dy exp(x - y). Not Prod.
void reduce_backward(const ConstView& x, const ConstView& y, const ConstView& dy, const std::vector<int64_t>& axes,
                     Reduce op, const View& dx, bool accumulate);

// BLIS sgemm on one thread, whatever BLIS's own threading setting: C = alpha * op(A) *
// op(B) + beta * C over row-major operands given with their leading dimensions.
void sgemm_1t(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Y = alpha * A' * B' + beta * C (ops::gemm's semantics) on one thread.
void gemm_1t(const ConstView& a, const ConstView& b, const ConstView* c, float alpha, float beta, bool trans_a,
             bool trans_b, const View& y);
// Its backward: dA, dB (either may be null: not needed) and dC (C's shape, the sum of
// beta * dY over the broadcast rows/columns; may be null).
void gemm_backward(const ConstView& a, const ConstView& b, const ConstView& dy, float alpha, float beta,
                   bool trans_a, bool trans_b, const View* da, bool accumulate_a, const View* db, bool accumulate_b,
                   const View* dc, bool accumulate_c);

// Concat backward for input `index`: its slice of dy.
void concat_backward(const ConstView& dy, int64_t axis, const std::vector<std::vector<int64_t>>& input_shapes,
                     int index, const View& dx, bool accumulate);
// Constant Pad backward: the unpadded window of dy.
void pad_backward(const ConstView& dy, const std::vector<int64_t>& pads, const View& dx, bool accumulate);
// A relabelling (Flatten, Reshape, Identity, layout copy) backward: dy's values, in x's
// shape, into dx's layout.
void relabel_backward(const ConstView& dy, const View& dx, bool accumulate);
// ONNX LRN (across channels) backward.
void lrn_backward(const ConstView& x, const ConstView& dy, int64_t size, float alpha, float beta, float bias,
                  const View& dx, bool accumulate);

// Caffe's WITHIN_CHANNEL LRN, fused: y = x * q, q = s^exponent, s = bias + alpha / k^2 *
// (sum of x^2 over the k x k window around the pixel, zero outside: AveragePool with
// count_include_pad and "same" padding). Channels-last 4-D x; s (x's size) is kept for
// the backward, which recomputes q from it (the same formula) and needs scratch of one
// image.
void within_channel_lrn_forward(const ConstView& x, int64_t k, float alpha, float bias, float exponent,
                                const View& y, float* s);
void within_channel_lrn_backward(const ConstView& x, const float* s, const ConstView& dy, int64_t k, float alpha,
                                 float exponent, const View& dx, bool accumulate, float* scratch);

// Dropout in training mode: y = x * keep / (1 - ratio), keep drawn per element from a
// counter-based generator keyed by (seed, stream, step, sample index, element) -- the
// same mask whatever thread or micro-batch computes it; `stream` tells the model's
// Dropout nodes apart (dropout_stream of the node's output), so each draws its own mask.
// `first_sample` is the index in the mini-batch of x's first sample. mask (x's size)
// receives keep / (1 - ratio).
void dropout_forward(const ConstView& x, float ratio, uint64_t seed, uint64_t stream, int64_t step, int64_t first_sample,
                     const View& y, float* mask);
// A Dropout node's stream: FNV-1a of its output's name -- unique in an ONNX graph and kept
// by every graph rewrite, where the node's index moves when a fusion removes a node
// before it.
uint64_t dropout_stream(const std::string& output_name);
void dropout_backward(const ConstView& dy, const float* mask, const View& dx, bool accumulate);

// LayerNormalization's backward (ops::layer_norm's forward, dense rows; scale may be
// null: one), the row
// statistics recomputed as the forward computes them. Input: dx = inv * (g - mean(g) -
// xhat * mean(g * xhat)) per row, g = dy * scale, in double. Parameters (which = 1:
// scale, 2: bias): the sum over rows, in row order, of dy * xhat or dy, per element, or
// over everything for a single-element tensor; `param` holds param_elements values.
void layer_norm_backward_input(const ConstView& x, const float* scale, int64_t scale_elements, const ConstView& dy,
                               int64_t axis, float epsilon, const View& dx, bool accumulate);
void layer_norm_backward_parameter(const ConstView& x, const ConstView& dy, int64_t axis, float epsilon, int which,
                                   float* param, int64_t param_elements, bool accumulate);

// What softmax cross-entropy counted over a micro-batch's labelled positions.
struct LossCounts {
  int64_t correct = 0;   // positions whose first maximal logit is the label
  int64_t labelled = 0;  // positions whose label is not the ignored one
  // When not empty (3 x classes: hits, predicted, labelled per class), the counts mean
  // IoU needs: position counts by predicted class and by label.
  std::vector<int64_t> per_class;
};

// Softmax cross-entropy over the class axis (1) of logits [n, classes] (a label per
// sample) or [n, classes, H, W] (a label map per sample, labels[s][h][w]), in either
// layout. Positions whose label is `ignore` (-1: none) count nowhere. Returns the sum of
// logsumexp(z) - z[label] over the labelled positions (in double, sample, row and column
// order), writes dlogits (logits' shape and layout) = (softmax(z) - onehot(label)) *
// scale, zero at ignored positions (scale = 1 / labelled positions of the mini-batch).
double softmax_cross_entropy(const ConstView& logits, const int32_t* labels, int32_t ignore, double scale,
                             float* dlogits, LossCounts* counts);
// Forward only (evaluation): the loss sum and the counts.
double softmax_cross_entropy_loss(const ConstView& logits, const int32_t* labels, int32_t ignore, LossCounts* counts);

// Sums slots[0..count) of n floats into slots[0] by a fixed pairwise tree over the slot
// index (level l adds slot i + 2^l into slot i, i a multiple of 2^(l+1)); elements
// [begin, end) only, so threads can split the elements without changing any sum.
void tree_sum(float* const* slots, int64_t count, int64_t begin, int64_t end);

// torch.optim.SGD(momentum, dampening=0, nesterov=False, weight_decay) on elements
// [begin, end): g' = g + wd * w; v = first ? g' : momentum * v + g'; w = w - lr * v.
void sgd_update(float* w, float* v, const float* g, int64_t begin, int64_t end, float lr, float momentum,
                float weight_decay, bool first_step);

}  // namespace convgen::ops
