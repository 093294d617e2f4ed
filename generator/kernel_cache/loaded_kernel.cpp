#include "generator/kernel_cache/loaded_kernel.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "generator/kernel_cache/kernel_cache.h"
#include "generator/kernel_cache/kernel_cache_stats.h"
#include "generator/kernel_cache/link_shared_object.h"
#include "runtime/parallel/parallel_runtime.h"
#include "schedules/build_info.h"
#include "schedules/sha256.h"

namespace convgen {

namespace fs = std::filesystem;

namespace {

// A private scratch directory under the cache for one build; removed afterwards.
class Scratch {
 public:
  explicit Scratch(const fs::path& cache) {
    static std::atomic<uint64_t> counter{0};
    dir_ = cache / "tmp" / fmt::format("{}-{}", ::getpid(), counter++);
    fs::create_directories(dir_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path operator/(const std::string& name) const { return dir_ / name; }

 private:
  fs::path dir_;
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out.flush()) throw std::runtime_error("cannot write " + p.string());
}

// Moves `from` to `to` in one rename (same file system: both live under the cache).
void publish(const fs::path& from, const fs::path& to) {
  fs::create_directories(to.parent_path());
  fs::rename(from, to);
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

// Where a loaded kernel's halide_* references bind: the process's global scope first
// (a program that links a Halide runtime itself), else the cache's shared runtime.
void* runtime_symbol(void* runtime, const char* name) {
  if (void* p = ::dlsym(RTLD_DEFAULT, name)) return p;
  return ::dlsym(runtime, name);
}

struct SharedRuntime {
  fs::path path;
  std::string rpath;  // from a kernel's entry directory
};

// Shared runtimes loaded by this process, by cache directory and target; and, by cache
// directory, why shared objects cannot be made there (decided by the first failure).
struct Loader {
  std::mutex mutex;
  std::map<std::string, SharedRuntime> runtimes;
  std::map<std::string, std::string> unavailable;
};

Loader& loader() {
  static Loader l;
  return l;
}

void install_hooks(void* runtime, const KernelHeapHooks& heap) {
  using SetMalloc = decltype(&::halide_set_custom_malloc);
  using SetFree = decltype(&::halide_set_custom_free);
  auto set_malloc = reinterpret_cast<SetMalloc>(runtime_symbol(runtime, "halide_set_custom_malloc"));
  auto set_free = reinterpret_cast<SetFree>(runtime_symbol(runtime, "halide_set_custom_free"));
  void* set_parallel = runtime_symbol(runtime, "halide_set_custom_parallel_runtime");
  if (!set_malloc || !set_free || !set_parallel)
    throw std::runtime_error("the kernel cache's Halide runtime lacks its hook setters");
  if (heap.allocate) set_malloc(heap.allocate);
  if (heap.release) set_free(heap.release);
  install_openmp_parallel_runtime_into(set_parallel);
}

// The shared runtime for `target`, loaded (built into the cache first if missing), or
// nullopt with `why` when no shared object can be made. Caller holds the loader's lock.
std::optional<SharedRuntime> shared_runtime(Loader& l, const fs::path& cache, const Halide::Target& target,
                                            const KernelHeapHooks& heap, std::string* why) {
  const Halide::Target rt_target = target.without_feature(Halide::Target::NoRuntime);
  const std::string target_string = rt_target.to_string();
  const std::string loaded_key = cache.string() + "|" + target_string;
  if (auto it = l.runtimes.find(loaded_key); it != l.runtimes.end()) {
    if (fs::exists(it->second.path)) return it->second;
    l.runtimes.erase(it);  // the cache was cleared under us: store it again
  }
  const std::string id = sha256_hex(target_string + "|Halide " + CONVGEN_HALIDE_VERSION).substr(0, 16);
  const std::string soname = "libconvgen_halide_runtime_" + id + ".so";
  const fs::path dir = cache / "runtime" / id;
  const fs::path path = dir / soname;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!fs::exists(path)) {
      Scratch scratch(cache);
      const fs::path object = scratch / "runtime.o";
      Halide::compile_standalone_runtime(object.string(), rt_target);
      const LinkResult link = link_shared_object((scratch / soname).string(), soname, {object.string()}, "",
                                                 (scratch / "link.log").string());
      if (!link.ok) {
        *why = link.message;
        return std::nullopt;
      }
      publish(scratch / soname, path);
    }
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      // Damaged (e.g. a disk error): replace it once.
      *why = fmt::format("cannot load the kernel cache's Halide runtime {}: {}", path.string(), dl_error());
      std::error_code ec;
      fs::remove(path, ec);
      record_kernel_cache_event(KernelCacheEvent::Rebuilt);
      continue;
    }
    install_hooks(handle, heap);
    SharedRuntime rt{path, "$ORIGIN/../../runtime/" + id};
    l.runtimes[loaded_key] = rt;
    return rt;
  }
  return std::nullopt;
}

}  // namespace

