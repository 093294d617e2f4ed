// ConvSchedule: how a convolution kernel is generated, as plain data. The generator
// reads it; the analytic default (analytic_default.cpp) derives one from the layer
// shape and the target's cache sizes; schedule_records.cpp stores it as JSON lines.
//
// The kernel is an implicit GEMM  Y[K x N*P*Q] = W[K x C*R*S] * im2col(X), with the
// im2col gather fused into packing. In BLIS terms:
//   MR  output channels per register tile (a multiple of the vector width)
//   NR  output pixels per register tile (pixels are flattened p*Q+q per image)
//   KC  input channels per reduction block (0 = the whole C/g in one block)
//   MC  output channels per cache block (a multiple of MR; 0 = all of K/g)
//   NC  output pixels per cache block (a multiple of NR; 0 = the whole image)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace convgen {

struct ConvDescriptor;

// gemm: MR x NR GEMM tile per group. depthwise: vectors of output channels across
// groups. grouped: vectors of the input channels of adjacent groups (C/g divides the
// vector width), lanes reduced per group after the taps. gemm_input_lanes: backward-
// weights of an unpadded 1x1 layer only, MR input channels (vectors) x NR output
// channels (broadcast), so dW leaves the registers in ONNX order (kernel_plan.h:
// input_lane_weights_apply); other passes and layers take gemm instead.
enum class Strategy { Gemm, Depthwise, Grouped, GemmInputLanes };
enum class Layout { Nhwc };                        // internal activation layout
enum class PackInput { None, Image, Rows, Panel };  // where the zero-padded input is staged
// GEMM weights blocked by MR: inside every call, or by the caller once per change of the
// weights (schedules/weight_panels.h; the kernel's weights argument is then the packed
// panels). Other strategies read ONNX weights either way.
enum class PackWeights { PerCall, Prepacked };
enum class LoopOrder { PixelsOuter, ChannelsOuter };
// Intra-kernel threads over non-reduction loops: pixel tiles (or blocks) of each image,
// the images, or the output-channel blocks -- these made the outermost loop, each thread
// packing its own blocks' weights (generator/conv/loop_nest.cpp).
enum class Parallel { None, Pixels, Images, Channels };
// How the kernel writes its output: through the caches, or with streaming (non-temporal)
// whole-vector stores that bypass them -- no read of each output line before it is
// written, no inputs evicted. For outputs far larger than the caches that few FMAs make
// per value, where the stores bound the kernel (analytic_default.cpp). Forward and
// backward-data kernels; an output not aligned to a vector takes ordinary stores at run
// time (generator/object_code/object_code.h). Never changes a value.
enum class OutputStores { Cached, Streaming };

struct ConvSchedule {
  static constexpr int kVersion = 2;
  // The widest pixel tile: one vector of 16 lanes x 16 pixels, or 2 x 14 (28 of AVX-512's
  // 32 registers as accumulators). Wider tiles only spill.
  static constexpr int kMaxNr = 16;

  Strategy strategy = Strategy::Gemm;
  int mr = 24;
  int nr = 4;  // 1..kMaxNr pixels (or backward-weights taps) per register tile
  int kc = 0;
  int mc = 0;
  int nc = 0;
  Layout layout = Layout::Nhwc;
  PackInput pack_input = PackInput::Image;
  PackWeights pack_weights = PackWeights::PerCall;
  LoopOrder loop_order = LoopOrder::PixelsOuter;
  Parallel parallel = Parallel::None;
  // Backward-weights only: the reduction over (image, row band) items is split into this
  // many partial sums, added in index order -- fixed here, never by the thread count.
  int partitions = 1;
  OutputStores output_stores = OutputStores::Cached;

  bool operator==(const ConvSchedule& o) const;
  bool operator!=(const ConvSchedule& o) const { return !(*this == o); }
};

// `channels` padded to whole tiles of `mr` (the lanes a tile computes, zeros included).
inline int64_t round_up(int64_t channels, int64_t mr) { return (channels + mr - 1) / mr * mr; }

// Cache and register facts of a target, as data (BLIS keeps these per architecture).
struct TargetInfo {
  std::string target;      // Halide target string the kernel is compiled for
  int vector_floats = 8;   // fp32 lanes per vector register
  int vector_registers = 16;
  int64_t l1_bytes = 32 * 1024;
  int64_t l2_bytes = 512 * 1024;
  int64_t l3_bytes = 32 * 1024 * 1024;
};

// The default target of this build (AVX2+FMA x86-64) and lookup by target string.
// "host" stands for the widest target row this CPU runs (host_target_string()).
TargetInfo default_target();
TargetInfo target_info(const std::string& target_string);

// The best convgen target for the running CPU: AVX-512 (F, BW, DQ, VL, CD) with FMA,
// else the AVX2+FMA default, else SSE4.1, else baseline x86-64.
std::string host_target_string();

// How the convolution is embedded, when it is not a layer's forward pass: backward-data
// runs one per residue class of the strides over dY.
struct ConvContext {
  bool output_staged = false;   // output staged for a consumer (a strided class): its tiles never skip padded columns
  bool input_computed = false;  // input an expression (dY masked by the ReLU), so read in place it is recomputed per tap
};

