#include "generator/kernel_cache/loaded_kernel.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "generator/kernel_cache/kernel_cache.h"
#include "generator/kernel_cache/kernel_cache_stats.h"
#include "generator/kernel_cache/link_shared_object.h"
#include "generator/object_code/object_code.h"
#include "runtime/parallel/parallel_runtime.h"
#include "schedules/build_info.h"
#include "schedules/sha256.h"

namespace convgen {

namespace fs = std::filesystem;

namespace {

// A private scratch directory under the cache's tmp/ for one build or copy (mkdtemp: no
// two processes share one, whatever their pid namespaces); removed afterwards.
class Scratch {
 public:
  explicit Scratch(const fs::path& cache) {
    fs::create_directories(cache / "tmp");
    std::string pattern = (cache / "tmp" / fmt::format("{}-XXXXXX", ::getpid())).string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("cannot create a scratch directory in " + pattern);
    dir_ = pattern;
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

// Moves `from` to `to` in one rename (both live under the cache). The entry directory is
// made again if a trim or clear removed it meanwhile.
void publish(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  for (int attempt = 0; attempt < 3; ++attempt) {
    fs::create_directories(to.parent_path());
    fs::rename(from, to, ec);
    if (!ec || ec != std::errc::no_such_file_or_directory) break;
  }
  if (ec) throw fs::filesystem_error("cannot store", from, to, ec);
}

std::string dl_error() {
  const char* e = ::dlerror();
  return e ? e : "unknown error";
}

struct SharedRuntime {
  fs::path path;
  std::string rpath;  // from a kernel's entry directory
};

// Shared runtimes loaded by this process, by cache directory and target; and, by cache
// directory, why shared objects are not used there (decided once).
struct Loader {
  std::mutex mutex;
  std::map<std::string, SharedRuntime> runtimes;
  std::map<std::string, std::string> unavailable;
  std::map<std::string, bool> checked;
};

Loader& loader() {
  static Loader l;
  return l;
}

// Why this process must not load kernels from `cache`, or nullopt. A program that links
// a Halide runtime of its own exports it to the global scope, where loaded kernels would
// bind first, and its hooks are its own business. A cache directory another user owns
// could hold code planted for us.
std::optional<std::string> refusal(const fs::path& cache) {
  if (::dlsym(RTLD_DEFAULT, "halide_malloc"))
    return std::string("this program links a Halide runtime of its own, so kernels are JIT-compiled");
  std::error_code ec;
  fs::create_directories(cache, ec);
  if (ec) return fmt::format("cannot create {}: {}", cache.string(), ec.message());
  struct stat st {};
  if (::stat(cache.c_str(), &st) != 0) return fmt::format("cannot read {}", cache.string());
  if (st.st_uid != ::geteuid()) return fmt::format("{} belongs to another user, so nothing is loaded from it", cache.string());
  return std::nullopt;
}

void install_hooks(void* runtime, const KernelHeapHooks& heap) {
  using SetMalloc = decltype(&::halide_set_custom_malloc);
  using SetFree = decltype(&::halide_set_custom_free);
  auto set_malloc = reinterpret_cast<SetMalloc>(::dlsym(runtime, "halide_set_custom_malloc"));
  auto set_free = reinterpret_cast<SetFree>(::dlsym(runtime, "halide_set_custom_free"));
  void* set_parallel = ::dlsym(runtime, "halide_set_custom_parallel_runtime");
  if (!set_malloc || !set_free || !set_parallel)
    throw std::runtime_error("the kernel cache's Halide runtime lacks its hook setters");
  if (heap.allocate) set_malloc(heap.allocate);
  if (heap.release) set_free(heap.release);
  install_openmp_parallel_runtime_into(set_parallel);
}

// The shared runtime for `target`, loaded (built into the cache first if missing), or
// nullopt with `why` when no shared object can be made. Caller holds the loader's lock.
std::optional<SharedRuntime> shared_runtime(Loader& l, const fs::path& cache, const Halide::Target& target,
                                            const KernelHeapHooks& heap, std::string* why, bool* linker_missing) {
  const Halide::Target rt_target = target.without_feature(Halide::Target::NoRuntime);
  const std::string target_string = rt_target.to_string();
  const std::string loaded_key = cache.string() + "|" + target_string;
  if (auto it = l.runtimes.find(loaded_key); it != l.runtimes.end()) {
    if (fs::exists(it->second.path)) return it->second;
    l.runtimes.erase(it);  // the cache was cleared under us: store it again
  }
  const std::string id = sha256_hex(target_string + "|Halide " + CONVGEN_HALIDE_VERSION).substr(0, 16);
  const std::string soname = "libconvgen_halide_runtime_" + id + ".so";
  const fs::path path = cache / "runtime" / id / soname;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (!fs::exists(path)) {
      Scratch scratch(cache);
      const fs::path object = scratch / "runtime.o";
      Halide::compile_standalone_runtime(object.string(), rt_target);
      const LinkResult link = link_shared_object((scratch / soname).string(), soname, {object.string()}, "",
                                                 (scratch / "link.log").string());
      if (!link.ok) {
        *why = link.message;
        *linker_missing = link.linker_missing;
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

// The runtime to link and load kernels of `cache` with, or nullopt when this process does
// not use shared objects there; `why` then says why, the first time it is decided.
std::optional<SharedRuntime> acquire_runtime(const fs::path& cache, const Halide::Target& target,
                                             const KernelHeapHooks& heap, std::string* why_not) {
  Loader& l = loader();
  std::lock_guard<std::mutex> lock(l.mutex);
  const std::string dir = cache.string();
  if (l.unavailable.count(dir)) return std::nullopt;
  std::string why;
  bool linker_missing = false;
  std::optional<SharedRuntime> rt;
  if (!l.checked[dir]) {
    l.checked[dir] = true;
    if (auto refused = refusal(cache)) why = *refused;
  }
  if (why.empty()) {
    try {
      rt = shared_runtime(l, cache, target, heap, &why, &linker_missing);
    } catch (const std::exception& e) {
      why = fmt::format("kernel cache {}: {}", dir, e.what());
    }
  }
  if (!rt) {
    l.unavailable[dir] = why;
    *why_not = why;
  }
  return rt;
}

std::unique_ptr<LoadedKernel> load(const fs::path& so, const std::string& name) {
  void* library = ::dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) return nullptr;
  void* entry_point = ::dlsym(library, (name + "_argv").c_str());
  if (!entry_point) {
    ::dlclose(library);
    return nullptr;
  }
  return std::unique_ptr<LoadedKernel>(new LoadedKernel(library, reinterpret_cast<int (*)(void**)>(entry_point),
                                                        so.string()));
}

// The entry's shared object loaded once more at its own addresses: a copy under another
// path is another object to the dynamic loader (the copy's file is removed at once; its
// mapping stays).
std::unique_ptr<LoadedKernel> load_private_copy(const fs::path& cache, const fs::path& so, const std::string& name) {
  Scratch scratch(cache);
  const fs::path copy = scratch / (name + ".so");
  fs::copy_file(so, copy);
  return load(copy, name);
}

}  // namespace

LoadedKernel::LoadedKernel(void* library, int (*entry)(void**), std::string path)
    : library_(library), entry_(entry), path_(std::move(path)) {}

std::unique_ptr<LoadedKernel> LoadedKernel::open(const std::string& key, const std::string& pass,
                                                 const Halide::Target& target, const Build& build,
                                                 const KernelHeapHooks& heap, bool private_copy,
                                                 bool streaming_output_stores) {
  const std::optional<fs::path> cache = kernel_cache_dir();
  if (!cache) {
    record_kernel_cache_event(KernelCacheEvent::Jit);
    return nullptr;
  }
  std::string why_not;
  std::optional<SharedRuntime> runtime = acquire_runtime(*cache, target, heap, &why_not);
  if (!runtime) {
    record_kernel_cache_event(KernelCacheEvent::Jit, why_not);
    return nullptr;
  }

  const std::string name = kernel_function_name(pass, key);
  const fs::path entry = kernel_cache_entry(*cache, key);
  const fs::path so = entry / (name + ".so");
  const fs::path key_file = entry / (name + ".so.key");
  const std::string key_text = fmt::format("{}\nHalide {}\n{}\n", key, CONVGEN_HALIDE_VERSION, kKernelCacheFormat);
  auto open_entry = [&]() -> std::unique_ptr<LoadedKernel> {
    if (read_text(key_file) != key_text) return nullptr;
    try {
      return private_copy ? load_private_copy(*cache, so, name) : load(so, name);
    } catch (const std::exception&) {
      return nullptr;  // gone meanwhile (a trim or clear): built again below
    }
  };

  const bool present = fs::exists(so);
  if (present) {
    if (auto k = open_entry()) {
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
  // Anything that goes wrong from here on -- a full disk, a clear or trim under us, a
  // failing link -- costs this kernel its shared object, not the process its cache: the
  // caller JIT-compiles it. (A schedule Halide refuses is refused there again.) Only a
  // linker that cannot run at all turns shared objects off for the process.
  std::string failure;
  for (int attempt = 0; attempt < 2; ++attempt) {
    failure.clear();
    bool linker_missing = false;
    try {
      Scratch scratch(*cache);
      const fs::path object = scratch / (name + ".o");
      compile_kernel_object({pipeline, arguments, name, target.with_feature(Halide::Target::NoRuntime),
                             streaming_output_stores},
                            object.string());
      if (!fs::exists(runtime->path)) runtime = acquire_runtime(*cache, target, heap, &why_not);
      if (!runtime) {
        record_kernel_cache_event(KernelCacheEvent::Jit, why_not);
        return nullptr;
      }
      const LinkResult link = link_shared_object((scratch / (name + ".so")).string(), name + ".so",
                                                 {object.string(), runtime->path.string()}, runtime->rpath,
                                                 (scratch / "link.log").string());
      if (link.ok) {
        write_text(scratch / "key", key_text);
        // The key first: a reader that finds the shared object finds its key too.
        publish(scratch / "key", key_file);
        publish(scratch / (name + ".so"), so);
        break;
      }
      failure = link.message;
      linker_missing = link.linker_missing;
    } catch (const std::exception& e) {
      failure = fmt::format("kernel cache {}: {}", cache->string(), e.what());
    }
    if (linker_missing) {
      Loader& l = loader();
      std::lock_guard<std::mutex> lock(l.mutex);
      l.unavailable.emplace(cache->string(), failure);
      break;
    }
  }
  std::unique_ptr<LoadedKernel> k = failure.empty() ? open_entry() : nullptr;
  if (!k) {
    if (failure.empty()) failure = fmt::format("cannot load {}: {}", so.string(), dl_error());
    record_kernel_cache_event(KernelCacheEvent::Jit, failure);
    return nullptr;
  }
  record_kernel_cache_event(present ? KernelCacheEvent::Rebuilt : KernelCacheEvent::Built);
  // Keeps the cache within its bound: checked on this process's first store and every
  // 64th after (a tuning run stores thousands of candidates). A bad bound is reported by
  // `convgen cache`, never by a kernel.
  static std::atomic<int64_t> stores{0};
  if (stores++ % 64 == 0) {
    try {
      trim_kernel_cache(*cache, kernel_cache_max_bytes());
    } catch (const std::exception&) {
    }
  }
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
