// Conv layers: each one's parallel mode, its cropped taps, and the whole-batch weight
// gradients (docs/training.md, "Parallel modes" and "Small images").
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <omp.h>

#include "runtime/graph/operators.h"
#include "runtime/ops/tensor.h"
#include "runtime/parallel/openmp_par_for.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_conv_transpose.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

// Whole-batch mode when a micro-batch's backward-weights work is below this many flops
// per byte of the weight gradient it writes. In micro-batch mode every micro-batch
// writes the whole gradient and the tree reads it back; below ~64 flop/byte that traffic
// outweighs the kernel (torchvision ResNet-18 at 32x32, micro-batch 16: layer4's
// 3x3 512-channel layers on 1x1 images are at 0.9 after cropping, layer3's on 2x2 at 32,
// layer2's on 4x4 at 128). Depends on the layer and the micro-batch only, never on T.
// TrainerOptions::whole_batch_below_flops_per_byte (64 by default) holds it.

constexpr int64_t kChannelBlock = 16;  // output channels per work item when copying weights

// A whole-batch layer whose micro-batch does fewer flops than this per byte of weights
// (m * P * Q / 2 for a 1x1 kernel: fewer than 32 output pixels per call) and whose
// kernel reads at least TrainerOptions::batched_from_weight_bytes of weights also runs
// its forward and backward-data once over the mini-batch, at a barrier: per micro-batch,
// each call would stream all the weights for a few output rows (ResNeXt-50's layer4 at
// 32x32, 2048 -> 1024 on 1x1 images: 6 GF/s per call of 8 samples, 27 at 32; AMD EPYC
// Zen 4, one thread). A constant, like every choice that fixes the summation order, so
// the modes and the weight floor (both in the checkpoint key) determine it.
constexpr double kBatchedBelowFlopsPerByte = 16.0;

// A layer run per micro-batch with fewer flops than this per byte of weights per call
// has its forward and backward-data weights packed once per mini-batch (the trainer's
// packed panels, trainer_packed_weights.cpp) instead of by every call. The repeated copy
// weighs most where a call does little work per weight; where it does much, the saving
// is small and the panels would still cost memory. AMD EPYC Zen 5, 2 threads, img/s
// against packing per call, and peak RSS above load:
//   below   64: ResNet-18 +7%, DenseNet-121 +3%, VGG-11 +2% (VGG 241 -> 257 MiB)
//   below  256: ResNet-18 +10%, DenseNet-121 +8%, VGG-11 +5% (VGG 271 MiB)
//   every layer: ResNet-18 +11%, DenseNet-121 +8%, VGG-11 +5% (VGG 274 MiB; PyTorch 278)
// Like the other thresholds a constant: which layers pack changes no bit.
constexpr double kPackOnceBelowFlopsPerByte = 256.0;

}  // namespace

const char* parallel_mode_name(ParallelMode m) { return m == ParallelMode::WholeBatch ? "whole-batch" : "micro-batch"; }

std::map<std::string, ParallelMode> parse_parallel_modes(const std::string& text) {
  std::map<std::string, ParallelMode> modes;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string entry = text.substr(at, comma - at);
    const size_t eq = entry.rfind('=');
    const std::string node = eq == std::string::npos ? "" : entry.substr(0, eq);
    const std::string mode = eq == std::string::npos ? "" : entry.substr(eq + 1);
    if (node.empty() || (mode != "micro-batch" && mode != "whole-batch"))
      throw Error(ExitCode::Usage, fmt::format("--parallel-mode: '{}' is not NODE=micro-batch or NODE=whole-batch", entry));
    modes[node] = mode == "whole-batch" ? ParallelMode::WholeBatch : ParallelMode::MicroBatch;
    at = comma + 1;
  }
  return modes;
}

