#include "generator/tune/kernel_evaluator.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "generator/conv/jit.h"
#include "schedules/errors.h"

namespace convgen {

struct KernelEvaluator::Kernel {
  std::unique_ptr<JitForwardKernel> fwd;
  std::unique_ptr<JitBackwardDataKernel> bwd_data;
  std::unique_ptr<JitBackwardWeightsKernel> bwd_weights;
  // A pack_weights=prepacked kernel's panels, packed when it is built (untimed, as its
  // consumers pack them once per change of the weights) and shared by every candidate of
  // the same layout; null otherwise.
  std::shared_ptr<const FloatBuffer> panels;

  const float* weights(const PassTensors& in) const { return panels ? panels->data() : in.w.data(); }
  // One call over the evaluator's tensors into `out` (y; dx; or dw and db).
  void run(const ConvDescriptor& d, const PassTensors& in, std::vector<FloatBuffer>& out) {
    if (fwd)
      fwd->run(in.x.data(), weights(in), d.bias ? in.bias.data() : nullptr, out[0].data(),
               d.residual ? in.residual.data() : nullptr);
    if (bwd_data) bwd_data->run(in.dy.data(), weights(in), d.relu ? in.y.data() : nullptr, out[0].data());
    if (bwd_weights)
      bwd_weights->run(in.x.data(), in.dy.data(), d.relu ? in.y.data() : nullptr, out[0].data(),
                       d.bias ? out[1].data() : nullptr);
  }
  int64_t workspace() const {
    return fwd ? fwd->last_workspace_bytes() : bwd_data ? bwd_data->last_workspace_bytes()
                                                        : bwd_weights->last_workspace_bytes();
  }
};

namespace {

// Small integers: every product and sum the kernels form is exact in fp32 (the sweep's
// method), so any correct schedule gives the same bits in any order of summation.
FloatBuffer integers(size_t n, int range, std::mt19937& rng) {
  std::uniform_int_distribution<int> pick(-range, range);
  FloatBuffer v(n);
  for (auto& e : v) e = static_cast<float>(pick(rng));
  return v;
}

// Floats past the end of every output tensor that a kernel must leave alone (the sweep's
// guard idea): a schedule that writes past its output is wrong, not just slow.
constexpr size_t kGuard = 64;

// The pass's output tensors, NaN-filled so an element a kernel never writes fails, each
// followed by kGuard NaNs. A +outstride forward output is the whole channels-last tensor
// the kernel writes its slice of: the other channels must stay NaN.
std::vector<FloatBuffer> output_tensors(const ConvDescriptor& d, const std::string& pass) {
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  const size_t y = static_cast<size_t>(d.mb * d.oh() * d.ow() * d.out_pixel_stride()), x = static_cast<size_t>(d.mb * d.ih * d.iw * d.ic),
               w = static_cast<size_t>(d.oc * d.icg() * d.kh * d.kw);
  if (pass == "fwd") return {FloatBuffer(y + kGuard, nan)};
  if (pass == "bwd_data") return {FloatBuffer(x + kGuard, nan)};
  return {FloatBuffer(w + kGuard, nan), FloatBuffer((d.bias ? static_cast<size_t>(d.oc) : 0) + kGuard, nan)};
}

// True when every guard float is still the quiet NaN it was filled with.
bool guards_intact(const std::vector<FloatBuffer>& out) {
  const auto nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& t : out)
    if (std::memcmp(t.data() + (t.size() - kGuard), std::vector<float>(kGuard, nan).data(), kGuard * sizeof(float)) != 0)
      return false;
  return true;
}

// Exact comparison; "" when equal, else where the first difference is. Equal values
// are equal whatever the sign of a zero: a sum that starts from the first product rather
// than from +0 gives -0 where every product is -0 (-3 x 0), an order effect with the
// same value. Anything else -- another value, a NaN (an element never written) -- differs.
// A HardSwish or Silu epilogue (activation_is_exact false) rounds its function by the
// code LLVM makes of it, which may differ between schedules: those outputs agree within
// `close`'s bound (generator/conv/epilogue.h), still far below any indexing error.
bool close(double got, double want) { return std::fabs(got - want) <= inexact_activation_bound(want); }

std::string first_difference(const std::vector<FloatBuffer>& got, const std::vector<FloatBuffer>& want, bool exact) {
  if (!guards_intact(got)) return "it wrote past the end of its output";
  for (size_t t = 0; t < want.size(); ++t) {
    const size_t n = want[t].size() - kGuard;
    if (std::memcmp(got[t].data(), want[t].data(), n * sizeof(float)) == 0) continue;
    for (size_t i = 0; i < n; ++i)
      if (!(got[t][i] == want[t][i]) && !(std::isnan(got[t][i]) && std::isnan(want[t][i])) &&
          (exact || !close(got[t][i], want[t][i])))
        return fmt::format("{} element {} is {} where the reference gives {}", t == 0 ? "output" : "bias gradient", i,
                           got[t][i], want[t][i]);
  }
  return "";
}

}  // namespace

