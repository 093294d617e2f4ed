#include "generator/conv/jit.h"

#include "generator/conv/backward.h"
#include "generator/conv/kernel_pipeline.h"
#include "generator/kernel_cache/kernel_cache.h"
#include "generator/kernel_cache/loaded_kernel.h"
#include "runtime/parallel/kernel_heap.h"
#include "runtime/parallel/openmp_par_for.h"

#include <atomic>
#include <cstdlib>
#include <optional>
#include <stdexcept>

namespace convgen {

using namespace Halide;

namespace {

// Heap accounting for the packed panels, through Halide's JIT allocator hooks; the
// blocks come from the kernel heap (reused across calls, as AOT kernels' are).
std::atomic<int64_t> g_live_bytes{0}, g_peak_bytes{0};

struct AllocationHeader {
  int64_t size;
};
constexpr size_t kHeaderBytes = kKernelHeapAlignment;  // keeps the payload aligned as the heap's

void* counted_allocate(size_t size) {
  void* raw = kernel_heap_allocate(size + kHeaderBytes);
  if (!raw) return nullptr;
  auto* header = static_cast<AllocationHeader*>(raw);
  header->size = static_cast<int64_t>(size);
  int64_t live = g_live_bytes.fetch_add(header->size) + header->size;
  int64_t peak = g_peak_bytes.load();
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return static_cast<char*>(raw) + kHeaderBytes;
}

void counted_release(void* p) {
  if (!p) return;
  auto* header = reinterpret_cast<AllocationHeader*>(static_cast<char*>(p) - kHeaderBytes);
  g_live_bytes.fetch_sub(header->size);
  kernel_heap_release(header);
}

void* counting_malloc(JITUserContext*, size_t size) { return counted_allocate(size); }
void counting_free(JITUserContext*, void* p) { counted_release(p); }

// The same heap for kernels loaded from the kernel cache (generator/kernel_cache).
KernelHeapHooks loaded_kernel_heap() {
  KernelHeapHooks hooks;
  hooks.allocate = [](void*, size_t size) { return counted_allocate(size); };
  hooks.release = [](void*, void* p) { counted_release(p); };
  return hooks;
}

// The kernel cache's key of a JIT kernel: compile's key, plus the build options that
// change the code. nullopt: never cached (the test-only planted bug).
std::optional<std::string> cache_key(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                                     const TargetInfo& t, const ForwardBuildOptions& options) {
  if (options.inject_padding_bug) return std::nullopt;
  std::string key = kernel_cache_key(d, pass, s, t.target);
  if (options.output_is_staged) key += "|output_is_staged";
  if (options.weights_transposed) key += "|weights_transposed";
  return key;
}

// The kernel from the kernel cache (loaded, or compiled and stored first); nullptr when
// it must be JIT-compiled here (cache off, no linker, planted bug).
std::unique_ptr<LoadedKernel> open_cached(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                                          const TargetInfo& t, const ForwardBuildOptions& options, KernelSource source,
                                          const Target& target, const LoadedKernel::Build& build) {
  const std::optional<std::string> key = cache_key(d, pass, s, t, options);
  if (!key) return nullptr;
  return LoadedKernel::open(*key, pass, target, build, loaded_kernel_heap(), source == KernelSource::PrivateCopy,
                            streams_output(pass, s));
}

void check_status(int status, const char* kernel) {
  if (status != 0)
    throw std::runtime_error(std::string(kernel) + ": the kernel failed with Halide status " + std::to_string(status));
}

// Heap and parallel-loop hooks every convgen JIT pipeline uses.
void install_handlers(Pipeline& pipeline) {
  JITHandlers handlers;
  handlers.custom_malloc = counting_malloc;
  handlers.custom_free = counting_free;
  // Parallel loops on the process's OpenMP threads, as AOT kernels do through
  // convgen::runtime: one thread pool per process.
  handlers.custom_do_par_for = openmp_par_for<JITUserContext>;
  pipeline.jit_handlers() = handlers;
}

// Runs `realize` and returns the peak heap bytes it allocated beyond what was live.
template <typename F>
int64_t measure_workspace(F&& realize) {
  g_peak_bytes = g_live_bytes.load();
  const int64_t base = g_live_bytes.load();
  realize();
  return g_peak_bytes.load() - base;
}

// The forward output's 4-D view (kg, g, pix, n) of an NHWK tensor.
Halide::Buffer<float> nhwk_view(const ConvDescriptor& d, const float* data) {
  return Halide::Buffer<float>(const_cast<float*>(data), {int(d.ocg()), int(d.g), int(d.oh() * d.ow()), int(d.mb)});
}

// The forward output (kg, g, pix, n): dense NHWK, or with +outstride a channel slice whose
// pixels lie out_stride floats apart.
Halide::Buffer<float> output_view(const ConvDescriptor& d, float* y) {
  const int pq = int(d.oh() * d.ow()), stride = int(d.out_pixel_stride());
  halide_dimension_t dims[4] = {{0, int(d.ocg()), 1, 0},
                                {0, int(d.g), int(d.ocg()), 0},
                                {0, pq, stride, 0},
                                {0, int(d.mb), stride * pq, 0}};
  return Halide::Buffer<float>(y, 4, dims);
}

// A y buffer for kernels that ignore it (no fused ReLU): one element, never read.
Halide::Buffer<float> unused_mask() {
  static float storage[1] = {0.0f};
  return Halide::Buffer<float>(storage, {1, 1, 1, 1});
}

// The weights argument: ONNX OIHW as (s, r, c, k, g), or the flat packed panels.
Halide::Buffer<float> weights_view(const ConvDescriptor& d, const WeightPanels& panels, const float* w) {
  if (!panels.empty()) return Halide::Buffer<float>(const_cast<float*>(w), {static_cast<int>(panels.floats)});
  return Halide::Buffer<float>(const_cast<float*>(w), {int(d.kw), int(d.kh), int(d.icg()), int(d.ocg()), int(d.g)});
}

}  // namespace

struct JitForwardKernel::Impl {
  std::unique_ptr<LoadedKernel> loaded;  // from the kernel cache; else JIT-compiled below
  ForwardPipeline fp;
  Pipeline pipeline;
  Target target;
  std::atomic<int64_t> last_peak{0};  // one kernel may run on several threads at once
};

JitForwardKernel::JitForwardKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                   const ForwardBuildOptions& options, KernelSource source)
    : d_(d), s_(s), impl_(std::make_unique<Impl>()) {
  panels_ = forward_weight_panels(d, s, t);
  impl_->target = halide_target(t.target);
  auto define = [&] {
    impl_->fp = build_forward(d, s, t, nullptr, options);
    impl_->pipeline = kernel_pipeline({impl_->fp.output}, impl_->fp.prefetches);
  };
  impl_->loaded = open_cached(d, "fwd", s, t, options, source, impl_->target, [&](Pipeline* p, std::vector<Argument>* a) {
    define();
    *p = impl_->pipeline;
    *a = impl_->fp.arguments();
  });
  if (impl_->loaded) {
    impl_->pipeline = Pipeline();
    return;
  }
  if (!impl_->pipeline.defined()) define();  // the cache's build made it already otherwise
  install_handlers(impl_->pipeline);
  impl_->pipeline.compile_jit(impl_->target);
}

