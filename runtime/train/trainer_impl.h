// The training engine's state and its jobs (runtime/train/trainer.h is the interface):
// private to the trainer_*.cpp files, one job each --
//   trainer_setup.cpp       values, parameters, kernels and per-micro-batch buffers
//   trainer_phases.cpp      phases between barriers and their scheduling over threads
//   trainer_ops.cpp         the per-operator forward and backward dispatch
//   trainer_batch_norm.cpp  BatchNormalization's mini-batch statistics
//   trainer_gemm.cpp        Gemm / MatMul layers over the whole mini-batch
//   trainer_conv_layers.cpp each Conv's parallel mode, cropped taps and whole-batch gradient
//   trainer_packed_weights.cpp the kernels' weight panels, packed once per mini-batch
//   trainer_update.cpp      gradients summed by the fixed tree, then the SGD update
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "runtime/graph/train_graph.h"
#include "runtime/memory/aligned_buffer.h"
#include "runtime/ops/tensor.h"
#include "runtime/parallel/pairwise_tree.h"
#include "runtime/train/batch_norm_kernels.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "runtime/train/trainer.h"
#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"
#include "schedules/tap_window.h"
#include "schedules/weight_panels.h"

namespace convgen::model {

struct Trainer::Impl {
  // Runs a piece of work, recording the first exception instead of throwing (work on the
  // threads of a parallel region must not throw out of it).
  using Guard = std::function<void(const std::function<void()>&)>;

  // What the trainer knows of each graph value.
  struct ValueInfo {
    std::string name;
    std::vector<int64_t> shape;   // at the micro-batch size m (constants: as they are)
    bool constant = false;
    int parameter = -1;           // index into the parameters, or -1 (frozen / activation)
    int frozen = -1;              // index into the frozen constants
    bool state = false;           // frozen but updated by training (BatchNormalization running statistics)
    bool channels_last = false;   // activations of rank 3 and 4: the kernels' layout
    bool requires_grad = false;   // depends on a parameter: backward reaches it
    int64_t sample_elements = 0;  // activations: elements per sample
  };

  // A micro-batch's part of a whole-mini-batch buffer.
  struct FloatSpan {
    float* p = nullptr;
    size_t n = 0;
    float* data() const { return p; }
    size_t size() const { return n; }
    float* begin() const { return p; }
    float* end() const { return p + n; }
    float& operator[](size_t i) const { return p[i]; }
  };

  // Cache-line aligned floats, not initialised: each micro-batch's slice is first touched
  // by the thread that always runs that micro-batch.
  struct BatchBuffer {
    struct Free {
      void operator()(float* p) const { ::operator delete(p, std::align_val_t(kCacheLineBytes)); }
    };
    std::unique_ptr<float, Free> floats;
    void allocate(size_t n) {
      floats.reset(n ? static_cast<float*>(::operator new(n * sizeof(float), std::align_val_t(kCacheLineBytes))) : nullptr);
    }
    float* data() const { return floats.get(); }
  };

  // The buffers of one micro-batch. Activations and gradients are slices of one buffer per
  // value holding the whole mini-batch in sample order, so a whole-batch layer's kernel
  // reads every micro-batch's samples in place.
  struct Slot {
    int64_t size = 0;
    int64_t index = -1;                  // the micro-batch this slot runs
    std::vector<FloatSpan> act, grad;    // per value (activations; gradients where required)
    std::vector<FloatBuffer> param_grad;  // per parameter
    std::vector<std::vector<float>> masks;       // per node (Dropout)
    std::vector<std::vector<int32_t>> argmax;    // per node (MaxPool): each output's source
    std::vector<std::vector<double>> bn_partial;  // per node (BatchNormalization): per-channel sums
    std::vector<char> grad_written, param_written;
    FloatBuffer scratch;
    BatchBuffer grad_arena;  // gradients at grad_offset (plan_gradient_memory)
    double loss = 0.0;
    ops::LossCounts counts;
    std::vector<double> seconds;  // profiling: per node, [3 * node + pass]
    // This micro-batch's part of the mini-batch.
    int64_t first_sample = 0;
    const float* pixels = nullptr;
    const int32_t* labels = nullptr;
  };