KernelEvaluator::KernelEvaluator(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                 const ConvSchedule& default_schedule, EvaluatorOptions options)
    : d_(d), pass_(pass), t_(t), options_(std::move(options)) {
  // Ranges that keep every partial sum of the pass below 2^24 in magnitude, where fp32
  // adds integers exactly: x in [-3, 3], w in [-2, 2], dY in [-3, 3] while the longest
  // sum allows it, else narrower, down to [-1, 1].
  const double terms = pass == "fwd"        ? double(d.icg() * d.kh * d.kw) + 1
                       : pass == "bwd_data" ? double(d.ocg() * d.kh * d.kw)
                                            : double(d.mb * d.oh() * d.ow());
  int rx = 3, rw = 2, rdy = 3;
  const double exact = 16777216.0;
  auto worst = [&] {  // the largest magnitude a partial sum can reach
    const double product = pass == "fwd" ? rx * rw : pass == "bwd_data" ? rdy * rw : rx * rdy;
    return terms * product + 4 + (d.residual ? 3 : 0);  // + the bias and the residual
  };
  while (worst() >= exact && (rx > 1 || rw > 1 || rdy > 1)) rx = std::max(1, rx - 1), rw = std::max(1, rw - 1), rdy = std::max(1, rdy - 1);
  if (worst() >= exact)
    throw Error(ExitCode::Unsupported,
                fmt::format("tune: {} {}: sums of {:.0f} terms are too long to check candidates exactly in fp32",
                            d.normalised(), pass, terms));
  std::mt19937 rng(20261202u);
  in_.x = integers(static_cast<size_t>(d.mb * d.ih * d.iw * d.ic), rx, rng);
  in_.w = integers(static_cast<size_t>(d.oc * d.icg() * d.kh * d.kw), rw, rng);
  in_.bias = integers(static_cast<size_t>(d.oc), 4, rng);
  const size_t y = static_cast<size_t>(d.mb * d.oh() * d.ow() * d.oc);
  in_.y = integers(y, 2, rng);  // only its sign matters: the ReLU mask
  in_.dy = integers(y, rdy, rng);
  if (d.residual) in_.residual = integers(y, 3, rng);

  auto kernel = build(default_schedule);
  expected_ = output_tensors(d, pass);
  kernel->run(d, in_, expected_);
  if (!guards_intact(expected_))
    throw Error(ExitCode::Internal, fmt::format("tune: {} {}: the analytic default ({}) wrote past its output",
                                                d.normalised(), pass, describe(default_schedule)));
  // The default against the plain reference, at sampled elements and both ends. Places
  // are dense indices (a +outstride output's slice mapped to its pixels' strides below).
  int64_t total = static_cast<int64_t>(pass == "fwd" ? y : expected_[0].size() - kGuard);
  if (pass == "bwd_weights") total += static_cast<int64_t>(expected_[1].size() - kGuard);
  std::mt19937_64 pick(7);
  std::vector<int64_t> places = {0, total - 1};
  for (int i = 0; i < 512; ++i) places.push_back(static_cast<int64_t>(pick() % static_cast<uint64_t>(total)));
  for (int64_t at : places) {
    const double want = pass == "fwd"        ? reference_forward_at(d, in_, at)
                        : pass == "bwd_data" ? reference_backward_data_at(d, in_, at)
                                             : reference_backward_weights_at(d, in_, at);
    const size_t first = expected_[0].size() - kGuard;
    const int64_t stored = pass == "fwd" ? at / d.oc * d.out_pixel_stride() + at % d.oc : at;
    const float got = static_cast<size_t>(stored) < first ? expected_[0][static_cast<size_t>(stored)]
                                                          : expected_[1][static_cast<size_t>(stored) - first];
    if (static_cast<double>(got) != want && (activation_is_exact(d) || !close(got, want)))
      throw Error(ExitCode::Internal,
                  fmt::format("tune: {} {}: the analytic default ({}) gives {} at element {} where the plain reference "
                              "gives {}",
                              d.normalised(), pass, describe(default_schedule), got, at, want));
  }
  const int64_t budget = std::max<int64_t>(d.im2col_bytes() / 20, int64_t(1) << 20);
  workspace_limit_ = std::max(budget, kernel->workspace());
  built_[describe(default_schedule)] = kernel;
  default_kernel_ = kernel;
}

