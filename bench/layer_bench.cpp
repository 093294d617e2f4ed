#include "bench/layer_bench.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "bench/bench_util.h"
#include "bench/onednn_conv.h"
#include "bench/onednn_conv_backward.h"
#include "generator/conv/jit.h"
#include "generator/tune/tune_plan.h"
#include "runtime/im2col/im2col_blis.h"
#include "runtime/im2col/im2col_blis_backward.h"
#include "runtime/memory/aligned_buffer.h"
#include "schedules/errors.h"
#include "schedules/schedule_records.h"
#include "schedules/schedule_selection.h"
#include "schedules/weight_panels.h"
#include "schedules/tap_window.h"

namespace convgen::bench {

namespace cb = convgen::bench;

std::vector<Layer> load_layers(const Options& o) {
  std::vector<Layer> layers;
  for (const std::string& path : o.layer_files) {
    const std::string set = std::filesystem::path(path).stem().string();
    for (ConvDescriptor d : convgen::read_layer_set(path)) layers.push_back({set, d});
  }
  int cli_index = 0;
  for (const std::string& text : o.descriptors) {
    ConvDescriptor d = convgen::parse_descriptor(text);
    // The peers' epilogues are bias and ReLU: anything else would not compare like with like.
    if (!convgen::inference_only_flags(d).empty())
      throw convgen::Error(convgen::ExitCode::Usage,
                           fmt::format("--descriptor {}: {} is an inference epilogue the peers do not run; benchmark "
                                       "the layer without it",
                                       text, convgen::inference_only_flags(d)));
    ++cli_index;
    if (d.name.empty()) d.name = fmt::format("cli{}", cli_index);
    layers.push_back({"cli", d});
  }
  for (Layer& l : layers) {
    l.d.mb = o.mb;
    convgen::validate(l.d);
  }
  return layers;
}

namespace {

// The layer that reads the network's input image (grey: LeNet's conv1; RGB: every other
// set's first layer). Training never computes the data gradient of that layer, so its
// bwd_data row is reported but left out of the bwd_data geomeans.
bool is_network_input(const ConvDescriptor& d) { return d.g == 1 && (d.ic == 1 || d.ic == 3); }

// Warm-up call, then one timed call to size the batch so a sample lasts >= 20 ms.
void calibrate(PeerResult& r) {
  r.call();
  cb::Timer t;
  r.call();
  const double s = t.seconds();
  r.reps = s >= kMinSampleSeconds
               ? 1
               : static_cast<int64_t>(std::ceil(kMinSampleSeconds / std::max(s, 1e-9)));
  r.reps = std::min<int64_t>(r.reps, 1000000);
}

// As many untimed calls first as the sample makes: the peer timed before this one
// leaves the machine in a state that slows the next memory-bound kernel for tens of
// milliseconds (up to 2x over a whole 20 ms sample right after oneDNN's calls on an Intel
// Xeon, even after one untimed call), so each sample starts after a sample's worth of
// its own calls.
void sample(PeerResult& r, double flops) {
  for (int64_t i = 0; i < r.reps; ++i) r.call();
  cb::Timer t;
  for (int64_t i = 0; i < r.reps; ++i) r.call();
  const double seconds = t.seconds() / static_cast<double>(r.reps);
  r.gflops.push_back(flops / seconds * 1e-9);
}

// max|a - b| / max|ref|; NaN if any value is NaN (e.g. an output never written).
double relative_diff(const FloatBuffer& a, const FloatBuffer& ref) {
  double max_diff = 0.0, max_ref = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - ref[i]);
    if (!(diff <= max_diff)) max_diff = diff;  // also catches NaN
    if (std::isnan(max_diff)) return kNaN;
    max_ref = std::max(max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  if (max_ref == 0.0) return max_diff == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return max_diff / max_ref;
}

// The largest value, or NaN as soon as one is NaN.
double worst_of(const std::vector<double>& values) {
  double worst = 0.0;
  for (double v : values) {
    if (std::isnan(v)) return kNaN;
    worst = std::max(worst, v);
  }
  return worst;
}

// A peer's output tensors of one pass: {y}, {dx}, or {dw} plus {db} when the layer has a
// bias. Compared tensor by tensor, each relative to its own max|ref|.
using Outputs = std::vector<FloatBuffer>;

double outputs_diff(const Outputs& a, const Outputs& ref) {
  std::vector<double> diffs;
  for (size_t t = 0; t < ref.size(); ++t) diffs.push_back(relative_diff(a[t], ref[t]));
  return worst_of(diffs);
}

// Outputs start as NaN so an element a kernel never writes fails the check.
FloatBuffer unwritten(int64_t size) {
  return FloatBuffer(static_cast<size_t>(size), std::numeric_limits<float>::quiet_NaN());
}

// Deterministic inputs of one layer (fixed seeds): only those the pass reads. Cache-line
// aligned, as convgen's runtime stores tensors (oneDNN reorders into its own memory).
struct Inputs {
  FloatBuffer x, w, bias;  // NHWC input, OIHW weights, [oc] bias
  FloatBuffer dy;          // NHWK output gradient, as the next layer hands it back
  FloatBuffer y;           // NHWK forward output, whose ReLU mask (y > 0) convgen applies
  FloatBuffer dy_masked;   // dy with that mask applied, for the peers (ReLU layers)
  // The dY the peers read: they do not fuse the ReLU mask, so it is applied once, untimed.
  const float* dy_for_peers() const { return dy_masked.empty() ? dy.data() : dy_masked.data(); }
};

Inputs make_inputs(const ConvDescriptor& d, Pass pass) {
  const int64_t x_size = d.mb * d.ih * d.iw * d.ic;
  const int64_t w_size = d.oc * d.icg() * d.kh * d.kw;
  const int64_t y_size = d.mb * d.oh() * d.ow() * d.oc;
  auto filled = [](int64_t size, uint64_t seed) {
    FloatBuffer v(static_cast<size_t>(size));
    cb::fill_uniform(v.data(), size, seed);
    return v;
  };
  Inputs in;
  if (pass != Pass::BwdData) in.x = filled(x_size, 0x5eed0001);
  if (pass != Pass::BwdWeights) in.w = filled(w_size, 0x5eed0002);
  if (pass == Pass::Fwd) {
    in.bias = filled(d.oc, 0x5eed0003);
    return in;
  }
  in.dy = filled(y_size, 0x5eed0004);
  if (d.relu) {
    // Any signs will do for the mask; uniform in [-1, 1) zeroes about half of dY.
    in.y = filled(y_size, 0x5eed0005);
    in.dy_masked = in.dy;
    for (int64_t i = 0; i < y_size; ++i)
      if (!(in.y[i] > 0.0f)) in.dy_masked[i] = 0.0f;
  }
  return in;
}

// Runs a peer's setup; a peer that cannot handle the layer (Error Unsupported, e.g. oneDNN
// has no implementation) is marked skipped with the reason instead of ending the run.
void set_up(PeerResult& r, const std::function<void()>& setup) {
  if (!r.enabled) return;
  try {
    setup();
  } catch (const Error& e) {
    if (e.code() != ExitCode::Unsupported) throw;
    r.skipped = e.what();
    r.call = r.finish = nullptr;
  }
}

// Why the BLIS peer cannot run the layer (its column buffer would not fit), or "".
std::string blis_memory_refusal(const ConvDescriptor& d) {
  const int64_t need = cb::Im2colBlisConv::workspace_bytes_for(d);
  const int64_t avail = cb::available_memory_bytes();
  if (avail > 0 && need > avail / 2)
    return fmt::format("im2col buffer {:.1f} GiB exceeds half of MemAvailable",
                       static_cast<double>(need) / (1 << 30));
  return "";
}

// --weights: the GEMM forward and backward-data weights of every convgen peer are packed
// per call or once at set-up (packed_weights), so the default and the tuned kernel compare
// alike. Backward-weights reads no weights, and other strategies read ONNX weights either
// way (schedules/weight_panels.h), so their schedules keep what they say.
convgen::ConvSchedule with_weights_mode(convgen::ConvSchedule s, const LayerResult& res, const Options& o) {
  if (res.pass == Pass::BwdWeights || s.strategy != convgen::Strategy::Gemm) return s;
  s.pack_weights = o.weights;
  return s;
}

// convgen's analytic schedule for the pass, with the --schedule overrides and the
// threading choice of the bench applied; records it and its reasons in `res`.
convgen::ConvSchedule convgen_schedule(LayerResult& res, const ConvDescriptor& d, const convgen::TargetInfo& target,
                                       const Options& o) {
  convgen::ConvSchedule s =
      convgen::analytic_schedule_for_pass(d, pass_name(res.pass), target, &res.schedule_why);
  const bool beside_records = !o.schedules.empty();
  if (beside_records || o.threads > 1) {
    // Beside tuned records: the variant their consumers run and the tuner timed the
    // default in (fixed by the layer, whatever the thread count), so tuned / default
    // compares like with like; in bwd_weights it shapes the reduction's items (whole
    // images), which a parallel=none default does not share. Otherwise, over T > 1 OpenMP
    // threads: images when there are enough of them to share out, else pixel blocks of
    // each image. For fwd and bwd_data these are output dimensions, never the reduction,
    // so the result is the same as on one thread; in bwd_weights they are the reduction,
    // split into partitions fixed by the schedule (convgen::parallel_variant).
    const convgen::Parallel variant = beside_records     ? convgen::recorded_parallel(d)
                                      : d.mb >= 2 * o.threads ? convgen::Parallel::Images
                                                              : convgen::Parallel::Pixels;
    s = convgen::parallel_variant(d, pass_name(res.pass), s, variant, &res.schedule_why);
    res.schedule_why.push_back(beside_records ? fmt::format("bench: parallel={}, the variant of the tuned records' consumers",
                                                            convgen::to_string(s.parallel))
                                              : fmt::format("bench: parallel={} for {} threads",
                                                            convgen::to_string(s.parallel), o.threads));
    if (o.threads > 1) res.convgen_threads = o.threads;
  }
  if (!o.schedule_overrides.empty()) {
    convgen::apply_schedule_overrides(o.schedule_overrides, &s);
    res.schedule_why.push_back(fmt::format("bench: --schedule '{}'", o.schedule_overrides));
  }
  s = with_weights_mode(s, res, o);
  res.default_schedule = s;
  res.schedule = convgen::describe(s);
  return s;
}

// The tuned record's schedule for the pass (--schedules), as its consumers run it (its
// parallel variant is recorded); Unsupported (the peer is skipped) when no record of
// this layer, pass, target and generator is in the file.
convgen::ConvSchedule tuned_schedule(LayerResult& res, const ConvDescriptor& d, const convgen::TargetInfo& target,
                                     const Options& o) {
  std::vector<std::string> why;
  convgen::SelectedSchedule sel = convgen::select_schedule(d, pass_name(res.pass), target, o.schedules, &why);
  if (sel.source == "analytic default")
    throw Error(ExitCode::Unsupported, fmt::format("no tuned record in {} for this layer and pass", o.schedules));
  const convgen::ConvSchedule s = with_weights_mode(sel.schedule, res, o);
  res.tuned_schedule = convgen::describe(s);
  return s;
}

// The schedule a convgen peer runs on `d` (the layer, or its cropped form): the analytic
// default (kConvgen, and kDefaultAgain beside a tuned record) or the tuned record (kTuned).
convgen::ConvSchedule peer_schedule(LayerResult& res, Peer p, const ConvDescriptor& d,
                                    const convgen::TargetInfo& target, const Options& o) {
  if (p == kTuned) return tuned_schedule(res, d, target, o);
  if (p == kDefaultAgain) {  // set up after both: the default's schedule once more
    if (!res.peer[kTuned].runs() || !res.peer[kConvgen].runs())
      throw Error(ExitCode::Unsupported, "runs only beside a tuned record and the default");
    return res.default_schedule;
  }
  return convgen_schedule(res, d, target, o);
}

// The control's kernel is a private copy: the same code at other addresses, so its gap
// to the default includes code placement (as in the tuner's re-timing).
convgen::KernelSource kernel_source(Peer p) {
  return p == kDefaultAgain ? convgen::KernelSource::PrivateCopy : convgen::KernelSource::Cache;
}

// What convgen runs for a layer whose taps partly read only padding (small images): the
// cropped convolution on a cropped copy of the weights, as the trainer does
// (schedules/tap_window.h). The copy is made at set-up, untimed, as the trainer makes it
// once per step and oneDNN's reorders are made here; expanding the cropped weight
// gradient back to the layer's shape is part of the timed backward-weights call.
struct Cropping {
  bool active = false;
  convgen::TapWindow taps;
  ConvDescriptor runs;                   // the descriptor the kernel is generated for
  std::shared_ptr<FloatBuffer> weights;  // the cropped weights, for the passes that read them
  const float* w(const Inputs& in) const { return active ? weights->data() : in.w.data(); }
};

// A kernel scheduled pack_weights=prepacked reads panels packed once here, untimed (as
// oneDNN's weights are reordered once before its timed calls), and the peer's report counts
// them; null (and 0 floats) when it packs per call.
std::shared_ptr<FloatBuffer> packed_weights(const convgen::WeightPanels& panels, const float* w, PeerResult& r) {
  r.packed_weight_floats = panels.empty() ? 0 : panels.floats;
  if (panels.empty()) return nullptr;
  auto packed = std::make_shared<FloatBuffer>(static_cast<size_t>(panels.floats));
  convgen::pack_weight_panels(panels, w, packed->data());
  return packed;
}

Cropping cropping_for(LayerResult& res, const Inputs& in) {
  const ConvDescriptor& d = res.layer.d;
  Cropping c;
  c.taps = convgen::useful_taps(d);
  c.runs = convgen::cropped(d, c.taps);
  c.active = !c.taps.whole(d);
  if (!c.active) return c;
  res.schedule_why.push_back(fmt::format(
      "bench: convgen runs the {}x{} taps from ({}, {}) of the {}x{} kernel; the others read only padding",
      c.taps.kh, c.taps.kw, c.taps.r0, c.taps.s0, d.kh, d.kw));
  if (!in.w.empty()) {
    c.weights = std::make_shared<FloatBuffer>(static_cast<size_t>(d.oc * d.icg() * c.taps.kh * c.taps.kw));
    convgen::crop_weights(d, c.taps, in.w.data(), c.weights->data(), 0, d.oc);
  }
  return c;
}

template <class OnednnPeer>
void record_onednn(LayerResult& res, const OnednnPeer& onednn) {
  res.onednn_impl = onednn.impl_name();
  res.onednn_layouts = onednn.layouts();
  res.onednn_reorder_in_ms = onednn.reorder_in_ms();
  res.onednn_reorder_out_ms = onednn.reorder_out_ms();
  res.onednn_reorder_ms = onednn.reorder_ms();
  res.peer[kOnednn].workspace_bytes = onednn.workspace_bytes();
}

// Each set_up_<pass> fills every enabled peer's timed call and its finish step; the
// calls read `in` and write `out[peer]`, which outlive them (bench_layer's frame).

void set_up_forward(LayerResult& res, const Inputs& in, Outputs* out, const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const int64_t y_size = d.mb * d.oh() * d.ow() * d.oc;
  const float* bias = d.bias ? in.bias.data() : nullptr;
  const Cropping crop = cropping_for(res, in);
  for (Peer p : {kConvgen, kTuned, kDefaultAgain}) {
    set_up(res.peer[p], [&] {
      const convgen::TargetInfo& target = o.target;
      const convgen::ConvSchedule s = peer_schedule(res, p, crop.runs, target, o);
      auto kernel = std::make_shared<convgen::JitForwardKernel>(crop.runs, s, target,
                                                                convgen::ForwardBuildOptions{}, kernel_source(p));
      out[p] = {unwritten(y_size)};
      float* y = out[p][0].data();
      PeerResult& r = res.peer[p];
      auto packed = packed_weights(kernel->weight_panels(), crop.w(in), r);
      r.call = [kernel, &in, w = packed ? packed->data() : crop.w(in), keep = crop.weights, packed, bias, y] {
        kernel->run(in.x.data(), w, bias, y);
      };
      r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
    });
  }
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisConv>(d, o.threads, in.w.data());
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    out[kBlis] = {unwritten(y_size)};
    float* y = out[kBlis][0].data();
    r.call = [blis, &in, y] { blis->run(in.x.data(), in.bias.data(), y); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConv>(d, o.threads);
    onednn->prepare(in.x.data(), in.w.data(), in.bias.data());  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, y_size] {
      out[kOnednn] = {unwritten(y_size)};
      onednn->run_and_fetch(in.x.data(), in.w.data(), in.bias.data(), out[kOnednn][0].data());
    };
  });
}