void Trainer::Impl::choose_conv_layers() {
  const Graph& g = tg.graph;
  std::map<std::string, int> uses;
  for (const Node& n : g.nodes)
    for (const std::string& in : n.inputs) ++uses[in];
  std::map<std::string, ParallelMode> overrides = options.parallel_modes;
  std::map<std::string, ParallelMode> recorded = options.recorded_modes;
  const double below = options.whole_batch_below_flops_per_byte;
  cropped_gradient_of.assign(parameters.size(), nullptr);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_conv_layer(n.op)) continue;
    ConvLayer L;
    L.full = conv_layer_descriptor(g, n);
    L.transposed = n.op == Op::ConvTranspose;
    L.full.mb = m;
    L.full.name.clear();
    L.taps = useful_taps(L.full);
    L.crop = !L.taps.whole(L.full);
    const int w = id(n.inputs[1]);
    const int b = n.inputs.size() > 2 && !n.inputs[2].empty() ? id(n.inputs[2]) : -1;
    L.bias_channels = b < 0 ? 0 : L.transposed ? L.full.ic : L.full.oc;
    L.w_param = values[w].parameter;
    L.b_param = b >= 0 ? values[b].parameter : -1;
    if (why && L.crop)
      why->push_back(fmt::format("{}: only taps {}..{} x {}..{} of its {}x{} kernel read input (the rest read padding "
                                 "for every output pixel): its kernels run {}",
                                 n.name, L.taps.r0, L.taps.r0 + L.taps.kh - 1, L.taps.s0, L.taps.s0 + L.taps.kw - 1,
                                 L.full.kh, L.full.kw, cropped(L.full, L.taps).normalised()));

    // Whole-batch needs the layer's own gradient buffers: weights (and bias) read by
    // this node alone.
    std::string refused;
    if (L.w_param < 0) refused = "its weights are not trained";
    else if (uses[n.inputs[1]] != 1) refused = "its weights are read by another node too";
    else if (L.b_param >= 0 && uses[n.inputs[2]] != 1) refused = "its bias is read by another node too";
    ConvDescriptor work = cropped(L.full, L.taps);
    const double flops = work.flops(), bytes = 4.0 * double(L.full.oc * L.full.icg() * L.full.kh * L.full.kw);
    const double intensity = flops / bytes;
    auto over = overrides.find(n.name);
    if (over == overrides.end()) over = overrides.find("*");
    if (over != overrides.end()) {
      if (over->second == ParallelMode::WholeBatch && !refused.empty())
        throw Error(ExitCode::Usage,
                    fmt::format("--parallel-mode: layer '{}' cannot run whole-batch: {}", n.name, refused));
      L.mode = over->second;
      L.why_mode = "--parallel-mode";
      if (over->first != "*") overrides.erase(over);
    } else if (!recorded.empty()) {
      const auto rec = recorded.find(n.name);
      if (rec == recorded.end())
        throw Error(ExitCode::BadRecord, fmt::format("{}: names no parallel mode for {} layer '{}' of {}",
                                                     options.recorded_modes_source, op_name(n.op), n.name, g.source));
      if (rec->second == ParallelMode::WholeBatch && !refused.empty())
        throw Error(ExitCode::BadRecord, fmt::format("{}: layer '{}' cannot run whole-batch: {}",
                                                     options.recorded_modes_source, n.name, refused));
      L.mode = rec->second;
      L.why_mode = options.recorded_modes_source;
    } else if (!refused.empty()) {
      L.mode = ParallelMode::MicroBatch;
      L.why_mode = refused;
    } else if (intensity < below) {
      L.mode = ParallelMode::WholeBatch;
      L.why_mode = fmt::format("a micro-batch's backward-weights does {:.3g} flop per byte of weight gradient, below {:g}",
                               intensity, below);
    } else {
      L.mode = ParallelMode::MicroBatch;
      L.why_mode = fmt::format("a micro-batch's backward-weights does {:.3g} flop per byte of weight gradient, at least {:g}",
                               intensity, below);
    }
    recorded.erase(n.name);
    if (why) why->push_back(fmt::format("{}: parallel mode {} ({})", n.name, parallel_mode_name(L.mode), L.why_mode));
    const double kernel_weight_bytes = 4.0 * double(work.oc * work.icg() * work.kh * work.kw);
    const bool few_flops = L.mode == ParallelMode::WholeBatch && intensity < kBatchedBelowFlopsPerByte;
    L.batched = few_flops && kernel_weight_bytes >= double(options.batched_from_weight_bytes);
    L.packs_once = !L.batched && intensity < kPackOnceBelowFlopsPerByte;
    if (why && few_flops && !L.batched)
      why->push_back(fmt::format("{}: forward and backward-data per micro-batch although {:.3g} flop per byte of weights "
                                 "is below {:g}: its kernel's {:.0f} KiB of weights are below the {} KiB a barrier "
                                 "pass needs",
                                 n.name, intensity, kBatchedBelowFlopsPerByte, kernel_weight_bytes / 1024.0,
                                 options.batched_from_weight_bytes / 1024));
    if (why && L.packs_once)
      why->push_back(fmt::format("{}: weights packed once per mini-batch for forward and backward-data ({:.3g} flop "
                                 "per byte of weights per micro-batch, below {:g})",
                                 n.name, intensity, kPackOnceBelowFlopsPerByte));
    if (why && L.batched)
      why->push_back(fmt::format("{}: forward and backward-data over the whole mini-batch at barriers ({:.3g} flop per "
                                 "byte of weights per micro-batch, below {:g})",
                                 n.name, intensity, kBatchedBelowFlopsPerByte));
    if (L.mode == ParallelMode::WholeBatch) {
      ConvDescriptor batch = work;
      batch.mb = options.batch;
      L.weight_gradient_flops = batch.flops();
    }
    if (L.mode == ParallelMode::WholeBatch)
      for (int p : {L.w_param, L.b_param}) {
        if (p < 0) continue;
        deferred_param[p] = 1;
        // A cropped layer's weight gradient stays cropped: the update expands it chunk
        // by chunk (cropped_gradient_of).
        if (p == L.w_param && L.crop) continue;
        deferred_grad[p].assign(parameters[p].value.size(), 0.0f);
      }
    auto placed = conv_layers.emplace(i, std::move(L)).first;
    if (placed->second.mode == ParallelMode::WholeBatch && placed->second.crop)
      cropped_gradient_of[static_cast<size_t>(placed->second.w_param)] = &placed->second;
  }
  overrides.erase("*");
  if (!recorded.empty())
    throw Error(ExitCode::BadRecord, fmt::format("{}: '{}' is not a Conv or ConvTranspose node of {}", options.recorded_modes_source,
                                                 recorded.begin()->first, g.source));
  if (!overrides.empty())
    throw Error(ExitCode::Usage, fmt::format("--parallel-mode: '{}' is not a Conv or ConvTranspose node of {}", overrides.begin()->first,
                                             g.source));
}