JitForwardKernel::~JitForwardKernel() = default;

void JitForwardKernel::run(const float* x, const float* w, const float* bias, float* y, const float* residual) {
  const ConvDescriptor& d = d_;
  const int n = int(d.mb), g = int(d.g), cg = int(d.icg());
  using B = Halide::Buffer<float>;
  B in(const_cast<float*>(x), {cg, g, int(d.iw), int(d.ih), n});
  B wt = weights_view(d, panels_, w);
  static float no_bias_storage[1] = {0.0f};
  B bs = bias ? B(const_cast<float*>(bias), {int(d.oc)}) : B(no_bias_storage, {1});
  if (!bias && d.bias) throw std::invalid_argument("JitForwardKernel::run: the layer has a bias but none was given");
  if (d.residual != (residual != nullptr))
    throw std::invalid_argument("JitForwardKernel::run: a residual exactly when the layer has +residual");
  B out = output_view(d, y);
  B res = residual ? nhwk_view(d, residual) : B();
  if (impl_->loaded) {
    std::vector<halide_buffer_t*> args = {in.raw_buffer(), wt.raw_buffer(), bs.raw_buffer()};
    if (residual) args.push_back(res.raw_buffer());
    args.push_back(out.raw_buffer());
    impl_->last_peak = measure_workspace([&] { check_status(impl_->loaded->call(args), "JitForwardKernel"); });
    return;
  }
  ParamMap params;
  params.set(impl_->fp.input, in);
  params.set(impl_->fp.weights, wt);
  params.set(impl_->fp.bias, bs);
  if (residual) params.set(impl_->fp.residual, res);
  impl_->last_peak = measure_workspace([&] { impl_->pipeline.realize(out, impl_->target, params); });
}