void set_up_backward_data(LayerResult& res, const Inputs& in, Outputs* out, const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const int64_t dx_size = d.mb * d.ih * d.iw * d.ic;
  const float* y = d.relu ? in.y.data() : nullptr;
  const float* dy_peers = in.dy_for_peers();
  const Cropping crop = cropping_for(res, in);
  for (Peer p : {kConvgen, kTuned, kDefaultAgain}) {
    set_up(res.peer[p], [&] {
      const convgen::TargetInfo& target = o.target;
      const convgen::ConvSchedule s = peer_schedule(res, p, crop.runs, target, o);
      auto kernel = std::make_shared<convgen::JitBackwardDataKernel>(crop.runs, s, target,
                                                                     convgen::ForwardBuildOptions{}, kernel_source(p));
      out[p] = {unwritten(dx_size)};
      float* dx = out[p][0].data();
      PeerResult& r = res.peer[p];
      auto packed = packed_weights(kernel->weight_panels(), crop.w(in), r);
      r.call = [kernel, &in, w = packed ? packed->data() : crop.w(in), keep = crop.weights, packed, y, dx] {
        kernel->run(in.dy.data(), w, y, dx);
      };
      r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
    });
  }
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisBackwardData>(d, o.threads);
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    out[kBlis] = {unwritten(dx_size)};
    float* dx = out[kBlis][0].data();
    r.call = [blis, &in, dy_peers, dx] { blis->run(dy_peers, in.w.data(), dx); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConvBackwardData>(d, o.threads);
    onednn->prepare(dy_peers, in.w.data());  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, dy_peers, dx_size] {
      out[kOnednn] = {unwritten(dx_size)};
      onednn->run_and_fetch(dy_peers, in.w.data(), out[kOnednn][0].data());
    };
  });
}