// Analytic default. `why` (if non-null) receives one line per decision for --verbose.
ConvSchedule analytic_schedule(const ConvDescriptor& d, const TargetInfo& t,
                               std::vector<std::string>* why = nullptr, const ConvContext& context = {});

// The analytic default's output stores for a pass of `d` (analytic_default.cpp):
// streaming where the pass writes far more per call than the last-level cache holds.
OutputStores default_output_stores(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                   std::vector<std::string>* why = nullptr);

// Analytic default of one pass: "fwd" (= analytic_schedule), "bwd_data" (the forward
// default of the largest residue class's derived convolution) or "bwd_weights".
// Throws Error(Usage) for another pass name.
ConvSchedule analytic_schedule_for_pass(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                        std::vector<std::string>* why = nullptr);

// The intra-kernel parallel variant of a pass's schedule: `p` (images or pixels) over the
// output loops, or their channel blocks where intra_kernel_loop says so. Backward-weights,
// whose image and pixel loops are its reduction, threads over channel tiles once per
// reduction item; a small dW (<= 1 MiB) also has its
// reduction split into 4 partitions -- fixed here, never by the thread count -- so the
// threads share one parallel loop over the whole call. `why` gets a line. The trainer
// keeps one partition: its kernels run inside the batch-parallel region, one thread
// each, where partitions would only add their private sums.
ConvSchedule parallel_variant(const ConvDescriptor& d, const std::string& pass, ConvSchedule s, Parallel p,
                              std::vector<std::string>* why = nullptr);

// The loop a kernel's intra-kernel threads split, from the layer and its schedule alone
// (never the thread count): the output-channel blocks of a forward-type GEMM whose channel
// blocks are its outermost loop (channels_outer with MC below K/g: the weights outweigh
// the pixels, and threading images or pixels inside each block would pack every block's
// weights on one thread and fork once per block); else `images_or_pixels`, the caller's
// choice. Backward-weights threads its channel tiles or partitions whatever the value
// (generator/conv/backward_weights.cpp), so it keeps the caller's. parallel_variant
// applies it.
Parallel intra_kernel_loop(const ConvDescriptor& d, const std::string& pass, const ConvSchedule& s,
                           Parallel images_or_pixels);

// True when the grouped strategy can run: the input channels of a group divide the
// vector width, so a vector holds whole groups, and the layer has at least a vector's
// worth of input channels. Otherwise the generator refuses it
// (with the reason, under --verbose) and runs depthwise.
bool grouped_strategy_applies(const ConvDescriptor& d, const TargetInfo& t);

// Grouped strategy: output channels of each group per register tile, mr * (C/g) / vl
// (so mr still counts the tile's output channels), capped at 4 accumulator vectors per
// pixel like GEMM's widest tile, and at K/g.
int grouped_outputs_per_tile(const ConvDescriptor& d, const ConvSchedule& s, const TargetInfo& t);

// GEMM register tiles may be laid inside output rows so that each tile's taps on
// left/right padding are known and left out (the generator's skips_padded_columns).
// That pays when a row holds at most max_row_tiles tiles of NR pixels, unrolled, and
// its last tile is whole or at least half full: with 14-pixel rows, 6+6+2 lost to
// tiles straddling rows (ResNet 3x3 256 at 14x14: 0.73-0.95x oneDNN vs 0.91-1.00x);
// 6+6+4 (cifar10 conv2, 16 wide) and 4+3 (7x7) won (1.00 vs 0.92-0.95x; 1.03-1.06 vs
// 0.89-0.98x).
constexpr int max_row_tiles = 4;
bool row_tiles_pay(int64_t row_pixels, int nr);

// Names of enum values as written in records and printed by --verbose.
std::string to_string(Strategy v);
std::string to_string(Layout v);
std::string to_string(PackInput v);
std::string to_string(PackWeights v);
std::string to_string(LoopOrder v);
std::string to_string(Parallel v);
std::string to_string(OutputStores v);
// One-line human summary: "gemm mr=24 nr=4 kc=0 ...".
std::string describe(const ConvSchedule& s);

// Every legal value of every field, for tests and the tuner's search space.
struct ScheduleSpace {
  std::vector<Strategy> strategy;
  std::vector<int> mr, nr, kc, mc, nc;
  std::vector<Layout> layout;
  std::vector<PackInput> pack_input;
  std::vector<PackWeights> pack_weights;
  std::vector<LoopOrder> loop_order;
  std::vector<Parallel> parallel;
  std::vector<int> partitions;
  std::vector<OutputStores> output_stores;
};
ScheduleSpace schedule_space(const TargetInfo& t);
// The pixel tiles past 9 a target's registers hold (32: 2 vectors x 10..14 pixels, one
// vector x 16; none with 16): schedule_space and the tuner's space list the same ones.
std::vector<int> wide_pixel_tiles(const TargetInfo& t);

// Throws Error(BadRecord) if the schedule is not legal for the target (e.g. MR not a
// multiple of the vector width).
void validate(const ConvSchedule& s, const TargetInfo& t);

// Throws Error(Usage) when `s` cannot tile a forward-type convolution (the forward pass,
// or backward-data's residue classes): gemm_input_lanes belongs to backward-weights.
void validate_forward_strategy(const ConvSchedule& s);

}  // namespace convgen
