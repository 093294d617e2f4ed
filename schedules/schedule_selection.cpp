#include "schedules/schedule_selection.h"

#include <fmt/format.h>

#include "schedules/build_info.h"
#include "schedules/host_cpu.h"
#include "schedules/schedule_records.h"

namespace convgen {

SelectedSchedule select_schedule(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                 const std::string& records_path, std::vector<std::string>* why) {
  const ScheduleKey key{d.normalised(), pass, t.target, CONVGEN_GENERATOR_HASH};
  if (!records_path.empty()) {
    const std::vector<ScheduleRecord> records = read_records(records_path);
    if (const ScheduleRecord* r = find_record(records, key)) {
      if (why) why->push_back(fmt::format("schedule from {} ({}, {:.1f} GF/s measured)", records_path, r->source, r->gflops));
      // Speed, not correctness, depends on where it was measured: applied, and said.
      if (why && r->tuning.present && r->tuning.provenance.cpu != host_cpu().model)
        why->push_back(fmt::format("record measured on {} ({} thread(s)); this CPU is {}: applied all the same",
                                   r->tuning.provenance.cpu, r->tuning.provenance.threads, host_cpu().model));
      // Its pack_weights says how the tuner handed the candidates their weights (as the
      // consumer it tuned for does); what a kernel reads is its consumer's choice.
      ConvSchedule s = r->schedule;
      s.pack_weights = PackWeights::PerCall;
      return {s, fmt::format("record in {}", records_path)};
    }
    // Say why near misses were refused: the same layer under other code or target.
    for (const ScheduleRecord& r : records) {
      if (r.kind != RecordKind::Schedule || r.key.descriptor != key.descriptor || r.key.pass != key.pass) continue;
      if (why && r.key.target != key.target)
        why->push_back(fmt::format("record refused: measured for target {}", r.key.target));
      else if (why && r.key.generator_hash != key.generator_hash)
        why->push_back(fmt::format("record refused: measured for generator {}, this is {}",
                                   r.key.generator_hash.substr(0, 12), key.generator_hash.substr(0, 12)));
    }
    if (why) why->push_back(fmt::format("no record in {} matches: using the analytic default", records_path));
  }
  return {analytic_schedule_for_pass(d, pass, t, why), "analytic default"};
}

}  // namespace convgen