KernelEvaluator::~KernelEvaluator() = default;

double KernelEvaluator::flops() const { return d_.flops(); }

std::shared_ptr<KernelEvaluator::Kernel> KernelEvaluator::build(const ConvSchedule& candidate,
                                                                KernelSource source) const {
  ForwardBuildOptions o;
  o.inject_padding_bug = !options_.plant_wrong.empty() && describe(candidate) == options_.plant_wrong;
  const ConvSchedule& s = candidate;  // its parallel field is its consumer's (tune_plan.h)
  auto k = std::make_shared<Kernel>();
  if (pass_ == "fwd") k->fwd = std::make_unique<JitForwardKernel>(d_, s, t_, o, source);
  else if (pass_ == "bwd_data") k->bwd_data = std::make_unique<JitBackwardDataKernel>(d_, s, t_, o, source);
  else k->bwd_weights = std::make_unique<JitBackwardWeightsKernel>(d_, s, t_, o, source);
  if (k->fwd) k->panels = packed(k->fwd->weight_panels());
  if (k->bwd_data) k->panels = packed(k->bwd_data->weight_panels());
  return k;
}

std::shared_ptr<const FloatBuffer> KernelEvaluator::packed(const WeightPanels& panels) const {
  // The layout depends on a few fields (MR above all), so hundreds of candidates share a
  // handful of buffers: a 3x3 512->512 layer's panels are 9.4 MB each.
  if (panels.empty()) return nullptr;
  std::string layout;
  for (const WeightPanel& p : panels.panels)
    layout += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{};", p.offset, p.mr, p.channels, p.taps_w, p.taps_h,
                          p.blocks, p.groups, p.outputs, p.base, p.g_stride, p.o_stride, p.c_stride, p.s_stride,
                          p.r_stride);
  const std::lock_guard<std::mutex> lock(packing_mutex_);  // candidates are built in threads
  std::shared_ptr<const FloatBuffer>& buffer = packed_[layout];
  if (!buffer) {
    auto fresh = std::make_shared<FloatBuffer>(static_cast<size_t>(panels.floats));
    pack_weight_panels(panels, in_.w.data(), fresh->data());
    buffer = std::move(fresh);
  }
  return buffer;
}

void KernelEvaluator::prepare(const std::vector<ConvSchedule>& batch) {
  // Builds (LLVM code generation, the slow part) run in parallel threads; Halide
  // compiles independent pipelines concurrently. Nothing is timed meanwhile.
  std::vector<ConvSchedule> todo;
  for (const ConvSchedule& s : batch)
    if (!built_.count(describe(s))) todo.push_back(s);
  std::vector<std::shared_ptr<Kernel>> kernels(todo.size());
  std::vector<std::string> errors(todo.size());
  auto work = [&](size_t i) {
    try {
      kernels[i] = build(todo[i]);
    } catch (const std::exception& e) {
      errors[i] = e.what();
    }
  };
  const size_t jobs = static_cast<size_t>(std::max(1, options_.jobs));
  for (size_t begin = 0; begin < todo.size(); begin += jobs) {
    std::vector<std::thread> threads;
    for (size_t i = begin + 1; i < std::min(todo.size(), begin + jobs); ++i) threads.emplace_back(work, i);
    work(begin);
    for (auto& th : threads) th.join();
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    if (kernels[i]) built_[describe(todo[i])] = kernels[i];
    else build_errors_[describe(todo[i])] = errors[i];
  }
}

std::shared_ptr<KernelEvaluator::Kernel> KernelEvaluator::kernel_for(const ConvSchedule& s, std::string* error) {
  const std::string id = describe(s);
  if (auto it = built_.find(id); it != built_.end()) return it->second;
  if (auto it = build_errors_.find(id); it != build_errors_.end()) {
    *error = it->second;
    return nullptr;
  }
  prepare({s});
  return kernel_for(s, error);
}

double KernelEvaluator::sample_seconds(Kernel& k, int64_t reps) {
  const double start = monotonic_seconds();
  for (int64_t i = 0; i < reps; ++i) k.run(d_, in_, expected_scratch_);
  return (monotonic_seconds() - start) / static_cast<double>(reps);
}

int64_t KernelEvaluator::calibrate(Kernel& k) {
  const double once = sample_seconds(k, 1);
  if (once >= options_.min_sample_seconds) return 1;
  return std::min<int64_t>(100000, static_cast<int64_t>(std::ceil(options_.min_sample_seconds / std::max(once, 1e-9))));
}