TrainConv* Trainer::Impl::conv_kernels(size_t node, int64_t n, bool intra_kernel, bool needs_forward) {
  const ConvLayer& L = conv_layers.at(node);
  ConvDescriptor d = cropped(L.full, L.taps);
  d.mb = n;
  if (d.ih == 1 && d.iw == 1 && d.oh() == 1 && d.ow() == 1 && d.kh == 1 && d.kw == 1) {
    // One pixel in, one out, one tap (1x1 images, padding taps cropped): the same memory
    // is a 1 x n image, each sample a pixel (NHWC), so the kernels tile the samples as
    // pixels instead of one-pixel images, and split them over threads. ResNeXt-50's
    // layer4 2048 -> 1024 at 32 samples, AMD EPYC Zen 4, one thread: forward 30 -> 44
    // GF/s, backward-data 39 -> 58 (440 channels: 34 -> 50, 45 -> 93).
    d.mb = 1;
    d.iw = n;
    d.sh = d.sw = 1;
    d.dh = d.dw = 1;
  }
  TrainConvRequest request;
  request.descriptor = d;
  request.needs_backward_data = needs_forward && values[id(tg.graph.nodes[node].inputs[0])].requires_grad;
  request.needs_forward = needs_forward;
  request.intra_kernel = intra_kernel;
  request.pack_weights_once = L.packs_once && needs_forward && n < options.batch;
  request.threads = options.threads;
  request.records = options.records;
  request.target = target;
  if (L.transposed) {
    // The convolution's kernels behind the ConvTranspose's passes; their own cache entry.
    const TrainConvRequest conv_request = convolution_request_of_transposed(request);
    const std::string key = "transposed " + d.normalised() + (conv_request.needs_forward ? "+dx" : "") +
                            (conv_request.needs_backward_data ? "+y" : "") + (request.pack_weights_once ? "+packed" : "");
    auto it = convs.find(key);
    if (it == convs.end()) it = convs.emplace(key, transposed_conv(make_conv(conv_request), d)).first;
    return it->second.get();
  }
  const std::string key = d.normalised();
  // Identical layers share one implementation; a weights-only request (a whole-batch
  // gradient) takes any kernel set of its shape.
  if (!needs_forward)
    for (const char* suffix : {"+dx", ""}) {
      auto it = convs.find(key + suffix);
      if (it != convs.end()) return it->second.get();
    }
  const std::string shared = key + (request.needs_backward_data ? "+dx" : needs_forward ? "" : "+weights") +
                             (request.pack_weights_once ? "+packed" : "");
  auto it = convs.find(shared);
  if (it == convs.end()) it = convs.emplace(shared, make_conv(request)).first;
  return it->second.get();
}