int64_t JitForwardKernel::last_workspace_bytes() const { return impl_->last_peak; }

// ---- backward-data ------------------------------------------------------------------

struct JitBackwardDataKernel::Impl {
  std::unique_ptr<LoadedKernel> loaded;
  BackwardDataPipeline bp;
  Pipeline pipeline;
  Target target;
  std::atomic<int64_t> last_peak{0};  // one kernel may run on several threads at once
};

JitBackwardDataKernel::JitBackwardDataKernel(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t,
                                             const ForwardBuildOptions& options, KernelSource source)
    : d_(d), impl_(std::make_unique<Impl>()) {
  panels_ = backward_data_weight_panels(d, s, t);
  impl_->target = halide_target(t.target);
  auto define = [&] {
    impl_->bp = build_backward_data(d, s, t, nullptr, options);
    impl_->pipeline = kernel_pipeline(impl_->bp.dx);
  };
  impl_->loaded = open_cached(d, "bwd_data", s, t, options, source, impl_->target, [&](Pipeline* p, std::vector<Argument>* a) {
    define();
    *p = impl_->pipeline;
    *a = impl_->bp.arguments();
  });
  if (impl_->loaded) {
    impl_->pipeline = Pipeline();
    return;
  }
  if (!impl_->pipeline.defined()) define();  // the cache's build made it already otherwise
  install_handlers(impl_->pipeline);
  impl_->pipeline.compile_jit(impl_->target);
}

JitBackwardDataKernel::~JitBackwardDataKernel() = default;

void JitBackwardDataKernel::run(const float* dy, const float* w, const float* y, float* dx) {
  const ConvDescriptor& d = d_;
  if (d.relu && !y) throw std::invalid_argument("JitBackwardDataKernel::run: the layer fused a ReLU but y is null");
  using B = Halide::Buffer<float>;
  B wt = weights_view(d, panels_, w);
  B out(dx, {int(d.icg()), int(d.g), int(d.ih * d.iw), int(d.mb)});
  if (impl_->loaded) {
    B dy_view = nhwk_view(d, dy), y_view = d.relu ? nhwk_view(d, y) : unused_mask();
    impl_->last_peak = measure_workspace([&] {
      check_status(impl_->loaded->call({dy_view.raw_buffer(), wt.raw_buffer(), y_view.raw_buffer(), out.raw_buffer()}),
                   "JitBackwardDataKernel");
    });
    return;
  }
  ParamMap params;
  params.set(impl_->bp.dy, nhwk_view(d, dy));
  params.set(impl_->bp.weights, wt);
  params.set(impl_->bp.y, d.relu ? nhwk_view(d, y) : unused_mask());
  impl_->last_peak = measure_workspace([&] { impl_->pipeline.realize(out, impl_->target, params); });
}

