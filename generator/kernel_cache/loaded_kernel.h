// LoadedKernel: one kernel of the kernel cache (generator/kernel_cache/kernel_cache.h),
// compiled ahead of time into a shared object and loaded into this process.
//
// Every kernel object is built without the Halide runtime and linked against one
// shared runtime per target, stored in the cache too (cache/runtime/<hash>/); it is
// loaded first, privately (RTLD_LOCAL), and given the process's hooks: the OpenMP
// parallel runtime (runtime/parallel) and the caller's heap. Kernels are loaded
// privately as well, so nothing of theirs enters the process's global symbol scope.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <Halide.h>

namespace convgen {

// The heap every loaded kernel allocates its workspace from (Halide's custom
// malloc/free); the first kernel loaded for a target installs them in its runtime.
struct KernelHeapHooks {
  void* (*allocate)(void* user_context, size_t bytes) = nullptr;
  void (*release)(void* user_context, void* block) = nullptr;
};

class LoadedKernel {
 public:
  // Builds the pipeline and its arguments in signature order (outputs follow them).
  using Build = std::function<void(Halide::Pipeline* pipeline, std::vector<Halide::Argument>* arguments)>;

  // The kernel of `key` (kernel_cache_key) from the process's cache: its shared object
  // is loaded, or built with `build` (for `target`), linked, stored and loaded first.
  // An entry that does not load or was stored under another key is rebuilt. nullptr
  // when the cache is off or this machine cannot make shared objects (no linker);
  // kernel_cache_stats() says why, and the caller JIT-compiles instead. `private_copy`:
  // load a copy of the entry's shared object, whose code sits at other addresses than
  // every other load of it in this process (the tuner's second default).
  // `streaming_output_stores`: compiled with streaming stores (generator/object_code);
  // the key must tell such a kernel apart (the schedule it holds does).
  static std::unique_ptr<LoadedKernel> open(const std::string& key, const std::string& pass,
                                            const Halide::Target& target, const Build& build,
                                            const KernelHeapHooks& heap, bool private_copy = false,
                                            bool streaming_output_stores = false);
  ~LoadedKernel();
  LoadedKernel(const LoadedKernel&) = delete;
  LoadedKernel& operator=(const LoadedKernel&) = delete;

  // Calls the kernel on its buffers in signature order; returns Halide's status (0: ok).
  int call(const std::vector<halide_buffer_t*>& buffers) const;

  const std::string& path() const { return path_; }

  LoadedKernel(void* library, int (*entry)(void**), std::string path);

 private:
  void* library_ = nullptr;
  int (*entry_)(void**) = nullptr;
  std::string path_;
};

}  // namespace convgen