// Allocates a peer's weight gradients, {dw} or {dw, db}; returns (dw, db), db null for a
// layer without bias.
std::pair<float*, float*> weight_gradients(const ConvDescriptor& d, Outputs& out) {
  out = {unwritten(d.oc * d.icg() * d.kh * d.kw)};
  if (!d.bias) return {out[0].data(), nullptr};
  out.push_back(unwritten(d.oc));
  return {out[0].data(), out[1].data()};
}

void set_up_backward_weights(LayerResult& res, const Inputs& in, Outputs* out,
                             const Options& o) {
  const ConvDescriptor& d = res.layer.d;
  const float* y = d.relu ? in.y.data() : nullptr;
  const float* dy_peers = in.dy_for_peers();
  const Cropping crop = cropping_for(res, in);
  for (Peer p : {kConvgen, kTuned, kDefaultAgain}) {
    set_up(res.peer[p], [&] {
      const convgen::TargetInfo& target = o.target;
      const convgen::ConvSchedule s = peer_schedule(res, p, crop.runs, target, o);
      auto kernel = std::make_shared<convgen::JitBackwardWeightsKernel>(crop.runs, s, target,
                                                                        convgen::ForwardBuildOptions{}, kernel_source(p));
      const auto [dw, db] = weight_gradients(d, out[p]);
      PeerResult& r = res.peer[p];
      if (!crop.active) {
        r.call = [kernel, &in, y, dw = dw, db = db] { kernel->run(in.x.data(), in.dy.data(), y, dw, db); };
      } else {
        // The cropped gradient, then back to the layer's shape (zeros on the cropped taps).
        auto small = std::make_shared<FloatBuffer>(static_cast<size_t>(d.oc * d.icg() * crop.taps.kh * crop.taps.kw));
        r.call = [kernel, &in, y, dw = dw, db = db, small, d, taps = crop.taps] {
          kernel->run(in.x.data(), in.dy.data(), y, small->data(), db);
          convgen::expand_weight_gradient(d, taps, small->data(), dw, 0, d.oc);
        };
      }
      r.finish = [kernel, &r] { r.workspace_bytes = kernel->last_workspace_bytes(); };
    });
  }
  set_up(res.peer[kBlis], [&] {
    PeerResult& r = res.peer[kBlis];
    r.skipped = blis_memory_refusal(d);
    if (!r.skipped.empty()) return;
    auto blis = std::make_shared<cb::Im2colBlisBackwardWeights>(d, o.threads);
    res.blis_direct = blis->direct();
    r.workspace_bytes = blis->workspace_bytes();
    const auto [dw, db] = weight_gradients(d, out[kBlis]);
    r.call = [blis, &in, dy_peers, dw = dw, db = db] { blis->run(in.x.data(), dy_peers, dw, db); };
  });
  set_up(res.peer[kOnednn], [&] {
    auto onednn = std::make_shared<cb::OnednnConvBackwardWeights>(d, o.threads);
    onednn->prepare(in.x.data(), dy_peers);  // untimed reorders
    record_onednn(res, *onednn);
    res.peer[kOnednn].call = [onednn] { onednn->run(); };
    res.peer[kOnednn].finish = [onednn, &in, out, dy_peers, d] {
      const auto [dw, db] = weight_gradients(d, out[kOnednn]);
      onednn->run_and_fetch(in.x.data(), dy_peers, dw, db);
    };
  });
}

