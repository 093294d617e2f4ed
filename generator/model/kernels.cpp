#include "generator/model/kernels.h"

#include <map>

#include <fmt/format.h>

#include "generator/kernel_cache/kernel_cache.h"

namespace convgen::model {

std::vector<PlannedKernel> plan_kernels(const Graph& g, const TargetInfo& t, const std::string& records,
                                        std::vector<std::string>* why) {
  std::vector<PlannedKernel> kernels;
  std::map<std::string, size_t> by_key;
  for (const Node& n : g.nodes) {
    if (n.op != Op::Conv && n.op != Op::ConvTranspose) continue;
    // A ConvTranspose runs the backward-data kernel of its convolution.
    const std::string pass = n.op == Op::Conv ? "fwd" : "bwd_data";
    ConvDescriptor d = n.op == Op::Conv ? conv_descriptor(g, n) : conv_transpose_descriptor(g, n);
    d.name.clear();
    validate(d);
    std::vector<std::string> lines;
    SelectedSchedule sel = select_schedule(d, pass, t, records, &lines);
    // The intra-kernel parallel variant, chosen by the layer alone (images across threads
    // from a batch of 8, else pixels): one schedule -- and so the same bits -- on every
    // thread count, one thread running its parallel loops serially.
    const ConvSchedule selected = sel.schedule;
    sel.schedule = parallel_variant(d, pass, sel.schedule, d.mb >= 8 ? Parallel::Images : Parallel::Pixels, &lines);
    std::string overrides = "parallel=" + to_string(sel.schedule.parallel);
    // The variant may stage the input in row bands for the threads: children apply that too.
    if (sel.schedule.pack_input != selected.pack_input || sel.schedule.nc != selected.nc)
      overrides += fmt::format(" pack_input={} nc={}", to_string(sel.schedule.pack_input), sel.schedule.nc);
    // Constant weights need packing only once: the plan packs them at load.
    const bool packs_at_load = pass == "fwd" && g.is_float_constant(n.inputs.at(1));
    const bool prepack = packs_at_load && sel.schedule.strategy == Strategy::Gemm;
    // Either way, never what a record says: the plan decides which weights it packs.
    sel.schedule.pack_weights = prepack ? PackWeights::Prepacked : PackWeights::PerCall;
    overrides += prepack ? " pack_weights=prepacked" : " pack_weights=per_call";
    const std::string key = kernel_cache_key(d, pass, sel.schedule, t.target);
    auto it = by_key.find(key);
    if (it != by_key.end()) {
      kernels[it->second].layers.push_back(n.name);
      if (why) why->push_back(fmt::format("{}: shares kernel {}", n.name, kernels[it->second].name));
      continue;
    }
    PlannedKernel k;
    k.name = kernel_function_name(pass, key);
    k.pass = pass;
    k.descriptor = d;
    k.selection = sel;
    k.key = key;
    k.layers.push_back(n.name);
    k.schedule_overrides = overrides;  // what compile-layer children apply after selection
    k.packs_weights_at_load = packs_at_load;
    if (prepack) k.weight_panels = forward_weight_panels(d, sel.schedule, t);
    if (why) {
      why->push_back(fmt::format("{}: kernel {} for {}{} (schedule: {})", n.name, k.name, d.normalised(),
                                 pass == "fwd" ? "" : ", backward-data", sel.source));
      for (const auto& l : lines) why->push_back("  " + l);
    }
    by_key[key] = kernels.size();
    kernels.push_back(std::move(k));
  }
  return kernels;
}

}  // namespace convgen::model