  // Mini-batch statistics of one BatchNormalization node, combined over micro-batches.
  struct BatchStats {
    std::vector<double> mean, var;       // biased variance
    std::vector<float> invstd;           // 1 / sqrt(var + epsilon)
    std::vector<float> alpha, beta;      // the step's y = x * alpha + beta per channel
    std::vector<double> dy_sum, dy_xhat_sum;
  };

  // Per-micro-batch work between two barriers (docs/training.md): a phase runs its actions
  // for every micro-batch, then `combine` (if any) runs once, on one thread.
  enum class Action { Forward, Loss, Backward, BnSums, BnBackwardSums, GemmForward, GemmBackward, ConvForward,
                      ConvBackward };
  struct Step {
    Action action;
    size_t node = 0;
  };
  struct Phase {
    std::vector<Step> steps;
    Action combine = Action::Forward;  // Forward: nothing to combine
    size_t combine_node = 0;
    // Whole-batch Conv layers whose backward runs in this phase, longest weight gradient
    // first: their weight gradients can run from the next phase on.
    std::vector<size_t> weight_gradients_ready;
  };

  TrainerOptions options;
  TargetInfo target;
  TrainGraph tg;
  int64_t m = 1;
  std::vector<ValueInfo> values;
  std::map<std::string, int> value_id;
  std::vector<Parameter> parameters;
  std::vector<std::vector<float>> frozen;
  int input = -1, logits = -1;
  std::vector<Slot> slots;
  std::vector<BatchBuffer> batch_act, batch_grad;  // per value: options.batch samples
  // Identical layers (the same descriptor and needs) share one implementation.
  std::map<std::string, std::unique_ptr<TrainConv>> convs;
  std::map<std::pair<size_t, int64_t>, TrainConv*> kernels;  // (node index, micro-batch size)
  std::vector<std::string>* why = nullptr;
  int64_t steps = 0;
  // Builds a layer's convolutions (generated kernels unless TrainerOptions says otherwise).
  TrainConvFactory make_conv;
  // Micro-batches in sequence with intra-kernel parallel kernels: asked for, or a full
  // mini-batch has fewer micro-batches than threads. Fixed per trainer.
  bool intra = false;
  std::vector<Phase> train_phases, eval_phases;
  // Gemm / MatMul weight gradients computed once per mini-batch, after the backward pass,
  // as one GEMM over all its samples (below): by node, and the parameters they fill.
  std::vector<char> deferred_node, deferred_param;
  std::vector<FloatBuffer> deferred_grad;   // per parameter (deferred ones only)
  std::map<size_t, BatchStats> batch_stats;  // by node index
  std::vector<std::string> state_names;      // running statistics, in graph order
  int64_t active = 0;                        // micro-batches of the running mini-batch
  int64_t batch_count = 0;                   // samples of the running mini-batch

  // ---- views -------------------------------------------------------------------
  std::vector<int64_t> shape_at(int id, int64_t n) const {
    std::vector<int64_t> s = values[id].shape;
    if (!values[id].constant && !s.empty()) s[0] = n;
    return s;
  }
  float* data_of(Slot& slot, int id) {
    const ValueInfo& v = values[id];
    if (v.parameter >= 0) return parameters[v.parameter].value.data();
    if (v.frozen >= 0) return frozen[v.frozen].data();
    return slot.act[id].data();
  }
  View view(Slot& slot, int id) { return {data_of(slot, id), shape_at(id, slot.size), values[id].channels_last}; }
  View grad_view(Slot& slot, int id) {
    return {slot.grad[id].data(), shape_at(id, slot.size), values[id].channels_last};
  }
  int id(const std::string& name) const { return name.empty() ? -1 : value_id.at(name); }