CandidateResult KernelEvaluator::check_candidate(const ConvSchedule& s, std::shared_ptr<Kernel>* kernel_out) {
  CandidateResult r;
  auto kernel = kernel_for(s, &r.error);
  if (!kernel) {
    r.status = "failed";
    r.error = "did not build: " + r.error;
    built_.erase(describe(s));
    return r;
  }
  omp_set_num_threads(options_.threads);
  expected_scratch_ = output_tensors(d_, pass_);
  try {
    kernel->run(d_, in_, expected_scratch_);
  } catch (const std::exception& e) {
    r.status = "failed";
    r.error = std::string("did not run: ") + e.what();
    built_.erase(describe(s));
    return r;
  }
  r.workspace_bytes = kernel->workspace();
  if (const std::string diff = first_difference(expected_scratch_, expected_, activation_is_exact(d_)); !diff.empty()) {
    r.status = "wrong";
    r.error = diff;
  } else if (r.workspace_bytes > workspace_limit_) {
    r.status = "refused";
    r.error = fmt::format("workspace {} KiB over the layer's {} KiB", r.workspace_bytes / 1024, workspace_limit_ / 1024);
  }
  // Kernels of correct candidates are kept for the final re-timing (the finalists are
  // among them); the others are freed at once.
  if (r.status != "ok") built_.erase(describe(s));
  else *kernel_out = kernel;
  return r;
}

CandidateResult KernelEvaluator::check(const ConvSchedule& s) {
  std::shared_ptr<Kernel> kernel;
  return check_candidate(s, &kernel);
}

CandidateResult KernelEvaluator::evaluate(const ConvSchedule& s, double best_so_far) {
  std::shared_ptr<Kernel> kernel;
  CandidateResult r = check_candidate(s, &kernel);
  if (r.status != "ok") return r;
  // Timing method 3: the default beside every candidate, its times scaled to the phase
  // the layer's tuning started in (relative_to_reference).
  Kernel& def = *default_kernel_;
  if (reference_seconds_ == 0) {
    default_reps_ = calibrate(def);
    reference_seconds_ =
        time_until_stable([&] { return sample_seconds(def, default_reps_); }, options_.rule, 0).min_seconds;
  }
  const double before = sample_seconds(def, default_reps_);
  const int64_t reps = calibrate(*kernel);
  // The early stop compares raw samples: the best so far in this phase's units.
  const double raw_best = best_so_far > 0 ? best_so_far * before / reference_seconds_ : 0;
  const TimingStats raw =
      time_until_stable([&] { return sample_seconds(*kernel, reps); }, options_.rule, raw_best);
  const double after = sample_seconds(def, default_reps_);
  r.stats = relative_to_reference(raw, reference_seconds_, std::min(before, after));
  return r;
}

std::vector<TimingStats> KernelEvaluator::retime_interleaved(const std::vector<ConvSchedule>& schedules, int rounds) {
  omp_set_num_threads(options_.threads);
  std::vector<std::shared_ptr<Kernel>> kernels;
  std::vector<int64_t> reps;
  std::vector<std::string> seen;
  for (const ConvSchedule& s : schedules) {
    std::string error;
    // A schedule listed again is loaded again as a private copy (the kernel cache would
    // hand back the first): the same code at other addresses, whose difference in time
    // is the noise of code placement.
    const bool again = std::find(seen.begin(), seen.end(), describe(s)) != seen.end();
    seen.push_back(describe(s));
    auto k = again ? build(s, KernelSource::PrivateCopy) : kernel_for(s, &error);
    if (!k) throw Error(ExitCode::Internal, "tune: a finalist no longer builds: " + error);
    kernels.push_back(k);
  }
  expected_scratch_ = output_tensors(d_, pass_);
  for (auto& k : kernels) reps.push_back(calibrate(*k));
  // Forward in even rounds, backward in odd ones (as convgen-bench orders its peers): the
  // state a kernel leaves moves the next one, so no kernel always follows the same one.
  std::vector<std::vector<double>> samples(schedules.size());
  const size_t n = kernels.size();
  for (int round = 0; round < rounds; ++round)
    for (size_t step = 0; step < n; ++step) {
      const size_t i = round % 2 == 0 ? step : n - 1 - step;
      sample_seconds(*kernels[i], reps[i]);  // untimed: each sample starts warm, as convgen-bench's do
      samples[i].push_back(sample_seconds(*kernels[i], reps[i]));
    }
  std::vector<TimingStats> out;
  for (auto& s : samples) out.push_back(summarise(s));
  return out;
}

}  // namespace convgen