std::unique_ptr<LoadedKernel> LoadedKernel::open(const std::string& key, const std::string& pass,
                                                 const Halide::Target& target, const Build& build,
                                                 const KernelHeapHooks& heap) {
  const std::optional<fs::path> cache = kernel_cache_dir();
  if (!cache) {
    record_kernel_cache_event(KernelCacheEvent::Jit);
    return nullptr;
  }
  SharedRuntime runtime;
  {
    Loader& l = loader();
    std::lock_guard<std::mutex> lock(l.mutex);
    if (l.unavailable.count(cache->string())) {
      record_kernel_cache_event(KernelCacheEvent::Jit);
      return nullptr;
    }
    std::string why;
    std::optional<SharedRuntime> rt;
    try {
      rt = shared_runtime(l, *cache, target, heap, &why);
    } catch (const std::exception& e) {
      why = fmt::format("kernel cache {}: {}", cache->string(), e.what());
    }
    if (!rt) {
      l.unavailable[cache->string()] = why;
      record_kernel_cache_event(KernelCacheEvent::Jit, why);
      return nullptr;
    }
    runtime = *rt;
  }

  const std::string name = kernel_function_name(pass, key);
  const fs::path entry = kernel_cache_entry(*cache, key);
  const fs::path so = entry / (name + ".so");
  const fs::path key_file = entry / (name + ".so.key");
  const std::string key_text = fmt::format("{}\nHalide {}\n", key, CONVGEN_HALIDE_VERSION);

  auto try_load = [&]() -> std::unique_ptr<LoadedKernel> {
    if (read_text(key_file) != key_text) return nullptr;
    void* library = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library) return nullptr;
    void* entry_point = ::dlsym(library, (name + "_argv").c_str());
    if (!entry_point) {
      ::dlclose(library);
      return nullptr;
    }
    std::unique_ptr<LoadedKernel> k(new LoadedKernel());
    k->library_ = library;
    k->entry_ = reinterpret_cast<int (*)(void**)>(entry_point);
    k->path_ = so.string();
    return k;
  };

  const bool present = fs::exists(so);
  if (present) {
    if (auto k = try_load()) {
      // Marks the entry used (trim_kernel_cache removes the least recently used).
      std::error_code ec;
      fs::last_write_time(key_file, fs::file_time_type::clock::now(), ec);
      record_kernel_cache_event(KernelCacheEvent::Loaded);
      return k;
    }
  }

  Halide::Pipeline pipeline;
  std::vector<Halide::Argument> arguments;
  build(&pipeline, &arguments);
  std::string failure;
  try {
    Scratch scratch(*cache);
    const fs::path object = scratch / (name + ".o");
    pipeline.compile_to_object(object.string(), arguments, name, target.with_feature(Halide::Target::NoRuntime));
    const LinkResult link = link_shared_object((scratch / (name + ".so")).string(), name + ".so",
                                               {object.string(), runtime.path.string()}, runtime.rpath,
                                               (scratch / "link.log").string());
    if (link.ok) {
      write_text(scratch / "key", key_text);
      // The key first: a reader that finds the shared object finds its key too.
      publish(scratch / "key", key_file);
      publish(scratch / (name + ".so"), so);
    } else {
      failure = link.message;
    }
  } catch (const std::filesystem::filesystem_error& e) {
    failure = fmt::format("kernel cache {}: {}", cache->string(), e.what());
  }
  std::unique_ptr<LoadedKernel> k = failure.empty() ? try_load() : nullptr;
  if (!k) {
    if (failure.empty()) failure = fmt::format("cannot load {}: {}", so.string(), dl_error());
    Loader& l = loader();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.unavailable.emplace(cache->string(), failure);
    record_kernel_cache_event(KernelCacheEvent::Jit, failure);
    return nullptr;
  }
  record_kernel_cache_event(present ? KernelCacheEvent::Rebuilt : KernelCacheEvent::Built);
  // Keeps the cache within its bound: checked on this process's first store and every
  // 64th after (a tuning run stores thousands of candidates).
  static std::atomic<int64_t> stores{0};
  if (stores++ % 64 == 0) trim_kernel_cache(*cache, kernel_cache_max_bytes());
  return k;
}

LoadedKernel::~LoadedKernel() {
  if (library_) ::dlclose(library_);
}

int LoadedKernel::call(const std::vector<halide_buffer_t*>& buffers) const {
  std::vector<void*> args(buffers.begin(), buffers.end());
  return entry_(args.data());
}

}  // namespace convgen
