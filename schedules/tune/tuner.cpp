#include "schedules/tune/tuner.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "schedules/conv_descriptor.h"
#include "schedules/errors.h"
#include "schedules/tune/timing_rule.h"

namespace convgen {
namespace {

double gflops_of(double flops, double seconds) { return seconds > 0 ? flops / seconds * 1e-9 : 0; }

ScheduleRecord trial_line(const TuneKeyRequest& rq, const ConvSchedule& s, int index, const CandidateResult& r,
                          double flops) {
  ScheduleRecord line;
  line.kind = RecordKind::Trial;
  line.key = rq.key;
  line.schedule = s;
  line.source = "tuned";
  line.gflops = r.status == "ok" ? gflops_of(flops, r.stats.min_seconds) : 0;
  line.note = r.error;
  line.tuning.present = true;
  line.tuning.trial = index;
  line.tuning.status = r.status;
  line.tuning.seed = rq.search.seed;
  line.tuning.search = rq.search.method;
  line.tuning.workspace_bytes = r.workspace_bytes;
  line.tuning.stats = r.stats;
  line.tuning.provenance = rq.provenance;
  return line;
}

// True when an earlier run finished this key with the same search and timing settings.
bool finished_before(const ScheduleRecord* tuned, const TuneKeyRequest& rq, size_t space_size) {
  if (!tuned) return false;
  const TuningInfo& t = tuned->tuning;
  const Provenance& p = t.provenance;
  const bool same = t.seed == rq.search.seed && t.search == rq.search.method && p.cpu == rq.provenance.cpu &&
                    p.threads == rq.provenance.threads && p.variant == rq.provenance.variant &&
                    p.micro_batch == rq.provenance.micro_batch && p.timing_method == rq.provenance.timing_method;
  return same && (t.trials >= rq.max_trials || static_cast<size_t>(t.trials) >= space_size);
}

}  // namespace

Contest retime_against_default(const ConvSchedule& def, const std::vector<ConvSchedule>& others,
                               CandidateEvaluator& evaluator, int rounds) {
  std::vector<ConvSchedule> contest = {def, def};
  contest.insert(contest.end(), others.begin(), others.end());
  const std::vector<TimingStats> retimed = evaluator.retime_interleaved(contest, rounds);
  Contest out;
  out.reference = retimed[0].median_seconds <= retimed[1].median_seconds ? retimed[0] : retimed[1];
  const double placement = std::fabs(retimed[0].median_seconds - retimed[1].median_seconds) /
                           std::max(out.reference.median_seconds, 1e-12);
  out.reference.spread = std::max({retimed[0].spread, retimed[1].spread, placement});
  out.others.assign(retimed.begin() + 2, retimed.end());
  return out;
}

Comparison compare_with_default(const TuningSpace& space, const ConvSchedule& def,
                                const std::vector<ConvSchedule>& schedules, CandidateEvaluator& evaluator, int rounds) {
  Comparison out;
  std::vector<ConvSchedule> correct;
  for (const ConvSchedule& raw : schedules) {
    ComparedSchedule c;
    c.schedule = space.normalise(raw);
    c.check = evaluator.check(c.schedule);
    if (c.check.status == "ok") correct.push_back(c.schedule);
    out.schedules.push_back(c);
  }
  const Contest timed = retime_against_default(space.normalise(def), correct, evaluator, rounds);
  out.default_stats = timed.reference;
  size_t next = 0;
  for (ComparedSchedule& c : out.schedules)
    if (c.check.status == "ok") c.retimed = timed.others[next++];
  return out;
}

TuneKeyOutcome tune_key(const TuneKeyRequest& rq, const TuningSpace& space, CandidateEvaluator& evaluator,
                        TuneJournal& journal, const std::function<void(const TuneProgress&)>& progress) {
  TuneKeyOutcome out;
  const double start = monotonic_seconds();
  const double flops = evaluator.flops();
  const ConvSchedule def = space.normalise(rq.default_schedule);

  if (const ScheduleRecord* tuned = journal.find_tuned(rq.key); finished_before(tuned, rq, space.all().size())) {
    out.chosen = *tuned;
    out.skipped = true;
    out.accepted = tuned->schedule != def;
    out.trials = tuned->tuning.trials;
    out.default_gflops = tuned->tuning.default_gflops;
    out.tuned_gflops = tuned->gflops;
    return out;
  }

  // The layer's earlier winner is the first transfer seed, then similar layers'.
  SearchOptions seeded = rq.search;
  if (rq.previous_winner) seeded.transfer.insert(seeded.transfer.begin(), *rq.previous_winner);
  Search search(space, def, seeded);
  out.transferred = seeded.method == "guided" ? static_cast<int>(seeded.transfer.size()) : 0;
  struct Done {
    ConvSchedule schedule;
    CandidateResult result;
    int trial;
  };
  std::vector<Done> done;
  double best = 0, default_seconds = 0;
  bool out_of_time = false;
  while (out.trials < rq.max_trials && !out_of_time) {
    // A batch of proposals (one unless --jobs asks for more), built together, then
    // checked and timed one at a time.
    std::vector<ConvSchedule> batch;
    const int want = std::min(std::max(1, rq.jobs), rq.max_trials - out.trials);
    for (int i = 0; i < want; ++i) {
      auto c = search.next();
      if (!c) break;
      batch.push_back(*c);
    }
    if (batch.empty()) break;  // every schedule of the space measured
    std::vector<ConvSchedule> to_build;
    for (const ConvSchedule& s : batch)
      if (!journal.find_trial(rq.key, s, rq.provenance)) to_build.push_back(s);
    if (!to_build.empty()) evaluator.prepare(to_build);
    for (const ConvSchedule& s : batch) {
      const int index = out.trials++;
      CandidateResult r;
      bool replayed = false;
      if (const ScheduleRecord* t = journal.find_trial(rq.key, s, rq.provenance)) {
        r.status = t->tuning.status;
        r.error = t->note;
        r.stats = t->tuning.stats;
        r.workspace_bytes = t->tuning.workspace_bytes;
        replayed = true;
        ++out.replayed;
      } else if (journal.begin_trial(rq.key, s) >= 2) {
        r.status = "failed";
        r.error = "the tuner died twice while checking or timing it (a crash, or killed)";
        journal.append(trial_line(rq, s, index, r, flops));
        journal.end_trial();
      } else {
        r = evaluator.evaluate(s, best);
        journal.append(trial_line(rq, s, index, r, flops));
        journal.end_trial();
      }
      if (index == 0 && r.status != "ok")
        throw Error(ExitCode::Internal, fmt::format("tune: {} {}: the analytic default did not pass its check: {}",
                                                    rq.key.descriptor, rq.key.pass, r.error));
      out.wrong += r.status == "wrong";
      out.failed += r.status == "failed";
      out.refused += r.status == "refused";
      const bool ok = r.status == "ok";
      search.report(s, ok ? r.stats.min_seconds : -1.0);
      if (ok && (best == 0 || r.stats.min_seconds < best)) {
        best = r.stats.min_seconds;
        out.best_trial = index;
      }
      if (index == 0) default_seconds = r.stats.min_seconds;
      done.push_back({s, r, index});
      out.best_so_far_gflops.push_back(gflops_of(flops, best));
      if (progress) {
        TuneProgress p;
        p.trial = index;
        p.schedule = s;
        p.replayed = replayed;
        p.status = r.status;
        p.gflops = ok ? gflops_of(flops, r.stats.min_seconds) : 0;
        p.best_gflops = gflops_of(flops, best);
        p.default_gflops = gflops_of(flops, default_seconds);
        progress(p);
      }
    }
    out_of_time = monotonic_seconds() - start >= rq.seconds;
  }

  // Finalists: the fastest candidates other than the default, re-timed interleaved
  // with it; one wins only by more than the noise both showed.
  std::vector<const Done*> ranked;
  for (const Done& d : done)
    if (d.result.status == "ok" && d.schedule != def) ranked.push_back(&d);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Done* a, const Done* b) {
    return a->result.stats.min_seconds < b->result.stats.min_seconds;
  });
  if (ranked.size() > static_cast<size_t>(rq.finalists)) ranked.resize(rq.finalists);
  // Only finalists that could win: within 10% of the default's best sample.
  ranked.erase(std::remove_if(ranked.begin(), ranked.end(),
                              [&](const Done* d) { return d->result.stats.min_seconds > 1.1 * default_seconds; }),
               ranked.end());
  std::vector<ConvSchedule> finalists;
  for (const Done* d : ranked) finalists.push_back(d->schedule);
  if (rq.previous_winner) {
    const ConvSchedule previous = space.normalise(*rq.previous_winner);
    const bool checked = std::any_of(done.begin(), done.end(), [&](const Done& d) {
      return d.schedule == previous && d.result.status == "ok";
    });
    if (checked && previous != def && std::find(finalists.begin(), finalists.end(), previous) == finalists.end())
      finalists.push_back(previous);
  }
  const Contest timed = retime_against_default(def, finalists, evaluator, rq.retime_rounds);
  const ConvSchedule* winner = &def;
  const TimingStats* winner_stats = &timed.reference;
  for (size_t i = 0; i < finalists.size(); ++i)
    if (timed.others[i].median_seconds < winner_stats->median_seconds) {
      winner = &finalists[i];
      winner_stats = &timed.others[i];
    }
  if (winner != &def && !beats_beyond_noise(*winner_stats, timed.reference)) {
    winner = &def;
    winner_stats = &timed.reference;
  }
  const bool accepted = winner != &def;

  ScheduleRecord line;
  line.key = rq.key;
  line.schedule = *winner;
  line.source = "tuned";
  line.gflops = gflops_of(flops, winner_stats->median_seconds);
  line.tuning.present = true;
  line.tuning.seed = rq.search.seed;
  line.tuning.search = rq.search.method;
  line.tuning.trials = out.trials;
  line.tuning.default_gflops = gflops_of(flops, timed.reference.median_seconds);
  line.tuning.stats = *winner_stats;
  line.tuning.provenance = rq.provenance;
  for (const Done& d : done)
    if (d.schedule == *winner) line.tuning.workspace_bytes = d.result.workspace_bytes;
  if (!accepted) {
    line.note = !finalists.empty()
                    ? fmt::format("default kept: the best candidate ({}) did not beat it beyond noise",
                                  describe(finalists[0]))
                    : "default kept: no candidate came within 10% of it";
  } else {
    line.note = fmt::format("{:.2f}x the default, median of {} interleaved rounds",
                            timed.reference.median_seconds / winner_stats->median_seconds, rq.retime_rounds);
  }
  journal.append(line);
  out.chosen = line;
  out.accepted = accepted;
  for (const ConvSchedule& seed : seeded.transfer)
    out.transfer_won |= accepted && space.normalise(seed) == *winner;
  out.default_gflops = line.tuning.default_gflops;
  out.tuned_gflops = line.gflops;
  out.seconds = monotonic_seconds() - start;
  return out;
}

