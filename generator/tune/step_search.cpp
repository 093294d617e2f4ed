#include "generator/tune/step_search.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "generator/train/trainer_from_model.h"
#include "generator/train/training_record.h"
#include "runtime/train/trainer.h"
#include "schedules/errors.h"
#include "schedules/tune/timing_rule.h"

namespace convgen {
namespace {

using model::ParallelMode;
using model::Trainer;

constexpr double kDefaultThreshold = 64.0;  // TrainerOptions::whole_batch_below_flops_per_byte
// Micro-batch sizes with more micro-batches than this (and than 4 per timing thread) are
// not tried: on ResNet-18 at batch 64 (2 threads) 32 and 64 micro-batches ran 3-4x
// slower than 4, and each new size compiles every kernel again.
constexpr int64_t kMostMicroBatches = 16;
// Two sums of the same terms in other orders: their losses agree far closer than this.
constexpr double kLossTolerance = 1e-4;

std::string threshold_text(double t) { return std::isinf(t) ? std::string("inf") : fmt::format("{:g}", t); }

// Synthetic samples: the timing does not depend on the values, only on their being finite.
struct StepData {
  std::vector<float> pixels;
  std::vector<int32_t> labels;
};

StepData make_data(const model::TrainGraph& tg, int64_t batch, uint64_t seed) {
  int64_t per_sample = 1;
  for (int64_t e : tg.sample_shape) per_sample *= e;
  StepData d;
  d.pixels.resize(static_cast<size_t>(batch * per_sample));
  d.labels.resize(static_cast<size_t>(batch));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  for (float& p : d.pixels) p = static_cast<float>(next() % 2001) / 1000.0f - 1.0f;
  const uint64_t classes = static_cast<uint64_t>(std::max<int64_t>(1, tg.classes));
  for (int32_t& l : d.labels) l = static_cast<int32_t>(next() % classes);
  return d;
}

std::map<std::string, std::string> mode_names(const Trainer& tr) {
  std::map<std::string, std::string> out;
  for (const auto& [node, mode] : tr.parallel_mode_of_layer()) out[node] = model::parallel_mode_name(mode);
  return out;
}

int whole_batch_count(const std::map<std::string, std::string>& modes) {
  int n = 0;
  for (const auto& [node, mode] : modes) n += mode == "whole-batch";
  return n;
}

// Micro-batch sizes to try: divisors of the batch giving at most kMostMicroBatches
// micro-batches (or 4 per thread), nearest (in ratio) to the default first.
std::vector<int64_t> micro_batch_candidates(int64_t batch, int64_t def, int threads) {
  const int64_t most = std::max<int64_t>(kMostMicroBatches, 4 * int64_t{threads});
  std::vector<int64_t> out;
  for (int64_t m = 1; m <= batch; ++m)
    if (batch % m == 0 && batch / m <= most && m != def) out.push_back(m);
  std::stable_sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
    return std::abs(std::log(double(a) / def)) < std::abs(std::log(double(b) / def));
  });
  return out;
}

class StepSearch {
 public:
  StepSearch(const StepSearchRequest& rq, const TargetInfo& t, TuneJournal& journal,
             const std::function<void(const std::string&)>& say)
      : rq_(rq), t_(t), journal_(journal), say_(say) {
    model::TrainerOptions o = options(0, kDefaultThreshold);
    key_ = model::training_key(rq.model, o, t);
  }

