// The kernel cache: one content-addressed directory per machine (per user) that every
// convgen process shares. `compile` stores each kernel's static library there; the
// processes that run kernels in-process (train, run, check, tune, convgen-bench, the
// tests) store a shared object of the same kernel beside it and load it with dlopen,
// so a layer's kernel is compiled once per machine instead of once per process.
//
// An entry is named by the kernel's key -- normalised descriptor | pass | schedule |
// target | generator hash, what decides the kernel's code -- and the Halide version.
// Files are published by rename, so a crash or kill -9 never leaves a partial file
// under its final name; processes that build the same kernel at once each publish the
// same code and the last rename wins. Deleting the directory at any time is safe.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

// $CONVGEN_CACHE_DIR, else $XDG_CACHE_HOME/convgen, else ~/.cache/convgen, else
// <tmp>/convgen-cache.
std::filesystem::path default_kernel_cache_dir();

// The cache this process uses: default_kernel_cache_dir(), or off when the environment
// says CONVGEN_CACHE=off; the CLI's --cache-dir / --no-cache set it per command.
// nullopt: off (kernels are JIT-compiled in-process, nothing is stored).
std::optional<std::filesystem::path> kernel_cache_dir();
void set_kernel_cache_dir(const std::filesystem::path& dir);
void disable_kernel_cache();

// The layout of an entry's files and the loader's calling convention; part of every
// entry's name and key file, raised when either changes (the generator hash covers only
// the code that shapes kernels).
constexpr const char* kKernelCacheFormat = "kernel cache format 1";

// "descriptor|pass|schedule|target|generator hash": what decides a kernel's code.
std::string kernel_cache_key(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                             const std::string& target);
// The kernel's C function name: "convgen_<pass>_" + 16 hex digits of the key's SHA-256.
std::string kernel_function_name(const std::string& pass, const std::string& key);
// The key's entry directory: cache/kernels/<32 hex digits of SHA-256(key | Halide version
// | kKernelCacheFormat)>.
std::filesystem::path kernel_cache_entry(const std::filesystem::path& cache, const std::string& key);

// The cache's size bound: $CONVGEN_CACHE_MAX_SIZE ("500M", "4G", bytes without a
// suffix), default 2G. Usage error naming the variable when it does not parse.
int64_t kernel_cache_max_bytes();

// Removes the least recently used entries (by their files' modification times; loading
// a kernel or a compile finding it touches its entry) until the entries take at most 90%
// of `max_bytes`; an entry used in the last hour is never removed, so a process that just
// found it can still read it. Also removes scratch directories a killed build left in
// tmp/ more than a day ago. Returns the bytes removed.
int64_t trim_kernel_cache(const std::filesystem::path& cache, int64_t max_bytes);

// What the cache holds: entries (kernels), their shared objects and static libraries,
// the shared runtimes, and the bytes of all files.
struct KernelCacheUsage {
  int64_t entries = 0, shared_objects = 0, static_libraries = 0, runtimes = 0, bytes = 0;
};
KernelCacheUsage kernel_cache_usage(const std::filesystem::path& cache);

// Removes every entry and runtime, and scratch directories older than an hour (the
// cache's own subdirectories, nothing else under `cache`). A process running meanwhile
// keeps the kernels it loaded; one that misses an entry builds it again, or JIT-compiles
// it if its build was under way. Returns the bytes removed.
int64_t clear_kernel_cache(const std::filesystem::path& cache);

// What this process did with the cache so far, for --verbose.
struct KernelCacheStats {
  int64_t loaded = 0;     // shared objects found in the cache and loaded
  int64_t built = 0;      // compiled, linked and stored
  int64_t jit = 0;        // JIT-compiled in-process (cache off, or no linker)
  int64_t rebuilt = 0;    // entries that did not load (damaged, other key) and were replaced
  int64_t trimmed_bytes = 0;  // removed to keep the cache within its size bound
  std::string fallback;   // why shared objects could not be made here ("" when they could)
};
KernelCacheStats kernel_cache_stats();
// One line for --verbose: where the cache is and what was loaded, built or JIT-compiled.
std::string kernel_cache_summary();

}  // namespace convgen
