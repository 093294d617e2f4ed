// Object code for a kernel pipeline: what Halide's compile_to_object and
// compile_to_static_library make, plus streaming output stores, for which Halide 14 has
// no schedule directive.
//
// Streaming (non-temporal) stores write whole cache lines past the caches: no read for
// ownership of each output line, and the output does not evict the inputs. They pay
// where the output is far larger than the caches and few multiply-adds make each output
// value (a 3x3 layer over RGB: 27), so that the stores, not the FMAs, bound the kernel.
//
// A kernel with streaming stores is lowered once and generated as two variants: one
// promised an output aligned to the vector width, whose whole, aligned vector stores to
// the output are marked non-temporal in its LLVM code, and the ordinary one, each exactly
// what an ordinary compilation for the target makes but for those stores. The exported
// entry point tests the outputs' host pointers, calls one of them, and after the
// streaming one fences its stores (sfence). Both compute the same values in the same
// order, so the choice never changes a bit; an output that is not aligned (a view at an
// odd offset) takes the ordinary one. The variants and the entry point are generated
// apart and linked, so LLVM never inlines a variant into the entry point.
#pragma once

#include <string>
#include <vector>

#include <Halide.h>

namespace convgen {

struct KernelObjectRequest {
  Halide::Pipeline pipeline;
  std::vector<Halide::Argument> arguments;  // in signature order; the outputs follow them
  std::string name;                         // the exported function
  Halide::Target target;
  bool streaming_output_stores = false;
};

struct KernelObjectReport {
  // Vector stores to the outputs marked non-temporal (0 without streaming stores, or
  // where no store is a whole aligned vector: the kernel then behaves as the ordinary).
  int streaming_stores = 0;
};

// Writes one object file (the Halide runtime included unless the target has no_runtime).
KernelObjectReport compile_kernel_object(const KernelObjectRequest& request, const std::string& object_path);

// Writes PREFIX.a (the kernel and, unless the target has no_runtime, the Halide runtime),
// PREFIX.h (the C header of the exported function) and, when asked, PREFIX.s (assembly).
KernelObjectReport compile_kernel_library(const KernelObjectRequest& request, const std::string& prefix,
                                          bool emit_assembly = false);

}  // namespace convgen