void Trainer::Impl::refresh_cropped_weights() {
  struct Work {
    ConvLayer* layer;
    int64_t k0, k1;
  };
  std::vector<Work> work;
  for (auto& [node, L] : conv_layers) {
    if (!L.crop) continue;
    L.cropped_w.resize(static_cast<size_t>(L.full.oc * L.full.icg() * L.taps.kh * L.taps.kw));
    for (int64_t k = 0; k < L.full.oc; k += kChannelBlock) work.push_back({&L, k, std::min(L.full.oc, k + kChannelBlock)});
  }
  if (work.empty()) return;
#pragma omp parallel for schedule(static) num_threads(options.threads)
  for (size_t i = 0; i < work.size(); ++i) {
    const Work& w = work[i];
    const float* full = w.layer->w_param >= 0 ? parameters[w.layer->w_param].value.data() : nullptr;
    if (!full) continue;
    crop_weights(w.layer->full, w.layer->taps, full, w.layer->cropped_w.data(), w.k0, w.k1);
  }
  // Frozen weights of a cropped layer: copied once (they never change).
  for (auto& [node, L] : conv_layers)
    if (L.crop && L.w_param < 0 && !L.frozen_cropped) {
      crop_weights(L.full, L.taps, frozen[values[id(tg.graph.nodes[node].inputs[1])].frozen].data(), L.cropped_w.data(),
                   0, L.full.oc);
      L.frozen_cropped = true;
    }
}

void Trainer::Impl::whole_batch_gradient(size_t node, int64_t count) {
  ConvLayer& L = conv_layers.at(node);
  const Node& n = tg.graph.nodes[node];
  const int x = id(n.inputs[0]), y = id(n.outputs[0]);
  TrainConv* k = L.whole_batch.at(count);
  float* dw = deferred_grad[L.w_param].data();
  if (L.crop) {
    L.cropped_dw.resize(static_cast<size_t>(L.full.oc * L.full.icg() * L.taps.kh * L.taps.kw));
    dw = L.cropped_dw.data();
  }
  float* db = nullptr;
  if (L.bias_channels > 0) {
    if (L.b_param >= 0) {
      db = deferred_grad[L.b_param].data();
    } else {
      L.unused_db.resize(static_cast<size_t>(L.bias_channels));
      db = L.unused_db.data();
    }
  }
  const float* yp = n.attributes.fused_relu ? batch_act[y].data() : nullptr;
  k->backward_weights(batch_act[x].data(), batch_grad[y].data(), yp, dw, db);
}