  // ---- setup -------------------------------------------------------------------
  // Batched GEMM layers. A Gemm (or MatMul) whose weight is a parameter read by it alone
  // and whose A operand has the samples in its rows runs over the whole mini-batch at a
  // barrier instead of per micro-batch: Y = A W' for all samples at once, and backward
  // dA = dY W'^T, dW = A^T dY (the mini-batch as the reduction) and db in one go. One
  // GEMM packs the weight once instead of once per micro-batch, and the weight gradient
  // needs no private copies and no tree (LeNet's 500x800 ip1). Threads share fixed
  // blocks of the output's columns (dW: rows), so every element is BLIS's fixed-order sum,
  // the same for every thread count.
  struct BatchedGemm {
    std::vector<float> a;  // A of the whole mini-batch, [B x K], kept from forward to backward
    int bias_param = -1;
    bool as_conv = false;  // Y = A W^T + b: runs as a 1x1 convolution (gemm_conv)
    std::map<int64_t, std::unique_ptr<TrainConv>> convs;  // by mini-batch rows
  };
  std::map<size_t, BatchedGemm> batched;  // by node index
  std::vector<float> gemm_y, gemm_dy, gemm_da;
  FloatBuffer conv_dx;  // batched_conv: the input gradient of the mini-batch, before it is scattered
  std::vector<double> gemm_seconds;  // profiling, as Slot::seconds
  // Profiling, wall time of the step's parts (Trainer::profile()'s "(step)" rows): inside
  // the phases' parallel regions, threads waiting at their ends (thread-seconds), the
  // combines between phases, the tail after the last phase (the whole-batch weight
  // gradients and updates still to do), packing weight panels between phases.
  // Across ranks also: the whole training step; communication, the wall time during
  // which at least one exchange was in flight (blocking ones, and posted ones from
  // posting to completion: the union of comm_spans, overlaps counted once); and exposed
  // communication, the time the step waited on exchanges.
  // Also the thread time of two kinds of work that run wherever a thread is free (inside
  // the phases on one rank, in the tail across ranks), so a one-rank profile can tell
  // what every rank repeats (scripts/predict-scaling): the parameter updates and the
  // whole-batch layers' weight gradients; summed from update_seconds / whole_batch_seconds.
  enum StepPart {
    kPhases,
    kWaiting,
    kCombines,
    kTail,
    kPacking,
    kUpdates,
    kWholeBatchGradients,
    kStep,
    kCommunication,
    kExposed,
    kStepParts
  };
  std::array<double, kStepParts> step_seconds{};
  std::vector<double> update_seconds, whole_batch_seconds;  // profiling: per OpenMP thread
  // Profiling: the step's exchanges in flight, [start, end); their union is added to
  // step_seconds[kCommunication] when the step ends (count_communication).
  std::vector<std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>> comm_spans;
  void count_communication();
  std::vector<double> thread_busy;  // profiling: each thread's time at work inside the phases
  static constexpr int64_t kGemmBlock = 128;  // columns (rows of dW) per work item

  void choose_deferred_gradients();

  // ---- Conv layers: parallel mode and cropped taps (trainer_conv_layers.cpp) -----------
  // Micro-batch mode: each micro-batch computes its own weight gradient, summed by the
  // tree. Whole-batch mode: one backward-weights kernel over the whole mini-batch (the
  // activations are contiguous across micro-batches), no private copies and no tree; it
  // runs on one thread as soon as the phase holding the layer's backward has ended, taken
  // from a queue by the threads that finish the next phase's micro-batches first (or,
  // with intra-kernel parallelism, after the backward on all threads). Either way the
  // same kernel computes every output channel the same way: no bit depends on T.
  // Forward and backward-data stay per micro-batch either way.
  struct ConvLayer {
    ConvDescriptor full;         // the layer's convolution (conv_layer_descriptor), mb = m
    bool transposed = false;     // a ConvTranspose: its kernels are transposed_conv's
    int64_t bias_channels = 0;   // the bias's length; 0 without one
    TapWindow taps;              // useful_taps(full)
    bool crop = false;           // kernels run the cropped layer on cropped_w
    ParallelMode mode = ParallelMode::MicroBatch;
    std::string why_mode;
    // Whole-batch and so little work per weight that forward and backward-data also run
    // over the whole mini-batch, at barriers (batched_conv), not per micro-batch.
    bool batched = false;
    // Forward and backward-data per micro-batch read panels packed once per step (see
    // kPackOnceBelowFlopsPerByte).
    bool packs_once = false;
    int w_param = -1, b_param = -1;
    FloatBuffer cropped_w;       // [oc][icg][taps.kh][taps.kw], refreshed before each mini-batch
    FloatBuffer cropped_dw;      // whole-batch, cropped: the weight gradient, expanded by the update
    FloatBuffer unused_db;       // whole-batch with an untrained bias: its gradient, dropped
    double weight_gradient_flops = 0.0;  // whole-batch: its kernel's work at the full batch
    bool frozen_cropped = false; // untrained weights: cropped once
    std::map<int64_t, TrainConv*> whole_batch;  // by sample count
  };
  std::map<size_t, ConvLayer> conv_layers;  // by node index
  // Per parameter: the whole-batch layer whose weights it is when that layer is cropped
  // (its gradient is ConvLayer::cropped_dw, no deferred_grad), else null.
  std::vector<const ConvLayer*> cropped_gradient_of;