// Compares the peers' outputs (see LayerResult::check_ref).
void cross_check(LayerResult& res, const Outputs* out) {
  const bool forward = res.pass == Pass::Fwd;
  const std::vector<Peer> order = forward ? std::vector<Peer>{kOnednn, kBlis}
                                          : std::vector<Peer>{kConvgen, kOnednn, kBlis};
  Peer ref = kPeers;
  for (Peer p : order)
    if (ref == kPeers && res.peer[p].runs()) ref = p;
  if (ref == kPeers) return;
  std::vector<double> checked;
  for (int p = 0; p < kPeers; ++p) {
    if (p == ref || !res.peer[p].runs()) continue;
    res.diff[p] = outputs_diff(out[p], out[ref]);
    if (!forward || p == kConvgen || p == kTuned || p == kDefaultAgain) checked.push_back(res.diff[p]);
  }
  res.check_ref = kPeerNames[ref];
  res.checked = !checked.empty();
  if (res.checked) res.check = worst_of(checked);
}

}  // namespace

double PeerResult::spread() const {
  if (gflops.empty()) return kNaN;
  std::vector<double> fastest = gflops;
  std::sort(fastest.begin(), fastest.end(), std::greater<>());
  const double third = fastest[std::min<size_t>(2, fastest.size() - 1)];
  return fastest[0] > 0 ? (fastest[0] - third) / fastest[0] : kNaN;
}

