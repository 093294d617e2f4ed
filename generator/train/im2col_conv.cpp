// TrainConv over explicit im2col + BLIS SGEMM (runtime/train/train_conv.h, make_im2col_blis_conv): the
// trainer's honest baseline, running the im2col + BLIS convolutions (runtime/im2col/im2col_blis*.h) with
// caller-provided workspaces.
//
// Workspace. Every call takes the calling thread's buffer from one process-wide pool shared
// by all layer objects (and all trainers) alive at the time. Each layer reserves its need
// when it is built -- the largest of its passes' im2col / column matrix plus, in the same
// buffer, the forward's packed weights or a backward's masked dY -- and a thread's buffer
// is grown, lazily on that thread's next call, to the largest need reserved so far. So in
// the trainer each of its T threads ends up with one buffer sized for the largest layer,
// allocated once (the layers are built before the parallel region), and peak memory is
// about T x the largest im2col. Buffers are keyed by the calling thread's identity, not by
// omp_get_thread_num(): threads of different OpenMP teams, or std::threads (all of which
// are OpenMP thread 0), never share one. Only the owning thread ever reads, writes or grows
// a buffer; the mutex guards the pool's map, and a thread-local cache skips it on the
// common path. The pool and its buffers are freed when the last layer object is
// destroyed (buffers of threads that exited stay until then).
//
// Determinism: BLIS is single-threaded (its runtime object), the peers' loops run in a
// fixed order on the calling thread, and nothing depends on the thread's identity except
// which buffer is scratch; the results are the same bits on any thread and any thread count.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "generator/train/conv_factories.h"
#include "runtime/im2col/im2col_blis.h"
#include "runtime/im2col/im2col_blis_backward.h"
#include "runtime/train/train_conv.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

namespace cb = convgen::bench;

// Floats for `bytes`, rounded up to 64 bytes so that every section of a buffer starts on
// a cache line.
int64_t section_floats(int64_t bytes) {
  constexpr int64_t kLine = 16;
  const int64_t floats = (bytes + static_cast<int64_t>(sizeof(float)) - 1) / static_cast<int64_t>(sizeof(float));
  return (floats + kLine - 1) / kLine * kLine;
}

// A thread's last workspace buffer, of the pool with id `pool` (pool ids are never reused,
// so the entry of a destroyed pool can never match a later one).
struct WorkspaceCache {
  uint64_t pool = 0;
  float* data = nullptr;
  int64_t floats = 0;
};
thread_local WorkspaceCache workspace_cache;

class WorkspacePool {
 public:
  // The pool of the process: the one alive, or a new one when every holder has gone.
  static std::shared_ptr<WorkspacePool> shared() {
    static std::mutex mutex;
    static std::weak_ptr<WorkspacePool> current;
    std::lock_guard<std::mutex> lock(mutex);
    std::shared_ptr<WorkspacePool> pool = current.lock();
    if (!pool) {
      pool = std::shared_ptr<WorkspacePool>(new WorkspacePool());
      current = pool;
    }
    return pool;
  }

  // Every thread's buffer will be grown to at least `floats` on its next acquire().
  void reserve(int64_t floats) {
    int64_t now = reserved_.load();
    while (now < floats && !reserved_.compare_exchange_weak(now, floats)) {
    }
  }

  // The calling thread's buffer, at least max(floats, reserved) floats. Valid until this
  // thread's next acquire() on this pool, or the pool's end.
  float* acquire(int64_t floats) {
    const int64_t want = std::max(floats, reserved_.load());
    WorkspaceCache& cache = workspace_cache;
    if (cache.pool == id_ && cache.floats >= want) return cache.data;
    std::lock_guard<std::mutex> lock(mutex_);
    Buffer& b = buffers_[std::this_thread::get_id()];
    if (b.floats < want) {
      b.data.reset();  // free before allocating: no transient 2x
      b.data.reset(new float[static_cast<size_t>(want)]);
      b.floats = want;
    }
    cache = {id_, b.data.get(), b.floats};
    return b.data.get();
  }

 private:
  WorkspacePool() : id_(next_id_.fetch_add(1) + 1) {}

  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t floats = 0;
  };
  static inline std::atomic<uint64_t> next_id_{0};

  const uint64_t id_;
  std::atomic<int64_t> reserved_{0};
  std::mutex mutex_;
  std::unordered_map<std::thread::id, Buffer> buffers_;
};