  void choose_conv_layers();
  // The layer's kernels at `n` samples (cropped when its taps are), intra-kernel parallel or not.
  // needs_forward false: backward-weights only (a whole-batch gradient).
  TrainConv* conv_kernels(size_t node, int64_t n, bool intra_kernel, bool needs_forward);
  // Cropped layers' weights copied from the parameters (before every mini-batch).
  void refresh_cropped_weights();

  // ---- weights packed once per mini-batch (trainer_packed_weights.cpp) -------------------
  // Kernels that read packed panels (TrainConv::forward_panels / backward_data_panels)
  // get one buffer per layer, pass and layout. Forward panels are packed before every
  // mini-batch. A layer whose backward runs in a later phase than its last forward reuses
  // the forward panels' memory for its backward-data panels, packed at that phase's
  // start (the weights change only in the update after the layer's last backward), so
  // the panels take about one copy of those weights, not two.
  enum PanelPass { kForwardPanels, kBackwardDataPanels };
  struct PackedWeights {
    size_t node = 0;
    PanelPass pass = kForwardPanels;
    WeightPanels panels;
    FloatBuffer storage;          // empty when it borrows its forward entry's
    float* data = nullptr;
    int64_t pack_before_phase = -1;  // -1: before the mini-batch; else before this train phase
  };

  std::map<std::tuple<size_t, int, std::string>, PackedWeights> packed_weights;  // (node, pass, layout)
  std::map<std::tuple<size_t, const TrainConv*, int>, const PackedWeights*> packed_for;  // (node, kernels, pass)
  std::map<int64_t, std::vector<PackedWeights*>> packed_before_phase;  // by pack_before_phase
  // Entries for every (node, kernels) the mini-batch may run (sharing planned when they
  // change), then the panels packed before the mini-batch.
  void prepare_packed_weights(bool train);
  void plan_packed_weights();
  // Packs the entries whose pack_before_phase is `phase` (-1: before the mini-batch;
  // backward-data panels only when training).
  void pack_panels(int64_t phase, bool train);
  // The weights a layer's kernel reads for `pass`: w itself, or its packed panels.
  const float* weights_for(size_t node, const TrainConv& k, PanelPass pass, const float* w) const;
  // The layer's weights as the kernels' panels are packed from (cropped when it is).
  const float* unpacked_weights(size_t node);
  // One whole-batch layer's weight gradient over the mini-batch of `count` samples; its
  // kernel's parallel loops use the threads of the caller's team (one thread when called
  // inside a parallel region).
  void whole_batch_gradient(size_t node, int64_t count);
  // A batched layer's forward (ConvForward) or backward-data (ConvBackward) over the
  // mini-batch, between phases: its kernel's parallel loops on all threads.
  void batched_conv(Action a, size_t node, const Guard& guarded);
  // Runs the whole-batch gradients of `layers` (longest first) on the threads of the
  // enclosing parallel region, each taking the next from `next`.
  void drain_whole_batch_gradients(const std::vector<size_t>& layers, std::atomic<size_t>& next, int64_t count,
                                   const Guard& guarded);