namespace {
// A tuned line (not a trial) of the key's pass and target: what both kinds of seed read.
bool tuned_for_pass_and_target(const ScheduleRecord& r, const ScheduleKey& key) {
  return r.kind == RecordKind::Schedule && r.tuning.present && r.key.pass == key.pass && r.key.target == key.target;
}
}  // namespace

std::optional<ConvSchedule> previous_tuned_schedule(const std::vector<ScheduleRecord>& records,
                                                    const ScheduleKey& key) {
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    const ScheduleRecord& r = *it;
    if (!tuned_for_pass_and_target(r, key) || r.key.descriptor != key.descriptor ||
        r.key.generator_hash == key.generator_hash)
      continue;
    // An accepted winner beat its default's median in the same re-timing; a kept
    // default's line carries the default's own figure.
    if (r.gflops > r.tuning.default_gflops) return r.schedule;
    return std::nullopt;
  }
  return std::nullopt;
}

std::vector<ConvSchedule> similar_tuned_schedules(const std::vector<ScheduleRecord>& records, const ScheduleKey& key,
                                                  size_t limit) {
  ConvDescriptor d;
  try {
    d = parse_descriptor(key.descriptor);
  } catch (const Error&) {
    return {};
  }
  std::vector<std::pair<double, ConvSchedule>> found;
  std::vector<std::string> seen;
  for (auto it = records.rbegin(); it != records.rend(); ++it) {
    const ScheduleRecord& r = *it;
    if (!tuned_for_pass_and_target(r, key) || r.key.generator_hash != key.generator_hash ||
        r.key.descriptor == key.descriptor)
      continue;
    if (std::find(seen.begin(), seen.end(), r.key.descriptor) != seen.end()) continue;  // the latest line per key
    seen.push_back(r.key.descriptor);
    ConvDescriptor o;
    try {
      o = parse_descriptor(r.key.descriptor);
    } catch (const Error&) {
      continue;
    }
    if (o.kh != d.kh || o.kw != d.kw || o.sh != d.sh || o.sw != d.sw || o.g != d.g || o.relu != d.relu ||
        o.depthwise() != d.depthwise())
      continue;
    auto ratio = [](double a, double b) { return std::fabs(std::log2(std::max(a, 1.0) / std::max(b, 1.0))); };
    const double distance =
        ratio(o.ic, d.ic) + ratio(o.oc, d.oc) + ratio(o.oh() * o.ow(), d.oh() * d.ow()) + ratio(o.mb, d.mb);
    if (ratio(o.ic, d.ic) > 1 || ratio(o.oc, d.oc) > 1 || ratio(o.oh() * o.ow(), d.oh() * d.ow()) > 2) continue;
    found.emplace_back(distance, r.schedule);
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<ConvSchedule> out;
  for (size_t i = 0; i < found.size() && i < limit; ++i) out.push_back(found[i].second);
  return out;
}

}  // namespace convgen
