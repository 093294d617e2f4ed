// The batch-parallel trainer behind `convgen train` (docs/training.md): forward, softmax
// cross-entropy, backward and SGD with momentum over a training graph (generator/train/prepare_graph.h),
// with convgen's generated forward, backward-data and backward-weights kernels
// (JIT-compiled from the code `convgen compile` uses) and the runtime's operators.
//
// Parallel design, after González (PPoPP 2016), made exact: a mini-batch of B samples is
// cut into micro-batches of m consecutive samples (m fixed per trainer; a shorter last
// one gets kernels of its own size). Threads take whole micro-batches (micro-batch i on
// thread i mod T, the same in every step) and run forward and backward for them with
// single-threaded kernels into private buffers. Every reduction over samples -- the
// weight and bias gradients, the loss -- is computed per micro-batch in a fixed order
// and combined by a fixed pairwise tree over the micro-batch index. The thread count
// only decides who computes what, so weights, momentum and losses are bit-identical for
// every T, and with intra-kernel parallelism (micro-batches in sequence, kernels
// splitting their non-reduction loops) too.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/graph/train_graph.h"
#include "runtime/parallel/process_group.h"
#include "runtime/train/train_conv.h"
#include "schedules/conv_schedule.h"

namespace convgen::model {

// How a Conv layer's weight gradient is summed over the mini-batch (docs/training.md,
// "Parallel modes"). MicroBatch: per micro-batch into private buffers, then the fixed
// pairwise tree. WholeBatch: one backward-weights kernel over the whole mini-batch.
enum class ParallelMode { MicroBatch, WholeBatch };
const char* parallel_mode_name(ParallelMode m);  // "micro-batch", "whole-batch"

struct TrainerOptions {
  int64_t batch = 64;        // mini-batch size B
  int64_t micro_batch = 0;   // m; 0: the largest divisor of B that is at most B / 4
  float lr = 0.01f, momentum = 0.9f, weight_decay = 0.0f;
  int threads = 1;
  // Micro-batches run one after another with intra-kernel parallel kernels. Chosen
  // automatically when a mini-batch has fewer micro-batches than threads.
  bool intra_kernel = false;
  uint64_t seed = 0;         // dropout masks
  // A label value that is no class (PyTorch's ignore_index; segmentation's unlabelled
  // pixels): those positions count nowhere in the loss, its gradient or the counts. -1: none.
  int32_t ignore_label = -1;
  std::string records;       // schedule records ("" = analytic defaults)
  // The layers' convolutions: "generated" (convgen's kernels) or "im2col-blis" (explicit
  // im2col + BLIS SGEMM, the baseline; runtime/train/train_conv.h).
  std::string conv_impl = "generated";
  // Times every node's forward and backward per micro-batch (Trainer::profile()).
  bool profile = false;
  // Parallel modes by Conv node name, overriding the trainer's choice (experiments;
  // `convgen train --parallel-mode`). A name that is not a Conv node is a Usage error.
  std::map<std::string, ParallelMode> parallel_modes;
  // The cost model's threshold: a Conv layer runs whole-batch when one micro-batch's
  // backward-weights does fewer flops than this per byte of its weight gradient
  // (docs/training.md, "Parallel modes"). `convgen tune --train` tries others.
  double whole_batch_below_flops_per_byte = 64.0;
  // A whole-batch layer with too little work per micro-batch runs its forward and
  // backward-data over the mini-batch at barriers ("batched", docs/training.md) only when
  // its kernel reads at least this many bytes of weights; below, the barrier's fork,
  // join and cross-core traffic cost more than streaming the weights, packed once, per
  // micro-batch. AMD EPYC Zen 5, 2 threads, img/s against batching every such layer:
  // RegNetY-400MF +6%, SqueezeNet 1.1 +9%, MobileNet-V2 +3%, DenseNet-121 +2%; ResNet-18
  // and ResNeXt-50 keep theirs (1 and 8 MiB). Changes the summation order: part of the
  // checkpoint key (Trainer::execution_key).
  int64_t batched_from_weight_bytes = int64_t(1) << 20;
  // Every Conv layer's mode as a training record chose it (`convgen tune --train`;
  // generator/train/training_record.h); `parallel_modes` entries win over these. A name
  // that is not a Conv node, or a layer missing, is a BadRecord error naming the source.
  std::map<std::string, ParallelMode> recorded_modes;
  std::string recorded_modes_source;  // e.g. "the training record in FILE", for messages
  // The processes the run spans (docs/distributed.md; `mpirun -np R convgen train`), or
  // null for one. Rank r runs range r of tree_aligned_cuts(micro-batches, R) (balanced,
  // placed to form the fewest tree nodes: runtime/parallel/pairwise_tree.h);
  // every sum over micro-batches is still the one fixed tree, finished across ranks
  // (runtime/parallel/pairwise_tree.h), so every rank holds the same weights after every
  // step, bit-identical to one process with any thread count. Not part of any key: it
  // changes who computes what, never a bit.
  std::shared_ptr<ProcessGroup> group;
};

// Parses "NODE=MODE[,NODE=MODE...]" (MODE: micro-batch or whole-batch; NODE * is every
// Conv layer not named); Usage error naming the bad entry.
std::map<std::string, ParallelMode> parse_parallel_modes(const std::string& text);

// Time spent in one node's pass, summed over micro-batches and steps (thread time).
struct NodeTime {
  std::string node, op, pass;  // pass: "forward", "backward", "statistics" (BatchNormalization's sums)
  double seconds = 0.0;
};

// What a step's buffers hold, in floats (Trainer::memory(), `convgen train --verbose`).
struct TrainerMemory {
  int64_t activations = 0;           // every value of the mini-batch
  int64_t gradients = 0;             // activation gradients as allocated (arenas + mini-batch buffers)
  int64_t unshared_gradients = 0;    // the same, one buffer per value
  int64_t private_weight_gradients = 0;  // micro-batch mode: one copy per micro-batch
  int64_t whole_batch_weight_gradients = 0;
};

// The micro-batch size TrainerOptions::micro_batch = 0 stands for.
int64_t default_micro_batch(int64_t batch);
// m for these options (micro_batch, or its default); Usage error for a batch or thread
// count below 1 or m > batch.
int64_t checked_micro_batch(const TrainerOptions& options);

struct StepStats {
  // Mean softmax cross-entropy over the labelled positions: the samples, or a
  // segmentation model's labelled pixels.
  double loss = 0.0;
  int64_t correct = 0;   // positions whose arg-max logit is the label
  int64_t labelled = 0;  // positions with a label (not TrainerOptions::ignore_label)
  int64_t count = 0;     // samples
  // evaluate() only: per class, hits, predicted and labelled position counts (3 x
  // classes), for a segmentation model's mean IoU.
  std::vector<int64_t> per_class;
  // The first trainable tensor holding a NaN or an infinity after the step's update
  // ("" when all are finite): a diverged run, even when the loss still looks finite.
  std::string non_finite;
};

// A trainable tensor and its optimizer state.
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> value, momentum;
};