  StepSearchOutcome run() {
    StepSearchOutcome out;
    const double start = monotonic_seconds();
    if (const TrainingRecord* r = find_training_record(journal_.training_records(), key_);
        r && (rq_.micro_batch == 0 || r->micro_batch == rq_.micro_batch)) {
      out.skipped = true;
      out.chosen = *r;
      out.default_gflops = r->tuning.default_gflops;
      out.tuned_gflops = r->gflops;
      say_(fmt::format("training step: already tuned (micro-batch {}, {} whole-batch layer(s))", r->micro_batch,
                       whole_batch_count(r->parallel_modes)));
      return out;
    }

    // Trial 0: the trainer as it is without a record.
    const int64_t m0 = model::checked_micro_batch(options(rq_.micro_batch, kDefaultThreshold));
    evaluate(m0, kDefaultThreshold);
    if (trials_.front().status != "ok")
      throw Error(ExitCode::Internal, fmt::format("tune --train: the default trainer of {} failed: {}", rq_.model,
                                                  trials_.front().error));
    auto in_budget = [&] { return monotonic_seconds() - start < rq_.seconds; };
    if (rq_.micro_batch == 0)
      for (int64_t m : micro_batch_candidates(rq_.batch, m0, rq_.threads)) {
        if (!in_budget()) break;
        evaluate(m, kDefaultThreshold);
      }
    const int64_t best_m = trials_[fastest()].micro_batch;
    for (double threshold : {0.0, 16.0, 256.0, std::numeric_limits<double>::infinity()}) {
      if (!in_budget()) break;
      evaluate(best_m, threshold);
    }

    // The finalists against the default, interleaved.
    std::vector<size_t> order;
    for (size_t i = 1; i < trials_.size(); ++i)
      if (trials_[i].status == "ok") order.push_back(i);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return trials_[a].stats.median_seconds < trials_[b].stats.median_seconds; });
    if (order.size() > static_cast<size_t>(rq_.finalists)) order.resize(static_cast<size_t>(rq_.finalists));
    std::vector<size_t> contest = {0};
    contest.insert(contest.end(), order.begin(), order.end());
    const std::vector<TimingStats> retimed = retime(contest);
    size_t winner = 0;
    for (size_t k = 1; k < contest.size(); ++k)
      if (retimed[k].median_seconds < retimed[winner].median_seconds) winner = k;
    for (size_t k = 0; k < contest.size(); ++k)
      say_(fmt::format("training step: re-timed trial {}: {:.2f} ms per step (min {:.2f}, spread {:.1f}%)", contest[k],
                       retimed[k].median_seconds * 1e3, retimed[k].min_seconds * 1e3, 100 * retimed[k].spread));
    out.accepted = winner != 0 && beats_beyond_noise(retimed[winner], retimed[0]);
    const bool within_noise = winner != 0 && !out.accepted;
    if (!out.accepted) winner = 0;
    const StepTrial& w = trials_[contest[winner]];
    out.default_gflops = flops_ / retimed[0].median_seconds * 1e-9;
    out.tuned_gflops = flops_ / retimed[winner].median_seconds * 1e-9;
    say_(fmt::format("training step: {} (micro-batch {}, threshold {} flop/byte, {} whole-batch layer(s)): {:.1f} "
                     "GF/s against the default's {:.1f}{}",
                     out.accepted ? "chose" : "kept the default", w.micro_batch, threshold_text(w.threshold),
                     w.whole_batch_layers, out.tuned_gflops, out.default_gflops,
                     within_noise ? " (the fastest was not faster beyond the noise)" : ""));

    TrainingRecord r;
    r.key = key_;
    r.micro_batch = w.micro_batch;
    r.parallel_modes = w.modes;
    r.gflops = out.tuned_gflops;
    r.note =
        fmt::format("micro-batch {}, cost-model threshold {} flop/byte", w.micro_batch, threshold_text(w.threshold));
    r.kind = RecordKind::Schedule;
    r.tuning = tuning(-1, "ok", retimed[winner], w.micro_batch);
    r.tuning.trials = static_cast<int>(trials_.size());
    r.tuning.default_gflops = out.default_gflops;
    journal_.append(r);
    out.chosen = r;
    out.trials = trials_;
    out.seconds = monotonic_seconds() - start;
    return out;
  }

 private:
  model::TrainerOptions options(int64_t m, double threshold) const {
    model::TrainerOptions o;
    o.batch = rq_.batch;
    o.micro_batch = m;
    o.threads = rq_.threads;
    o.lr = 0.0f;  // the weights stay as loaded: every step does the same work, and never diverges
    o.records = rq_.records;
    o.whole_batch_below_flops_per_byte = threshold;
    return o;
  }

  TuningInfo tuning(int trial, const std::string& status, const TimingStats& stats, int64_t m) const {
    TuningInfo ti;
    ti.present = true;
    ti.trial = trial;
    ti.status = status;
    ti.seed = rq_.seed;
    ti.search = "guided";
    ti.stats = stats;
    ti.provenance = rq_.provenance;
    ti.provenance.micro_batch = m;
    ti.provenance.variant = "none";
    return ti;
  }

  size_t fastest() const {
    size_t best = 0;
    for (size_t i = 0; i < trials_.size(); ++i)
      if (trials_[i].status == "ok" && trials_[i].stats.median_seconds < trials_[best].stats.median_seconds) best = i;
    return best;
  }

  double step_seconds(Trainer& tr) {
    const double t0 = monotonic_seconds();
    tr.train_step(data_.pixels.data(), data_.labels.data(), rq_.batch);
    return monotonic_seconds() - t0;
  }

  // A trainer built and compiled, its first step run (warm-up and loss check).
  std::unique_ptr<Trainer> build(int64_t m, double threshold, double* first_loss) {
    auto tr = model::make_trainer_as_given(rq_.model, options(m, threshold), t_);
    tr->prepare(rq_.batch);
    if (data_.labels.empty()) {
      data_ = make_data(tr->graph(), rq_.batch, rq_.seed);
      flops_ = tr->step_flops(rq_.batch);
    }
    *first_loss = tr->train_step(data_.pixels.data(), data_.labels.data(), rq_.batch).loss;
    return tr;
  }

  void evaluate(int64_t m, double threshold) {
    StepTrial trial;
    trial.micro_batch = m;
    trial.threshold = threshold;
    const size_t index = trials_.size();
    std::unique_ptr<Trainer> tr;
    try {
      // Building the engine is cheap; compiling its kernels (prepare) is not, so the
      // modes are known before anything is compiled or timed.
      auto probe = model::make_trainer_as_given(rq_.model, options(m, threshold), t_);
      trial.modes = mode_names(*probe);
      trial.whole_batch_layers = whole_batch_count(trial.modes);
      for (size_t i = 0; i < trials_.size(); ++i)
        if (trials_[i].micro_batch == m && trials_[i].modes == trial.modes) {
          say_(fmt::format("training step: micro-batch {}, threshold {}: the same modes as trial {}, not timed", m,
                           threshold_text(threshold), i));
          return;
        }
      if (const TrainingRecord* done = journal_.find_training_trial(key_, m, trial.modes, rq_.provenance)) {
        trial.status = done->tuning.status;
        trial.stats = done->tuning.stats;
        trial.replayed = true;
      } else {
        double loss = 0;
        tr = build(m, threshold, &loss);
        if (index == 0) {
          default_loss_ = loss;
        } else if (!(std::abs(loss - default_loss_) <= kLossTolerance * std::max(1.0, std::abs(default_loss_)))) {
          trial.status = "wrong";
          trial.error = fmt::format("first-step loss {:.9g}, the default's {:.9g}", loss, default_loss_);
        }
        if (trial.status == "ok") {
          const double best = trials_.empty() ? 0.0 : trials_[fastest()].stats.min_seconds;
          TimingRule rule;
          rule.max_samples = 10;
          trial.stats = time_until_stable([&] { return step_seconds(*tr); }, rule, best);
        }
      }
    } catch (const Error& e) {
      trial.status = "failed";
      trial.error = e.what();
    }
    if (flops_ == 0 && trial.status == "ok") {
      // A replayed trial 0: the data and the flop count still come from a built trainer.
      double loss = 0;
      tr = build(m, threshold, &loss);
      if (index == 0) default_loss_ = loss;
    }
    const double gflops = trial.status == "ok" && trial.stats.median_seconds > 0
                              ? flops_ / trial.stats.median_seconds * 1e-9
                              : 0.0;
    say_(fmt::format("training step: trial {}{}: micro-batch {}, threshold {} flop/byte, {} whole-batch layer(s): {}",
                     index, trial.replayed ? " (from the journal)" : "", m, threshold_text(threshold),
                     trial.whole_batch_layers,
                     trial.status == "ok" ? fmt::format("{:.1f} GF/s, {:.2f} ms per step (spread {:.1f}%)", gflops,
                                                        trial.stats.median_seconds * 1e3, 100 * trial.stats.spread)
                                          : trial.status + ": " + trial.error));
    if (!trial.replayed) {
      TrainingRecord line;
      line.key = key_;
      line.kind = RecordKind::Trial;
      line.micro_batch = m;
      line.parallel_modes = trial.modes;
      line.gflops = gflops;
      line.note = trial.error;
      line.tuning = tuning(static_cast<int>(index), trial.status, trial.stats, m);
      journal_.append(line);
    }
    trials_.push_back(trial);
    // Engines kept for the re-timing: the default's and the fastest few.
    if (tr) kept_[index] = std::move(tr);
    std::vector<size_t> ranked;
    for (const auto& [i, engine] : kept_)
      if (i != 0) ranked.push_back(i);
    std::sort(ranked.begin(), ranked.end(),
              [&](size_t a, size_t b) { return trials_[a].stats.median_seconds < trials_[b].stats.median_seconds; });
    for (size_t k = static_cast<size_t>(rq_.finalists); k < ranked.size(); ++k) kept_.erase(ranked[k]);
  }

  // Rounds visiting each engine in turn: one untimed step (so the engine starts from its
  // own warm caches, as consecutive steps of a run do), then the faster of two timed
  // steps (one step alone spread 9-11% on SqueezeNet, 2 threads, Zen 4).
  std::vector<TimingStats> retime(const std::vector<size_t>& contest) {
    for (size_t i : contest)
      if (!kept_.count(i)) {
        double loss = 0;
        kept_[i] = build(trials_[i].micro_batch, trials_[i].threshold, &loss);
      }
    std::vector<std::vector<double>> samples(contest.size());
    for (int round = 0; round < rq_.retime_rounds; ++round)
      for (size_t k = 0; k < contest.size(); ++k) {
        Trainer& tr = *kept_.at(contest[k]);
        step_seconds(tr);
        const double first = step_seconds(tr);
        samples[k].push_back(std::min(first, step_seconds(tr)));
      }
    std::vector<TimingStats> out;
    for (auto& s : samples) out.push_back(summarise(s));
    return out;
  }

  const StepSearchRequest& rq_;
  const TargetInfo& t_;
  TuneJournal& journal_;
  std::function<void(const std::string&)> say_;
  TrainingKey key_;
  StepData data_;
  double flops_ = 0, default_loss_ = 0;
  std::vector<StepTrial> trials_;
  std::map<size_t, std::unique_ptr<Trainer>> kept_;
};

}  // namespace

StepSearchOutcome search_training_step(const StepSearchRequest& request, const TargetInfo& t, TuneJournal& journal,
                                       const std::function<void(const std::string&)>& say) {
  StepSearch search(request, t, journal, say);
  return search.run();
}

}  // namespace convgen
