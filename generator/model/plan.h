// The static execution plan of a (fused) model graph: every tensor gets a layout and a
// fixed place -- constants in one weights blob, activations in one arena whose offsets
// come from the tensors' lifetimes (a buffer is reused once its last reader has run) --
// and every node becomes one or more steps over those places, with the layout
// conversions the ops need made explicit. The generated model driver is this plan
// written out as C++; the in-process executor runs the same plan with the same
// operators, so the two give the same bits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generator/model/kernels.h"
#include "runtime/graph/model_graph.h"

namespace convgen::model {

struct PlanBuffer {
  std::string value;              // the graph value (or "<value>.dense" for a conversion)
  std::vector<int64_t> shape;     // logical, ONNX order
  bool channels_last = false;
  bool constant = false;          // in the weights blob, else in the arena
  int64_t offset = 0;             // floats from the start of its region (64-byte aligned)
  // A constant holding the weights `packed_from` packed into a kernel's panels
  // (PlannedKernel::weight_panels); its shape is {panels.floats}.
  std::string packed_from;
  WeightPanels panels;
  // >= 0: this buffer is channels [slice_channel, ...) of buffer slice_of (a Conv writing
  // into a Concat's output, generator/model/concat_slices.h); its offset is the parent's
  // plus slice_channel, its pixels as far apart as the parent's channels.
  int slice_of = -1;
  int64_t slice_channel = 0;
  // >= 0: the same memory as buffer alias_of under another shape (a Flatten, Reshape,
  // Identity or Dropout whose input nothing else reads and whose memory order it keeps).
  int alias_of = -1;
  int64_t elements() const;
};

enum class StepKind {
  Conv,
  ConvTranspose,  // the backward-data kernel of its convolution, then the bias
  Unary, Binary, MaxPool, AveragePool, GlobalPool, Gemm, MatMul, Concat,
  Copy,       // copy_layout: layout conversion, and Flatten/Reshape/Identity/Dropout
  Transpose, BatchNorm, LRN, Pad, Softmax, Reduce, Slice, Resize, LayerNorm,
  DepthSpace,  // DepthToSpace, SpaceToDepth
  Gather,
  NllLoss  // NegativeLogLikelihoodLoss: inputs x and the class weights (-1: none)
};

struct PlanStep {
  StepKind kind = StepKind::Copy;
  std::string node;              // the graph node it comes from
  Op op = Op::Identity;          // that node's op (selects the unary/binary/pool variant)
  Attributes attributes;         // that node's attributes
  std::vector<int> inputs;       // buffer indices (-1: an absent optional input); a Conv's
                                 // are x, weights[, bias or -1[, residual]]
  int output = -1;               // buffer index
  std::string kernel;            // Conv, ConvTranspose: the kernel's function name
  ConvDescriptor descriptor;     // Conv: its layer; ConvTranspose: its convolution's
};

// A Conv step's optional inputs: its bias and its residual (+residual), or -1.
int conv_bias_input(const PlanStep& s);
int conv_residual_input(const PlanStep& s);

struct Plan {
  std::vector<PlanBuffer> buffers;
  std::vector<PlanStep> steps;
  std::vector<int> inputs, outputs;  // buffers of the graph's inputs and outputs (dense)
  int64_t arena_floats = 0, weights_floats = 0;
};

// Plans the graph; `kernels` is plan_kernels' result for it.
Plan make_plan(const Graph& g, const std::vector<PlannedKernel>& kernels);

// The weights blob of a plan: every constant buffer's data at its offset, packed weights
// packed.
std::vector<float> weights_blob(const Graph& g, const Plan& p);

}  // namespace convgen::model
