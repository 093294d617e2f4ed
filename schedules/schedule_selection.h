// Which schedule a kernel is built with: a matching record from a records file when one
// is given and matches (descriptor, pass, target, generator hash), else the analytic
// default. The source is kept for provenance headers and manifests.
#pragma once

#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/conv_schedule.h"

namespace convgen {

struct SelectedSchedule {
  ConvSchedule schedule;
  std::string source;  // "analytic default" or "record <file>:<line>"
};

// records_path may be empty. `why` gets one line per decision (including why a record
// was refused, e.g. measured for another generator version).
SelectedSchedule select_schedule(const ConvDescriptor& d, const std::string& pass, const TargetInfo& t,
                                 const std::string& records_path, std::vector<std::string>* why);

}  // namespace convgen
