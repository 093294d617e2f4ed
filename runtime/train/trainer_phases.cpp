// Phases between barriers and their scheduling over threads (docs/training.md).
#include "runtime/train/trainer_impl.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <tuple>

#include <fmt/format.h>
#include <omp.h>

#include "runtime/ops/ops.h"
#include "runtime/ops/tensor.h"
#include "runtime/train/train_conv.h"
#include "runtime/train/train_ops.h"
#include "schedules/errors.h"

namespace convgen::model {

auto Trainer::Impl::make_phases(const Graph& g, bool train) const -> std::vector<Phase> {
  std::vector<Phase> phases(1);
  auto barrier = [&](Action a, size_t node) {
    phases.back().combine = a;
    phases.back().combine_node = node;
    phases.emplace_back();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (train && g.nodes[i].op == Op::BatchNormalization) {
      phases.back().steps.push_back({Action::BnSums, i});
      barrier(Action::BnSums, i);
    }
    if (deferred_node[i]) {
      barrier(Action::GemmForward, i);  // the whole mini-batch at once, at the barrier
      continue;
    }
    auto layer = conv_layers.find(i);
    if (layer != conv_layers.end() && layer->second.batched) {
      barrier(Action::ConvForward, i);
      continue;
    }
    phases.back().steps.push_back({Action::Forward, i});
  }
  phases.back().steps.push_back({Action::Loss, 0});
  if (!train) return phases;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    if (g.nodes[i].op == Op::BatchNormalization) {
      phases.back().steps.push_back({Action::BnBackwardSums, i});
      barrier(Action::BnBackwardSums, i);
    }
    if (deferred_node[i]) {
      barrier(Action::GemmBackward, i);
      continue;
    }
    auto layer = conv_layers.find(i);
    if (layer != conv_layers.end() && layer->second.batched) {
      // Its weight gradient from the queue of the phase after the barrier, like any
      // whole-batch layer's: dY is complete once the barrier is reached.
      phases.back().weight_gradients_ready.push_back(i);
      barrier(Action::ConvBackward, i);
      continue;
    }
    phases.back().steps.push_back({Action::Backward, i});
    if (layer != conv_layers.end() && layer->second.mode == ParallelMode::WholeBatch)
      phases.back().weight_gradients_ready.push_back(i);
  }
  for (Phase& p : phases)  // longest first: the queue's last items are the short ones
    std::stable_sort(p.weight_gradients_ready.begin(), p.weight_gradients_ready.end(), [&](size_t a, size_t b) {
      return conv_layers.at(a).weight_gradient_flops > conv_layers.at(b).weight_gradient_flops;
    });
  return phases;
}

