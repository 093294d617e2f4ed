#include "conv_jit.h"

#include "openmp_par_for.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

namespace convgen {

using namespace Halide;

namespace {

// Heap accounting for the packed panels, through Halide's JIT allocator hooks.
std::atomic<int64_t> g_live_bytes{0}, g_peak_bytes{0};

struct AllocationHeader {
  int64_t size;
  int64_t pad;  // keeps the payload 16-byte aligned
};

void* counting_malloc(JITUserContext*, size_t size) {
  const size_t alignment = 64;
  void* raw = std::aligned_alloc(alignment, ((size + alignment + alignment - 1) / alignment) * alignment);
  if (!raw) return nullptr;
  auto* header = static_cast<AllocationHeader*>(raw);
  header->size = static_cast<int64_t>(size);
  int64_t live = g_live_bytes.fetch_add(header->size) + header->size;
  int64_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(raw) + alignment;
}

void counting_free(JITUserContext*, void* p) {
  if (!p) return;
  auto* header = reinterpret_cast<AllocationHeader*>(static_cast<char*>(p) - 64);
  g_live_bytes.fetch_sub(header->size);
  std::free(header);
}

}  // namespace

struct JitForwardKernel::Impl {
  ForwardPipeline fp;
  Pipeline pipeline;
  Target target;
  int64_t last_peak = 0;
};

JitForwardKernel::JitForwardKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                   const ForwardBuildOptions& options)
    : d_(d), s_(s), impl_(std::make_unique<Impl>()) {
  impl_->fp = build_forward(d, s, t, nullptr, options);
  impl_->pipeline = Pipeline(impl_->fp.output);
  JITHandlers handlers;
  handlers.custom_malloc = counting_malloc;
  handlers.custom_free = counting_free;
  // Parallel loops on the process's OpenMP threads, as AOT kernels do through
  // convgen::runtime: one thread pool per process.
  handlers.custom_do_par_for = openmp_par_for<JITUserContext>;
  impl_->pipeline.jit_handlers() = handlers;
  impl_->target = halide_target(t.target);
  impl_->pipeline.compile_jit(impl_->target);
}

JitForwardKernel::~JitForwardKernel() = default;

void JitForwardKernel::run(const float* x, const float* w, const float* bias, float* y) {
  const ConvDescriptor& d = d_;
  const int n = int(d.mb), g = int(d.g), cg = int(d.icg()), kg = int(d.ocg());
  using B = Halide::Buffer<float>;
  B in(const_cast<float*>(x), {cg, g, int(d.iw), int(d.ih), n});
  B wt(const_cast<float*>(w), {int(d.kw), int(d.kh), cg, kg, g});
  static float no_bias_storage[1] = {0.0f};
  B bs = bias ? B(const_cast<float*>(bias), {int(d.oc)}) : B(no_bias_storage, {1});
  if (!bias && d.bias) throw std::invalid_argument("JitForwardKernel::run: the layer has a bias but none was given");
  B out(y, {kg, g, int(d.oh() * d.ow()), n});
  ParamMap params;
  params.set(impl_->fp.input, in);
  params.set(impl_->fp.weights, wt);
  params.set(impl_->fp.bias, bs);
  g_peak_bytes = g_live_bytes.load();
  const int64_t base = g_live_bytes.load();
  impl_->pipeline.realize(out, impl_->target, params);
  impl_->last_peak = g_peak_bytes.load() - base;
}

int64_t JitForwardKernel::last_workspace_bytes() const { return impl_->last_peak; }

}  // namespace convgen
