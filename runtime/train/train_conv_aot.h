// The trainer's convolutions (runtime/train/train_conv.h) on ahead-of-time kernels: what a generated
// training driver (`convgen compile --train`, docs/training.md) links instead of the
// Halide JIT. The driver carries one table row per layer and size the compiler saw
// (the same requests the in-process trainer makes, so the same kernels and schedules).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/train/train_conv.h"

struct halide_buffer_t;

namespace convgen::model {

// Kernel signatures as `convgen compile-layer` emits them (docs/backward.md).
using AotForwardFn = int (*)(halide_buffer_t* x, halide_buffer_t* w, halide_buffer_t* bias, halide_buffer_t* y);
using AotBackwardDataFn = int (*)(halide_buffer_t* dy, halide_buffer_t* w, halide_buffer_t* y, halide_buffer_t* dx);
using AotBackwardWeightsFn = int (*)(halide_buffer_t* x, halide_buffer_t* dy, halide_buffer_t* y, halide_buffer_t* dw);
using AotBackwardWeightsBiasFn = int (*)(halide_buffer_t* x, halide_buffer_t* dy, halide_buffer_t* y,
                                         halide_buffer_t* dw, halide_buffer_t* db);

// One layer at one size: its normalised descriptor (ConvDescriptor::normalised(), no
// name) and its kernels. backward_data is null when no request needed dX (a first
// layer); exactly one of backward_weights / backward_weights_bias is set, by the
// descriptor's bias.
struct AotConvKernels {
  const char* descriptor;
  AotForwardFn forward;
  AotBackwardDataFn backward_data;
  AotBackwardWeightsFn backward_weights;
  AotBackwardWeightsBiasFn backward_weights_bias;
};

// A factory over a driver's table. A request the table does not hold (a sample count
// the driver was not compiled for) is an Unsupported error naming the layer, the size
// and `regenerate` (how to compile a driver that has it).
TrainConvFactory make_aot_conv_factory(std::vector<AotConvKernels> table, std::string regenerate);

}  // namespace convgen::model