double LayerResult::default_noise() const {
  const PeerResult &a = peer[kConvgen], &b = peer[kDefaultAgain], &t = peer[kTuned];
  if (!a.runs() || !b.runs() || !t.runs()) return kNaN;
  const double better = std::max(a.median_gflops, b.median_gflops);
  const double placement = std::fabs(a.median_gflops - b.median_gflops) / better;
  return std::max({placement, a.spread(), b.spread(), t.spread(), 0.01});
}

bool LayerResult::tuned_below_default() const {
  const double noise = default_noise();
  if (std::isnan(noise)) return false;
  const double better = std::max(peer[kConvgen].median_gflops, peer[kDefaultAgain].median_gflops);
  return (better - peer[kTuned].median_gflops) / better > noise;
}

LayerResult bench_layer(const Layer& layer, Pass pass, const Options& o) {
  LayerResult res;
  res.layer = layer;
  res.pass = pass;
  res.flops = layer.d.flops();  // the forward's count in every pass (bench/README.md)
  res.network_input = is_network_input(layer.d);
  for (int p = 0; p < kPeers; ++p) res.peer[p].enabled = o.peer_enabled[p];

  const Inputs in = make_inputs(layer.d, pass);
  Outputs out[kPeers];
  switch (pass) {
    case Pass::Fwd: set_up_forward(res, in, out, o); break;
    case Pass::BwdData: set_up_backward_data(res, in, out, o); break;
    case Pass::BwdWeights: set_up_backward_weights(res, in, out, o); break;
  }

  omp_set_num_threads(o.threads);
  // Samples in the order default, tuned, BLIS, oneDNN, default again in even runs and the
  // reverse in odd ones: what runs just before a kernel (the cache and memory state it
  // leaves) moves memory-bound kernels by more than a tuned schedule's gain, so no peer
  // always follows the same one, and the two default copies never sit in the same place.
  const Peer order[kPeers] = {kConvgen, kTuned, kBlis, kOnednn, kDefaultAgain};
  for (PeerResult& p : res.peer)
    if (p.runs()) calibrate(p);
  for (int run = 0; run < o.runs; ++run)
    for (int i = 0; i < kPeers; ++i) {
      PeerResult& p = res.peer[order[run % 2 == 0 ? i : kPeers - 1 - i]];
      if (p.runs()) sample(p, res.flops);
    }
  for (PeerResult& p : res.peer) {
    if (!p.runs()) continue;
    p.median_gflops = cb::median(p.gflops);
    if (p.finish) p.finish();
  }
  cross_check(res, out);
  for (PeerResult& p : res.peer) p.call = p.finish = nullptr;  // they capture this frame
  return res;
}

}  // namespace convgen::bench