  // The convolution kernels of a Gemm that is a 1x1 convolution of a 1 x rows image:
  // input NHWC [1][1][rows][K] = A, weights OIHW [N][K][1][1] = W (transB), output
  // [1][1][rows][N] = Y, bias [N]. Compiled for each mini-batch size when first needed,
  // with the intra-kernel parallel variant: they run between phases, on all threads.
  TrainConv* gemm_conv(size_t node, int64_t rows);

  struct GemmShape {
    int a, w, c, y;
    int64_t k, n;  // A's columns, Y's columns
    bool trans_b;
    float alpha, beta;
  };
  GemmShape gemm_shape(size_t node) const;

  // Runs between phases, outside any parallel region: its loops open their own teams
  // (fixed blocks, so the bits do not depend on T), and its generated kernels run their
  // intra-kernel parallel variant.
  void batched_gemm(Action a, size_t node, const Guard& guarded);

  // The whole-mini-batch results back into the micro-batches: Y rows (forward), dA rows
  // (backward, added when the value already has a gradient), this rank's micro-batches.
  void scatter_gemm(Action a, const GemmShape& sh, const Guard& guarded);

  void index_values();

  // Kernels of every Conv layer at micro-batch size n (compiled once per size).
  void ensure_kernels(int64_t n);

  // Every kernel a mini-batch of `count` samples needs: its micro-batch sizes' and its
  // whole-mini-batch Gemm layers'. Across ranks, building them is reported busy
  // (ProcessGroup::busy): the other ranks' watchdogs do not count it.
  void ensure_batch_kernels(int64_t count);
  std::vector<int64_t> prepared_counts;  // the counts ensure_batch_kernels has seen

  // The whole-batch buffers of every activation and gradient (first call only).
  void allocate_batch_buffers();
  // What the step's buffers take, for --verbose: activations, gradients, private weight
  // gradients of the micro-batches, the whole-batch ones.
  std::string memory_plan() const;
  TrainerMemory memory() const;

  // ---- Gradient memory (trainer_memory.cpp) -------------------------------------------
  // A value's gradient lives from the first backward event that touches it (the last
  // consumer's backward writes it) to the last (its producer's backward reads it). Each
  // micro-batch runs the backward's events in order on one thread, so gradients whose
  // lives do not overlap share memory: they are placed at offsets of one arena per
  // micro-batch, planned once (largest first, lowest free offset). The gradient of a
  // whole-batch layer's output is read over the whole mini-batch after the phase, so it
  // keeps a mini-batch buffer (batch_grad); grad_offset is -1 for those.
  std::vector<int64_t> grad_offset;  // per value: floats into a slot's arena, at m samples
  int64_t grad_arena_floats = 0;
  void plan_gradient_memory();
  // The slot's views of its micro-batch (first_sample .. + n) in the whole-batch buffers.
  void prepare_slot(Slot& slot, int64_t n);

  // ---- forward -------------------------------------------------------------------
  void forward(Slot& slot, size_t node_index, bool train);

  // ---- backward ------------------------------------------------------------------
  // The gradient buffer of value `v` for a contribution: dx = c the first time, dx += c
  // after (returned flag). Constants that are parameters get their slot's gradient.
  struct Target {
    View view;
    bool accumulate = false;
  };
  Target target_for(Slot& slot, int v);
  bool wants_grad(int v) const { return v >= 0 && (values[v].requires_grad || values[v].parameter >= 0); }

  // Runs a kernel that writes (never adds) into t: straight in, or through scratch.
  template <typename F>
  void write_or_add(Slot& slot, const Target& t, F write) {
    if (!t.accumulate) return write(t.view.data);
    slot.scratch.resize(static_cast<size_t>(t.view.elements()));
    write(slot.scratch.data());
    for (int64_t i = 0, i_end = t.view.elements(); i < i_end; ++i) t.view.data[i] += slot.scratch[i];
  }

  void backward(Slot& slot, size_t node_index);

  // ---- one micro-batch -------------------------------------------------------------
  void load_input(Slot& slot, const float* pixels);

