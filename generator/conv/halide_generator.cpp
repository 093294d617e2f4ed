// The forward kernel as a Halide Generator ("convgen_conv_fwd"), for projects that use
// Halide's own CMake helpers (add_halide_library) or GenGen. Same algorithm and schedule
// code as `convgen compile-layer`; GeneratorParams are the full layer descriptor.
#include <Halide.h>

#include "generator/conv/kernel_pipeline.h"
#include "generator/conv/pipeline.h"
#include "schedules/conv_descriptor.h"
#include "schedules/schedule_records.h"

namespace convgen {

class ConvForwardGenerator : public Halide::Generator<ConvForwardGenerator> {
 public:
  GeneratorParam<int> mb{"mb", 1}, ic{"ic", 1}, ih{"ih", 1}, iw{"iw", 1}, oc{"oc", 1};
  GeneratorParam<int> kh{"kh", 1}, kw{"kw", 1}, sh{"sh", 1}, sw{"sw", 1};
  GeneratorParam<int> pt{"pt", 0}, pb{"pb", 0}, pl{"pl", 0}, pr{"pr", 0};
  GeneratorParam<int> dh{"dh", 1}, dw{"dw", 1}, groups{"groups", 1};
  GeneratorParam<bool> bias{"bias", false}, relu{"relu", false};
  // The activation as the descriptor grammar writes its flag, "relu", "clip(0,6)",
  // "leakyrelu(0.01)", "hardswish", "silu" (docs/descriptor.md); empty for none.
  GeneratorParam<std::string> activation{"activation", ""};
  // Empty: the analytic default. Otherwise one schedule record line (docs/schedules.md).
  GeneratorParam<std::string> schedule_record{"schedule_record", ""};

  Input<Buffer<float>> input{"input", 5};
  Input<Buffer<float>> weights{"weights", 5};
  Input<Buffer<float>> bias_values{"bias_vector", 1};  // "bias" names the GeneratorParam
  Output<Buffer<float>> output{"output", 4};

  void generate() {
    disable_llvm_slp_vectorizer();
    ConvDescriptor d;
    d.mb = mb; d.ic = ic; d.ih = ih; d.iw = iw; d.oc = oc; d.kh = kh; d.kw = kw; d.sh = sh; d.sw = sw;
    d.pt = pt; d.pb = pb; d.pl = pl; d.pr = pr; d.dh = dh; d.dw = dw; d.g = groups;
    d.bias = bias; d.relu = relu;
    const std::string act = activation;
    if (!act.empty()) {
      // The grammar's own parser, on a placeholder layer carrying just the flag.
      const ConvDescriptor flag = parse_descriptor("ic1ih1oc1kh1+" + act);
      d.relu = d.relu || flag.relu;  // activation=relu works as relu=true
      d.activation = flag.activation;
      d.clip_lo = flag.clip_lo;
      d.clip_hi = flag.clip_hi;
      d.leaky_alpha = flag.leaky_alpha;
    }
    validate(d);
    const TargetInfo t = target_info(get_target().to_string());
    const std::string record = schedule_record;
    ConvSchedule s = record.empty() ? analytic_schedule(d, t) : parse_record_line(record, "schedule_record").schedule;
    // Its weights input is ONNX OIHW (5-D). A record's pack_weights says how `convgen
    // tune` timed the schedule (as select_schedule reads records, schedules/
    // schedule_selection.cpp); this kernel packs per call.
    s.pack_weights = PackWeights::PerCall;
    std::vector<ItemPrefetch> prefetches;  // they name the input argument "input", as here
    output = define_scheduled_forward(d, s, t, input, weights, bias_values, Halide::Func(), nullptr, {}, &prefetches);
    const auto extents = forward_buffer_extents(d);
    pin_dense([&](int i) { return input.dim(i); }, extents[0]);
    pin_dense([&](int i) { return weights.dim(i); }, extents[1]);
    pin_dense([&](int i) { return bias_values.dim(i); }, extents[2]);
    pin_dense([&](int i) { return output.dim(i); }, extents[3]);
    Halide::Pipeline pipeline = get_pipeline();  // a handle: the Generator compiles this one
    add_kernel_lowering_passes(pipeline, prefetches);
  }
};

}  // namespace convgen

HALIDE_REGISTER_GENERATOR(convgen::ConvForwardGenerator, convgen_conv_fwd)