void Trainer::Impl::batched_conv(Action a, size_t node, const Guard& guarded) {
  ConvLayer& L = conv_layers.at(node);
  const Node& n = tg.graph.nodes[node];
  const int x = id(n.inputs[0]), y = id(n.outputs[0]);
  TrainConv* k = L.whole_batch.at(batch_count);
  Slot& first = slots[0];  // parameters are the same in every slot
  const float* w = L.crop ? L.cropped_w.data() : data_of(first, id(n.inputs[1]));
  // The micro-batches' activations are consecutive slices of one mini-batch buffer.
  if (a == Action::ConvForward) {
    if (distributed()) share_samples(batch_act[x].data(), values[x].sample_elements);
    const float* bias = n.inputs.size() > 2 && !n.inputs[2].empty() ? data_of(first, id(n.inputs[2])) : nullptr;
    const float* wf = weights_for(node, *k, kForwardPanels, w);
    guarded([&] { k->forward(batch_act[x].data(), wf, bias, batch_act[y].data()); });
    return;
  }
  // dY, a mini-batch buffer (whole-batch layer): zero where nothing downstream reached it.
  for (int64_t s = own_begin; s < own_end; ++s) {
    Slot& slot = slots[s];
    if (!slot.grad_written[y]) std::fill(slot.grad[y].begin(), slot.grad[y].end(), 0.0f);
    slot.grad_written[y] = 1;
  }
  if (distributed()) share_samples(batch_grad[y].data(), values[y].sample_elements);
  if (!values[x].requires_grad) return;
  const int64_t sample = values[x].sample_elements;
  conv_dx.resize(static_cast<size_t>(batch_count * sample));
  const float* yp = n.attributes.fused_relu ? batch_act[y].data() : nullptr;
  const float* wd = weights_for(node, *k, kBackwardDataPanels, w);
  guarded([&] { k->backward_data(batch_grad[y].data(), wd, yp, conv_dx.data()); });
  // Into each micro-batch's gradient of x (its own buffer, or added to what another reader
  // of x wrote), as the micro-batch's backward would have.
#pragma omp parallel for schedule(static, 1) num_threads(options.threads)
  for (int64_t s = own_begin; s < own_end; ++s)
    guarded([&] {
      Slot& slot = slots[s];
      const Target t = target_for(slot, x);
      const float* from = conv_dx.data() + s * m * sample;
      float* to = t.view.data;
      const int64_t e_end = t.view.elements();
      if (t.accumulate)
        for (int64_t e = 0; e < e_end; ++e) to[e] += from[e];
      else
        std::copy(from, from + e_end, to);
    });
}

void Trainer::Impl::drain_whole_batch_gradients(const std::vector<size_t>& layers, std::atomic<size_t>& next,
                                                int64_t count, const Guard& guarded) {
  for (size_t j; (j = next.fetch_add(1)) < layers.size();) {
    const size_t node = layers[j];
    const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    guarded([&] {
      const LoopsAsTasks share;  // threads done with their micro-batches help with its loop
      whole_batch_gradient(node, count);
    });
    if (options.profile) {  // thread time; one thread per layer: no other thread writes this entry
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() *
                             (omp_in_parallel() ? 1 : options.threads);
      gemm_seconds[3 * node + 1] += seconds;
      whole_batch_seconds[static_cast<size_t>(omp_get_thread_num())] += seconds;
    }
  }
}

}  // namespace convgen::model