  // ---- BatchNormalization in training mode -------------------------------------
  // Mini-batch statistics need every micro-batch: each computes per-channel sums in a
  // fixed order (BnSums: the shifted first and second moments in one pass over x;
  // BnBackwardSums), a barrier, and one thread combines them by the pairwise tree
  // (combine). Then each micro-batch normalises (forward) or computes dx (backward) with
  // the mini-batch's numbers: one barrier per pass.
  struct ChannelWalk {
    int64_t channels, pixels;
  };
  ChannelWalk walk(Slot& slot, int v);

  void bn_partial_sums(Slot& slot, size_t node_index, Action a);
  const float* moments_shift(const Node& n) const;

  // The pairwise tree over micro-batches of one node's partial sums.
  std::vector<double> combined(size_t node_index);

  void combine(Action a, size_t node_index);

  void batch_norm_forward(Slot& slot, size_t node_index);
  // The ReLU or Clip fused into a BatchNormalization node, for its kernels.
  bn::FusedActivation fused_activation(Slot& slot, size_t node_index);

  void batch_norm_backward(Slot& slot, size_t node_index);

  // ---- phases ------------------------------------------------------------------------
  std::vector<Phase> make_phases(const Graph& g, bool train) const;

  void run_steps(Slot& slot, const Phase& phase, bool train, double scale);

  void run_step(Slot& slot, const Step& st, bool train, double scale);

  void begin_micro_batch(Slot& slot, int64_t n);


  // Runs a mini-batch's phases over its micro-batches: on the threads (micro-batch i on
  // thread i mod T in every phase, a barrier between phases), or in order with
  // intra-kernel parallel kernels.
  StepStats run_batch(const float* pixels, const int32_t* labels, int64_t count, bool train);

  // ---- Reduction and update (trainer_update.cpp) -------------------------------------
  // A parameter's gradient summed over micro-batches by the tree, then the SGD update, in
  // chunks: each element's sum and update are the same whoever computes them and when.
  // A chunk runs once the last phase reading the parameter or writing its gradient has
  // ended, taken by the threads that finish the next phase's micro-batches first (after
  // the whole-batch gradients), or after the last phase.
  struct UpdateChunk {
    int p;
    int64_t begin, end;
  };
  std::vector<std::vector<UpdateChunk>> updates_after;  // [k]: ready once phase k has ended
  void plan_updates();
  void update_chunk(const UpdateChunk& chunk);
  void drain_updates(const std::vector<UpdateChunk>& chunks, std::atomic<size_t>& next);