class Im2colBlisTrainConv : public TrainConv {
 public:
  explicit Im2colBlisTrainConv(const TrainConvRequest& r)
      : d_(r.descriptor),
        needs_dx_(r.needs_backward_data),
        intra_requested_(r.intra_kernel),
        fwd_(d_, 1, nullptr, cb::Buffers::CallerProvided),
        bwd_data_(d_, 1, cb::Buffers::CallerProvided),
        bwd_weights_(d_, 1, cb::Buffers::CallerProvided),
        pool_(WorkspacePool::shared()) {
    fwd_col_ = section_floats(cb::Im2colBlisConv::workspace_bytes_for(d_));
    bwd_data_col_ = section_floats(cb::Im2colBlisBackwardData::workspace_bytes_for(d_));
    bwd_weights_col_ = section_floats(cb::Im2colBlisBackwardWeights::workspace_bytes_for(d_));
    packed_ = section_floats(cb::Im2colBlisConv::packed_weights_bytes_for(d_));
    masked_ = d_.relu ? section_floats(d_.mb * d_.oh() * d_.ow() * d_.oc * static_cast<int64_t>(sizeof(float))) : 0;
    need_ = std::max(fwd_col_ + packed_, bwd_weights_col_ + masked_);
    if (needs_dx_) need_ = std::max(need_, bwd_data_col_ + masked_);
    pool_->reserve(need_);
  }

  void forward(const float* x, const float* w, const float* bias, float* y) override {
    float* ws = pool_->acquire(fwd_col_ + packed_);
    // [im2col matrix | weights re-packed for this call]
    fwd_.run(x, w, bias, y, fwd_col_ > 0 ? ws : nullptr, ws + fwd_col_);
  }

  void backward_data(const float* dy, const float* w, const float* y, float* dx) override {
    float* ws = pool_->acquire(bwd_data_col_ + masked_);
    // [column matrix | dY masked by y > 0]
    const float* g = d_.relu ? mask(dy, y, ws + bwd_data_col_) : dy;
    bwd_data_.run(g, w, dx, bwd_data_col_ > 0 ? ws : nullptr);
  }

  void backward_weights(const float* x, const float* dy, const float* y, float* dw, float* db) override {
    float* ws = pool_->acquire(bwd_weights_col_ + masked_);
    // [im2col matrix | dY masked by y > 0]
    const float* g = d_.relu ? mask(dy, y, ws + bwd_weights_col_) : dy;
    bwd_weights_.run(x, g, dw, d_.bias ? db : nullptr, bwd_weights_col_ > 0 ? ws : nullptr);
  }

  std::string describe() const override {
    const int64_t kib = (need_ * static_cast<int64_t>(sizeof(float)) + 1023) / 1024;
    return fmt::format("im2col + BLIS sgemm for {} (workspace {} KiB per thread){}{}", d_.normalised(), kib,
                       needs_dx_ ? "" : ", no bwd_data: the input needs no gradient",
                       intra_requested_ ? ", intra-kernel parallelism not supported: runs single-threaded" : "");
  }

 private:
  // dY with the forward ReLU's mask applied, into `out`: dY where y > 0, else 0.
  const float* mask(const float* dy, const float* y, float* out) const {
    if (y == nullptr) throw Error(ExitCode::Internal, "im2col+BLIS: a fused-ReLU layer's backward needs y");
    const int64_t n = d_.mb * d_.oh() * d_.ow() * d_.oc;
    for (int64_t i = 0; i < n; ++i) out[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    return out;
  }

  ConvDescriptor d_;
  bool needs_dx_;
  bool intra_requested_;
  // Peers without buffers of their own, BLIS on one thread; their workspace run() is const.
  cb::Im2colBlisConv fwd_;
  cb::Im2colBlisBackwardData bwd_data_;
  cb::Im2colBlisBackwardWeights bwd_weights_;
  std::shared_ptr<WorkspacePool> pool_;
  // Sections of a thread's buffer, in floats (64-byte multiples).
  int64_t fwd_col_ = 0, bwd_data_col_ = 0, bwd_weights_col_ = 0, packed_ = 0, masked_ = 0;
  int64_t need_ = 0;  // this layer's per-thread need: its largest pass
};

}  // namespace

std::unique_ptr<TrainConv> make_im2col_blis_conv(const TrainConvRequest& r, std::vector<std::string>* why) {
  (void)why;
  return std::make_unique<Im2colBlisTrainConv>(r);
}

}  // namespace convgen::model