int64_t JitBackwardDataKernel::last_workspace_bytes() const { return impl_->last_peak; }

// ---- backward-weights ---------------------------------------------------------------

struct JitBackwardWeightsKernel::Impl {
  std::unique_ptr<LoadedKernel> loaded;
  BackwardWeightsPipeline bp;
  Pipeline pipeline;
  Target target;
  std::atomic<int64_t> last_peak{0};  // one kernel may run on several threads at once
};

JitBackwardWeightsKernel::JitBackwardWeightsKernel(const ConvDescriptor& d, const ConvSchedule& s,
                                                   const TargetInfo& t, const ForwardBuildOptions& options,
                                                   KernelSource source)
    : d_(d), impl_(std::make_unique<Impl>()) {
  impl_->target = halide_target(t.target);
  auto define = [&] {
    impl_->bp = build_backward_weights(d, s, t, nullptr, options);
    impl_->pipeline = kernel_pipeline(impl_->bp.outputs(), impl_->bp.prefetches);
  };
  impl_->loaded = open_cached(d, "bwd_weights", s, t, options, source, impl_->target, [&](Pipeline* p, std::vector<Argument>* a) {
    define();
    *p = impl_->pipeline;
    *a = impl_->bp.arguments();
  });
  if (impl_->loaded) {
    impl_->pipeline = Pipeline();
    return;
  }
  if (!impl_->pipeline.defined()) define();  // the cache's build made it already otherwise
  install_handlers(impl_->pipeline);
  impl_->pipeline.compile_jit(impl_->target);
}

JitBackwardWeightsKernel::~JitBackwardWeightsKernel() = default;

void JitBackwardWeightsKernel::run(const float* x, const float* dy, const float* y, float* dw, float* db) {
  const ConvDescriptor& d = d_;
  if (d.relu && !y) throw std::invalid_argument("JitBackwardWeightsKernel::run: the layer fused a ReLU but y is null");
  if (d.bias && !db) throw std::invalid_argument("JitBackwardWeightsKernel::run: the layer has a bias but db is null");
  using B = Halide::Buffer<float>;
  B in(const_cast<float*>(x), {int(d.icg()), int(d.g), int(d.iw), int(d.ih), int(d.mb)});
  B dw_out(dw, {int(d.kw), int(d.kh), int(d.icg()), int(d.ocg()), int(d.g)});
  if (impl_->loaded) {
    B dy_view = nhwk_view(d, dy), y_view = d.relu ? nhwk_view(d, y) : unused_mask();
    std::vector<halide_buffer_t*> buffers = {in.raw_buffer(), dy_view.raw_buffer(), y_view.raw_buffer(),
                                             dw_out.raw_buffer()};
    B db_out = d.bias ? B(db, {int(d.oc)}) : B();
    if (d.bias) buffers.push_back(db_out.raw_buffer());
    impl_->last_peak = measure_workspace(
        [&] { check_status(impl_->loaded->call(buffers), "JitBackwardWeightsKernel"); });
    return;
  }
  ParamMap params;
  params.set(impl_->bp.x, in);
  params.set(impl_->bp.dy, nhwk_view(d, dy));
  params.set(impl_->bp.y, d.relu ? nhwk_view(d, y) : unused_mask());
  impl_->last_peak = measure_workspace([&] {
    if (d.bias) {
      B db_out(db, {int(d.oc)});
      impl_->pipeline.realize(Realization({dw_out, db_out}), impl_->target, params);
    } else {
      impl_->pipeline.realize(dw_out, impl_->target, params);
    }
  });
}

int64_t JitBackwardWeightsKernel::last_workspace_bytes() const { return impl_->last_peak; }

}  // namespace convgen