  // ---- Across processes (trainer_distributed.cpp; docs/distributed.md) ------------------
  // Rank r runs micro-batches [own_begin, own_end) (rank_cuts of the mini-batch's). What
  // a barrier's combine reads of other micro-batches is copied from their ranks first:
  // BatchNormalization's per-micro-batch sums, the rows of a batched Gemm or Conv, a
  // whole-batch layer's activations and output gradient; each rank then computes the
  // combine itself, the same bits on every rank. The micro-batch weight gradients are
  // finished across ranks by the tree (reduce_gradients_across_ranks). Without a group,
  // or with one rank, none of this runs.
  ProcessGroup* group = nullptr;
  int64_t own_begin = 0, own_end = 0;
  std::vector<FloatBuffer> reduced_grad;  // per micro-batch-mode parameter: the tree's sum
  bool distributed() const { return group && group->size() > 1; }
  // The ranks' micro-batch ranges of a mini-batch of `micro` micro-batches:
  // tree_aligned_cuts (balanced, fewest tree nodes), computed once per count. Also read
  // by the data stream's thread (samples_of_this_rank), hence the lock.
  const std::vector<int64_t>& rank_cuts(int64_t micro) const;
  mutable std::mutex rank_cuts_mutex;
  mutable std::map<int64_t, std::vector<int64_t>> rank_cuts_by_count;
  std::pair<int64_t, int64_t> micro_batches_of_rank(int64_t micro, int rank) const {
    const std::vector<int64_t>& cuts = rank_cuts(micro);
    return {cuts[static_cast<size_t>(rank)], cuts[static_cast<size_t>(rank) + 1]};
  }
  // The micro-batches of `rank` for a mini-batch of `count` samples, as samples.
  std::pair<int64_t, int64_t> samples_of_rank(int64_t count, int rank) const;
  // What each rank gives to an all-gather of `bytes_per_micro_batch` per micro-batch it runs.
  std::vector<int64_t> bytes_per_rank(int64_t bytes_per_micro_batch) const;
  // Every rank's samples of a mini-batch buffer (sample_elements floats per sample) to
  // every rank, in place.
  void share_samples(float* base, int64_t sample_elements);
  // Every micro-batch's partial sums of BatchNormalization node `node` to every rank.
  void share_bn_partials(size_t node);
  // What the whole-batch weight gradients of `layers` read (input, output gradient, the
  // output where a ReLU is fused) to every rank.
  void share_whole_batch_inputs(const std::vector<size_t>& layers);
  // The micro-batch gradient of every parameter that has one, summed by the fixed tree
  // over all micro-batches: each rank forms the tree nodes inside its range, the owner of
  // each element chunk finishes the tree over every rank's nodes, and an all-gather copies
  // the finished chunks to every rank (reduced_grad). In buckets, each started as soon
  // as its parameters' gradients are complete on this rank -- at the end of the phase
  // that completes them -- so the exchange runs beside the later phases (docs/
  // distributed.md, "Overlap"); the bits are the same whichever bucket a parameter is in.
  struct GradientBucket {
    std::vector<int> params;
    std::vector<float> send, recv, gathered;
    std::vector<int64_t> send_bytes, recv_bytes, gather_bytes;
    int64_t mine_at = 0;  // this rank's finished chunks in `gathered`, in floats
    ProcessGroup::Ticket exchange = 0, gather = 0;
    std::chrono::steady_clock::time_point posted;  // profiling: when its current exchange was posted
    std::chrono::steady_clock::time_point arrived;  // ... and when a poll found it done (or never)
    bool in_flight = false;                        // its current exchange not yet found done
  };
  // [phase]: the parameters reduced by the tree whose gradients are complete once that
  // phase has ended; [phases]: the rest, started after the last phase. Planned once.
  std::vector<std::vector<int>> bucket_params;
  std::vector<GradientBucket> buckets;  // the step's, in the order started
  bool polling = false;                 // buckets in flight: run_steps lets them progress
  // Lets the buckets' exchanges advance (MPI_Test); notes when each is found done.
  void poll_buckets();
  void plan_gradient_buckets();
  // Each rank's tree nodes over this step's micro-batches (nodes_within of its range).
  std::vector<std::vector<TreeNode>> tree_nodes_of_ranks() const;
  // Forms this rank's tree nodes of `params` (on the threads) and posts their chunks to
  // their owners.
  void start_bucket(const std::vector<int>& params);
  // Waits for the bucket's nodes, finishes the tree for this rank's chunks, posts their all-gather.
  void gather_bucket(GradientBucket& b);
  // Waits for the bucket's all-gather; its gradients into reduced_grad.
  void finish_bucket(GradientBucket& b);
  // After the backward: starts the last bucket, then completes every bucket in order.
  void reduce_gradients_across_ranks();
  // Waits for posted exchange `ticket` of bucket `b`, counted as exposed communication.
  void wait_for(GradientBucket& b, ProcessGroup::Ticket ticket);
  // The step's per-micro-batch losses (in micro-batch order) and summed counts, every
  // rank's, into `losses` and `stats`.
  void share_step_stats(std::vector<double>& losses, StepStats& stats);
  // Runs `collective`, one exchange with the other ranks that brings this rank `bytes_in`
  // bytes of theirs; profiling adds its span to comm_spans, its wall time to
  // step_seconds[kExposed] (the step waited for all of it) and its bytes to exchanged_bytes.
  void exchange(int64_t bytes_in, const std::function<void()>& collective);
  bool timing_step = false;     // profiling a training step (run_batch): exchange() counts
  int64_t exchanged_bytes = 0;  // profiling: bytes other ranks' exchanges brought this rank
  int64_t gradient_bytes = 0;   // profiling: of which the micro-batch gradients' exchange
  int64_t ring_bytes = 0;       // profiling: what ring all-reduces of those gradients would have
};

}  // namespace convgen::model
