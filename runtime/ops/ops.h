// The model's operators other than convolution, with ONNX semantics, over tensor views
// in either layout (runtime/ops/tensor.h). The caller owns every buffer -- a static memory plan's
// arena in the generated driver and in the in-process executor alike, so both run the
// same code on the same layouts and give the same bits. Output views come with their
// shape and layout decided by the caller (generator/model/plan.h); plain, readable loops.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/ops/resize.h"
#include "runtime/ops/tensor.h"

namespace convgen::ops {

enum class Unary { Relu, LeakyRelu, Clip, Sigmoid, Identity, HardSigmoid, HardSwish, Tanh, Exp, Log, Sqrt, Neg, Abs,
                   Softplus, Elu, Erf, Reciprocal, Selu, Sin, Cos, Floor, Ceil };
// y has x's shape and layout. alpha: LeakyRelu's slope, Elu's alpha, HardSigmoid's and
// HardSwish's slope (clamp(alpha * x + beta, 0, 1), times x for HardSwish), Selu's alpha
// (its gamma in beta); lo/hi: Clip's bounds. Softplus is log(1 + exp(x)) computed without
// overflow.
void unary(const ConstView& x, const View& y, Unary op, float alpha = 0.0f, float lo = 0.0f, float hi = 0.0f,
           float beta = 0.0f);

// PRelu: a if a >= 0, else b * a (b the slope).
enum class Binary { Add, Sub, Mul, Div, Pow, PRelu, Max, Min };
// Numpy broadcasting of a and b to y's shape. Max and Min propagate NaN (numpy's maximum).
void binary(const ConstView& a, const ConstView& b, const View& y, Binary op);

// NegativeLogLikelihoodLoss (SoftmaxCrossEntropyLoss is it after a LogSoftmax over the
// channels), as ONNX defines it: x [N, C, d...] (dense), labels one per [N, d...]
// position (in [0, C) or the ignored label), weight (null: all one) one per class;
// loss = -x[n, label, d] * weight[label], 0 where ignored; y is that [N, d...] map
// (None), its sum, or its sum over the sum of the weights taken (Mean; the count of
// labelled positions without weights). Sums in double, in order.
enum class LossReduction { None, Sum, Mean };
void nll_loss(const ConstView& x, const std::vector<int64_t>& labels, const float* weight, bool has_ignore,
              int64_t ignore, LossReduction reduction, const View& y);

enum class Reduce { Mean, Sum, Max, L2, Min, Prod, SumSquare, L1, LogSum, LogSumExp };
// Reduces x over `axes` (non-negative, sorted) into y, whose shape is x's with those axes
// at extent 1 (keepdims) or removed; either layout. Sums and products in double in x's
// row-major order; Max and Min propagate NaN; LogSumExp shifts by the maximum.
void reduce(const ConstView& x, const std::vector<int64_t>& axes, Reduce op, const View& y);

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads_begin, pads_end;
};
// MaxPool / AveragePool to y's shape (count_include_pad counts window positions inside
// the explicit padding, not past it); GlobalAveragePool / GlobalMaxPool.
void max_pool(const ConstView& x, const Window& w, const View& y);
void average_pool(const ConstView& x, const Window& w, bool count_include_pad, const View& y);
void global_pool(const ConstView& x, bool max, const View& y);

// Y = alpha * A' * B' + beta * C (c optional), dense 2-D operands.
void gemm(const ConstView& a, const ConstView& b, const ConstView* c, float alpha, float beta, bool trans_a,
          bool trans_b, const View& y);
// Numpy matmul (batch dimensions broadcast, 1-D operands promoted), dense operands.
void matmul(const ConstView& a, const ConstView& b, const View& y);

// Concatenation along axis; with `order` (a permutation of the joined axis), y's
// position k along the axis takes the joined position order[k] (a channel shuffle folded
// into the concatenation, generator/model/channel_order_folding.h). Any layouts.
void concat(const std::vector<ConstView>& xs, int64_t axis, const View& y, const std::vector<int64_t>& order = {});
void transpose(const ConstView& x, const std::vector<int64_t>& perm, const View& y);
// y[i] = x[first + i * step] per axis; y's shape is the window's.
void slice(const ConstView& x, const std::vector<int64_t>& first, const std::vector<int64_t>& step, const View& y);
// y in x's layout.
void batch_norm(const ConstView& x, const ConstView& scale, const ConstView& bias, const ConstView& mean,
                const ConstView& var, float epsilon, const View& y);
void lrn(const ConstView& x, int64_t size, float alpha, float beta, float bias, const View& y);
// Constant padding; pads = begins of every axis, then ends.
void pad(const ConstView& x, const std::vector<int64_t>& pads, float value, const View& y);
// LayerNormalization over the dense rows of x: each of the prod(shape[:axis]) rows of
// prod(shape[axis:]) values becomes (x - mean) / sqrt(var + epsilon) * scale + bias
// (mean and biased variance of the row in double, in order). scale and bias (either may
// be null: one, zero) hold one value per row element, or one value for all; dense x and y.
void layer_norm(const ConstView& x, const float* scale, int64_t scale_elements, const float* bias,
                int64_t bias_elements, int64_t axis, float epsilon, const View& y);
// One row's statistics as layer_norm computes them (its backward recomputes them so):
// the mean and 1 / sqrt(biased variance + epsilon), in double, in order.
struct RowStatistics {
  double mean, inv;
};
RowStatistics layer_norm_row(const float* row, int64_t cols, float epsilon);
// prod(shape[axis:]): the values layer_norm normalises together.
int64_t layer_norm_row_length(const std::vector<int64_t>& shape, int64_t axis);
// Gather along axis with indices (in range, non-negative): y's block o, k is x's block
// o, indices[k] (blocks of prod(shape[axis+1:]) values). Its backward adds each of dy's
// blocks onto dx's (or writes dx, zeroed first), in y's order. Dense x and y, or any
// layouts where gather_layouts_supported (channels of [N, C, H, W] or [N, C, L] by a
// 1-D index list: a channel shuffle or selection).
void gather(const ConstView& x, int64_t axis, const std::vector<int64_t>& indices, const View& y);
void gather_backward(const ConstView& dy, int64_t axis, const std::vector<int64_t>& indices, const View& dx,
                     bool accumulate);
bool gather_layouts_supported(const std::vector<int64_t>& x_shape, int64_t axis, const std::vector<int64_t>& y_shape);
// DepthToSpace and SpaceToDepth, and their backward passes: a permutation between a deep
// tensor [N, C*b*b, H, W] and a wide one [N, C, H*b, W*b]; wide[n][c][h*b+i][w*b+j] =
// deep[n][(i*b+j)*C + c][h][w] (DCR, SpaceToDepth's order) or deep[n][c*b*b + i*b+j][h][w]
// (CRD). Copies `from` (deep when from_deep) into `to`, or adds to it; any layouts.
void depth_space(const ConstView& from, const View& to, int64_t block, bool crd, bool from_deep, bool accumulate);
// y[n][..][c] += bias[c] over a channels-last y of `rows` rows (images times pixels) of
// `channels` values: a ConvTranspose's bias after its kernel.
void add_channel_bias(float* y, int64_t rows, int64_t channels, const float* bias);
// Softmax / LogSoftmax along axis, or (coerce_2d, before opset 13) over the flattened
// dimensions from axis on; dense x and y.
void softmax(const ConstView& x, int64_t axis, bool coerce_2d, bool log, const View& y);

}  // namespace convgen::ops