void Trainer::Impl::run_steps(Slot& slot, const Phase& phase, bool train, double scale) {
  if (options.profile) slot.seconds.resize(3 * tg.graph.nodes.size() + 3, 0.0);
  for (const Step& st : phase.steps) {
    const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
    run_step(slot, st, train, scale);
    // Gradient exchanges in flight advance only inside MPI calls, made by the thread that
    // called run_batch: it looks in after each step (MPI_Test, microseconds).
    if (polling && omp_get_thread_num() == 0) poll_buckets();
    if (!options.profile) continue;
    const int pass = st.action == Action::Forward || st.action == Action::Loss ? 0 : st.action == Action::Backward ? 1 : 2;
    const size_t node = st.action == Action::Loss ? tg.graph.nodes.size() : st.node;
    slot.seconds[3 * node + pass] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
}

void Trainer::Impl::run_step(Slot& slot, const Step& st, bool train, double scale) {
  {
    switch (st.action) {
      case Action::Forward: forward(slot, st.node, train); break;
      case Action::Backward: backward(slot, st.node); break;
      case Action::BnSums: case Action::BnBackwardSums:
        bn_partial_sums(slot, st.node, st.action);
        break;
      case Action::Loss:
        if (!train) {
          slot.counts.per_class.assign(static_cast<size_t>(3 * tg.classes), 0);  // IoU counts too
          slot.loss = ops::softmax_cross_entropy_loss(view(slot, logits), slot.labels, options.ignore_label, &slot.counts);
          break;
        }
        slot.counts.per_class.clear();
        slot.loss = ops::softmax_cross_entropy(view(slot, logits), slot.labels, options.ignore_label, scale,
                                               slot.grad[logits].data(), &slot.counts);
        slot.grad_written[logits] = 1;
        break;
      case Action::GemmForward: case Action::GemmBackward: case Action::ConvForward: case Action::ConvBackward:
        break;  // phase combines, never per-micro-batch steps
    }
  }
}

void Trainer::Impl::begin_micro_batch(Slot& slot, int64_t n) {
  prepare_slot(slot, n);
  load_input(slot, slot.pixels);
  std::fill(slot.grad_written.begin(), slot.grad_written.end(), 0);
  std::fill(slot.param_written.begin(), slot.param_written.end(), 0);
}

StepStats Trainer::Impl::run_batch(const float* pixels, const int32_t* labels, int64_t count, bool train) {
  if (count < 1 || count > options.batch)
    throw Error(ExitCode::Internal, fmt::format("trainer: a batch of {} samples (batch size {})", count, options.batch));
  const int64_t micro = (count + m - 1) / m, last = count - (micro - 1) * m;
  ensure_batch_kernels(count);
  // Profiled from here: building kernels (the first step of each size) is not the step.
  timing_step = options.profile && train;
  comm_spans.clear();  // a step that failed part-way may have left some
  const auto step_start = timing_step ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  allocate_batch_buffers();
  refresh_cropped_weights();
  prepare_packed_weights(train);
  if (static_cast<int64_t>(slots.size()) < micro) slots.resize(static_cast<size_t>(micro));
  const int64_t sample_floats = values[input].sample_elements;
  for (int64_t i = 0; i < micro; ++i) {
    slots[i].first_sample = i * m;
    slots[i].pixels = pixels + i * m * sample_floats;
    slots[i].labels = labels + i * m * tg.label_elements;
  }
  active = micro;
  batch_count = count;
  own_begin = 0, own_end = micro;
  if (distributed()) std::tie(own_begin, own_end) = micro_batches_of_rank(micro, group->rank());
  // The mean is over the labelled positions of the whole mini-batch, so every
  // micro-batch's gradient is scaled by the same count (none labelled: no gradient).
  // Across ranks, each counts its own samples' and the counts are added.
  int64_t labelled = 0;
  const auto [own_first, own_last] = distributed() ? samples_of_rank(count, group->rank()) : std::pair<int64_t, int64_t>(0, count);
  for (int64_t i = own_first * tg.label_elements, n = own_last * tg.label_elements; i < n; ++i) {
    if (labels[i] == options.ignore_label) continue;
    if (labels[i] < 0 || labels[i] >= tg.classes)
      throw Error(ExitCode::BadData, fmt::format("trainer: label {} at position {} of the batch is outside [0, {}) and "
                                                 "is not the ignored label",
                                                 labels[i], i, tg.classes));
    ++labelled;
  }
  if (distributed()) exchange(int64_t(sizeof(labelled)) * (group->size() - 1), [&] { group->sum(&labelled, 1); });
  const double scale = labelled > 0 ? 1.0 / double(labelled) : 0.0;
  const std::vector<Phase>& phases = train ? train_phases : eval_phases;
  auto run = [&](size_t phase, int64_t i) {
    Slot& slot = slots[i];
    if (phase == 0) begin_micro_batch(slot, i + 1 == micro ? last : m);
    run_steps(slot, phases[phase], train, scale);
  };
  std::exception_ptr failure;
  std::mutex failure_mutex;
  std::atomic<bool> failed{false};
  auto guarded = [&](auto&& f) {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      failed = true;
    }
  };
  // A phase's combine, between phases and outside any parallel region: batched GEMMs
  // open their own teams (or run intra-kernel parallel kernels), BatchNormalization's
  // statistics are combined on this thread.
  auto combine_phase = [&](const Phase& p) {
    if (p.combine == Action::GemmForward || p.combine == Action::GemmBackward) {
      const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      batched_gemm(p.combine, p.combine_node, guarded);
      if (options.profile)
        gemm_seconds[3 * p.combine_node + (p.combine == Action::GemmForward ? 0 : 1)] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * options.threads;
    } else if (p.combine == Action::ConvForward || p.combine == Action::ConvBackward) {
      const auto start = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      batched_conv(p.combine, p.combine_node, guarded);
      if (options.profile)
        gemm_seconds[3 * p.combine_node + (p.combine == Action::ConvForward ? 0 : 1)] +=
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * options.threads;
    } else if (p.combine != Action::Forward) {
      if (distributed()) share_bn_partials(p.combine_node);
      guarded([&] { combine(p.combine, p.combine_node); });
    }
  };
  using Clock = std::chrono::steady_clock;
  const bool profile = options.profile;
  auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  std::vector<double> busy(profile ? static_cast<size_t>(options.threads) : 0);
  // Work whose inputs an ended phase completed, taken from queues by the threads done with
  // their micro-batches of the next phase: whole-batch weight gradients (one layer per
  // thread), then reductions and updates of parameters no later phase touches.
  std::vector<size_t> ready;
  const std::vector<UpdateChunk> no_updates;
  const std::vector<UpdateChunk>* updates = &no_updates;
  std::atomic<size_t> next_ready{0}, next_update{0};
  omp_set_num_threads(options.threads);  // the kernels' own parallel loops
  for (size_t ph = 0; ph < phases.size() && !failed; ++ph) {
    const Clock::time_point phase_start = profile ? Clock::now() : Clock::time_point{};
    if (train) pack_panels(static_cast<int64_t>(ph), true);
    if (intra) {
      for (int64_t i = own_begin; i < own_end && !failed; ++i) guarded([&] { run(ph, i); });
    } else {
      std::fill(busy.begin(), busy.end(), 0.0);
      next_ready = 0;
      next_update = 0;
      // Micro-batch i on thread i mod T in every phase: the same mapping in every phase.
#pragma omp parallel num_threads(options.threads)
      {
        const int thread = omp_get_thread_num(), team = omp_get_num_threads();
        const Clock::time_point start = profile ? Clock::now() : Clock::time_point{};
        for (int64_t i = own_begin + thread; i < own_end; i += team) guarded([&] { run(ph, i); });
        drain_whole_batch_gradients(ready, next_ready, count, guarded);
        drain_updates(*updates, next_update);
        if (profile) busy[static_cast<size_t>(thread)] += since(start);
      }
      // Across ranks the whole-batch gradients need every rank's activations, and the
      // updates every rank's gradients: both wait for the end (docs/distributed.md).
      if (train && !distributed()) {
        ready = phases[ph].weight_gradients_ready;
        updates = &updates_after[ph];
      }
    }
    if (profile) {
      const double wall = since(phase_start);
      step_seconds[kPhases] += wall;
      if (!intra)
        for (size_t t = 0; t < busy.size(); ++t) {
          step_seconds[kWaiting] += wall - busy[t];
          if (thread_busy.size() < busy.size()) thread_busy.resize(busy.size());
          thread_busy[t] += busy[t];
        }
    }
    // Across ranks, the gradients this phase completed start on their way to their
    // owners, to travel while the next phases run (docs/distributed.md, "Overlap").
    if (train && distributed() && !failed && !bucket_params[ph].empty()) guarded([&] { start_bucket(bucket_params[ph]); });
    const Clock::time_point combine_start = profile ? Clock::now() : Clock::time_point{};
    if (!failed) combine_phase(phases[ph]);
    if (profile) step_seconds[kCombines] += since(combine_start);
  }
  // What is left after the last phase: its whole-batch layers, then (after a barrier: some
  // are theirs) the remaining updates. With intra-kernel parallelism everything is left:
  // each layer's kernel on all threads, one after another, then every update.
  const Clock::time_point tail_start = profile ? Clock::now() : Clock::time_point{};
  if (train && !failed) {
    next_ready = 0;
    next_update = 0;
    std::atomic<size_t> next_final{0};
    const std::vector<UpdateChunk>& final_updates = updates_after.back();
    if (distributed()) {
      // Every whole-batch gradient over the whole mini-batch on every rank (the same
      // kernel on the same data: the same bits), then the micro-batch gradients finished
      // across ranks, then every update on every rank.
      std::vector<size_t> all;
      for (const Phase& p : phases) all.insert(all.end(), p.weight_gradients_ready.begin(), p.weight_gradients_ready.end());
      share_whole_batch_inputs(all);
      drain_whole_batch_gradients(all, next_ready, count, guarded);
      if (!failed) guarded([&] { reduce_gradients_across_ranks(); });
      std::vector<UpdateChunk> every;
      for (const std::vector<UpdateChunk>& chunks : updates_after) every.insert(every.end(), chunks.begin(), chunks.end());
      if (!failed) {
#pragma omp parallel num_threads(options.threads)
        drain_updates(every, next_update);
      }
    } else if (intra) {
      std::vector<size_t> all;
      for (const Phase& p : phases) all.insert(all.end(), p.weight_gradients_ready.begin(), p.weight_gradients_ready.end());
      drain_whole_batch_gradients(all, next_ready, count, guarded);
      std::vector<UpdateChunk> every;
      for (const std::vector<UpdateChunk>& chunks : updates_after) every.insert(every.end(), chunks.begin(), chunks.end());
#pragma omp parallel num_threads(options.threads)
      drain_updates(every, next_update);
    } else {
#pragma omp parallel num_threads(options.threads)
      {
        drain_whole_batch_gradients(ready, next_ready, count, guarded);
        drain_updates(*updates, next_update);
#pragma omp barrier
        drain_updates(final_updates, next_final);
      }
    }
    ++steps;
  }
  if (profile) step_seconds[kTail] += since(tail_start);
  if (failure) std::rethrow_exception(failure);

  // The loss and the correct count: a pairwise tree over the micro-batch index.
  std::vector<double> losses(static_cast<size_t>(micro));
  StepStats stats;
  if (!train) stats.per_class.assign(static_cast<size_t>(3 * tg.classes), 0);
  for (int64_t i = own_begin; i < own_end; ++i) {
    losses[i] = slots[i].loss;
    stats.correct += slots[i].counts.correct;
    for (size_t c = 0; c < stats.per_class.size(); ++c) stats.per_class[c] += slots[i].counts.per_class[c];
  }
  if (distributed()) share_step_stats(losses, stats);
  for (int64_t stride = 1; stride < micro; stride *= 2)
    for (int64_t i = 0; i + stride < micro; i += 2 * stride) losses[i] += losses[i + stride];
  stats.loss = labelled > 0 ? losses[0] / double(labelled) : 0.0;
  if (timing_step) {
    step_seconds[kStep] += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    count_communication();
  }
  timing_step = false;
  stats.labelled = labelled;
  stats.count = count;
  if (train) {
    for (const Parameter& p : parameters)
      if (!std::all_of(p.value.begin(), p.value.end(), [](float v) { return std::isfinite(v); })) {
        stats.non_finite = p.name;
        break;
      }
  }
  return stats;
}

}  // namespace convgen::model
