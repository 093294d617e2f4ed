// Links object files into a shared object with the system linker (binutils' `ld`, or
// $CONVGEN_LD). Halide emits objects, not shared objects; the kernel cache needs the
// latter to dlopen kernels into a process.
#pragma once

#include <string>
#include <vector>

namespace convgen {

struct LinkResult {
  bool ok = false;
  bool linker_missing = false;  // the linker could not be started at all
  std::string message;          // the linker's first line of output, or why it did not start
};

// `ld -shared -z noexecstack -soname SONAME -o OUTPUT INPUTS... [-rpath RPATH]`. The
// linker's output goes to `log_path`. Thread-safe; waits for exactly its own child.
LinkResult link_shared_object(const std::string& output, const std::string& soname,
                              const std::vector<std::string>& inputs, const std::string& rpath,
                              const std::string& log_path);

// The linker command: $CONVGEN_LD if set, else "ld".
std::string linker_command();

}  // namespace convgen