class Trainer {
 public:
  // The engine: a training graph bound to the micro-batch size
  // (checked_micro_batch(options)) and where its convolutions come from. Kernels are
  // asked of `make_conv` when a batch first needs them (for each micro-batch size), or
  // up front by prepare(). options.conv_impl is not read. `why` gets decisions.
  // `convgen train` builds one from a model file with make_trainer
  // (generator/train/trainer_from_model.h: ONNX import and the Halide JIT).
  // Needs no Halide compiler and no ONNX: a generated training driver (`convgen compile
  // --train`) calls this with its graph and its ahead-of-time kernels (runtime/train/train_conv_aot.h).
  Trainer(TrainGraph graph, const TrainerOptions& options, const TargetInfo& t, TrainConvFactory make_conv,
          std::vector<std::string>* why = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Compiles the kernels a mini-batch of `count` samples needs (train_step and evaluate
  // do it when first needed; this lets a caller do it up front, e.g. before timing).
  void prepare(int64_t count);

  // One SGD step on `count` samples (1 <= count <= batch): pixels dense NCHW floats,
  // labels in [0, classes) or the ignored label, one per sample or (a segmentation
  // model's [N, K, H, W] logits) H x W per sample. The loss is the mean over the labelled
  // positions. With a process group, only this rank's samples (samples_of_this_rank) are
  // read; the statistics returned are the whole mini-batch's on every rank.
  StepStats train_step(const float* pixels, const int32_t* labels, int64_t count);
  // The samples [first, end) of a batch of `count` whose pixels and labels this process
  // reads (its ranks' micro-batches; the whole batch without a group). The others may be
  // left undecoded.
  std::pair<int64_t, int64_t> samples_of_this_rank(int64_t count) const;
  // Forward only (test accuracy): no state changes.
  StepStats evaluate(const float* pixels, const int32_t* labels, int64_t count);
  // Forward only, the logits out: count x classes floats, row per sample, or a
  // segmentation model's count x classes x H x W (NCHW) (inference with
  // the training graph as evaluate runs it: BatchNorm on running statistics, Dropout off).
  void forward(const float* pixels, int64_t count, float* logits);

  // The mini-batch gradient of every parameter in the last train_step (before weight
  // decay), in parameters() order: for gradient checks.
  std::vector<std::vector<float>> last_gradients() const;

  const std::vector<Parameter>& parameters() const;
  std::vector<Parameter>& parameters();
  // Training state that is not trained: BatchNormalization running mean and variance,
  // updated every step (ONNX momentum semantics). By name, in graph order.
  std::vector<std::pair<std::string, std::vector<float>>> state_tensors() const;
  // Restores one (resuming); Internal error for an unknown name or size.
  void set_state_tensor(const std::string& name, const std::vector<float>& data);
  int64_t steps_taken() const;
  void set_steps_taken(int64_t steps);   // resuming
  void set_learning_rate(float lr);

  // With TrainerOptions::profile: per node and pass, in graph order, since the start
  // (thread time); then rows of node "(step)": the wall time of the step's parts (phases,
  // combines, whole-batch dW, reduce+update, the whole step, its exchanges with other
  // ranks) and the threads' idle time at phase ends; across ranks, the step split into
  // compute and exposed communication. Building kernels is in none of them.
  std::vector<NodeTime> profile() const;
  // Across ranks, with profiling, summed over the training steps: the bytes every
  // exchange brought this rank from the others; those of the micro-batch gradients'
  // exchange alone; and what ring all-reduces of the same gradients would have brought
  // it (2 (R - 1) / R of them): the yardstick of the tree's exchange (docs/distributed.md).
  struct ExchangeVolume {
    int64_t received = 0, gradients = 0, ring = 0;
  };
  ExchangeVolume exchange_volume() const;
  // How each node with trainable parameters has its gradient summed across ranks
  // (docs/distributed.md), in graph order: by the tree over micro-batches (its gradient's
  // floats cross ranks once per step), or, for a Gemm over the mini-batch and a
  // whole-batch or batched Conv, by sharing its activations (shared_per_sample floats
  // of every sample: input and output gradient, the output too under a fused ReLU) and
  // computing the gradient over the whole mini-batch on every rank. What
  // `scripts/predict-scaling` models; the same with or without a group.
  struct LayerExchange {
    std::string node, op;
    int64_t gradient_floats = 0;
    bool by_tree = true;
    int64_t shared_per_sample = 0;  // floats, when not by_tree
    // By the tree: the exchanges it travels with, started in this order as the backward
    // completes their gradients; -1 when after the backward.
    int bucket = -1;
  };
  std::vector<LayerExchange> layer_exchanges() const;

  const TrainGraph& graph() const;
  const TrainerOptions& options() const;
  int64_t micro_batch() const;
  // Every Conv layer's parallel mode, "node=mode" joined by commas in graph order: part of
  // what a resumed run must match (it shapes the summation order).
  std::string parallel_modes() const;
  // The same by Conv node name (training records store them so).
  std::map<std::string, ParallelMode> parallel_mode_of_layer() const;
  // The whole-batch Conv layers whose forward and backward-data also run once over the
  // mini-batch, at barriers (too little work per byte of weights per micro-batch, and
  // enough weights), in graph order. Determined by the modes, the micro-batch and
  // TrainerOptions::batched_from_weight_bytes, never by T.
  std::vector<std::string> batched_layers() const;
  // What shapes the summation order besides the options: the parallel modes and the
  // batched layers. Checkpoint keys hold it, so a resumed run must match it.
  std::string execution_key() const;
  TrainerMemory memory() const;
  // Sum of the nominal flops (2*N*K*(C/g)*R*S*P*Q per conv pass, 2*M*N*K per GEMM) of the
  // passes one training step on `count` samples executes.
  double step_flops(int64_t count) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace convgen::model
