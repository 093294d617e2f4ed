// How the kernel loader reports what it did (kernel_cache_stats() reads it back).
#pragma once

#include <string>

namespace convgen {

enum class KernelCacheEvent { Loaded, Built, Jit, Rebuilt };

// Counts one event; a non-empty `fallback_reason` (why no shared object could be made)
// is kept if it is the first.
void record_kernel_cache_event(KernelCacheEvent event, const std::string& fallback_reason = "");

}  // namespace convgen
