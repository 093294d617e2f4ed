#include "generator/model/driver_codegen.h"

#include <fmt/format.h>

#include "generator/model/batch_split.h"
#include "schedules/errors.h"

namespace convgen::model {

namespace {

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "{";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "}";
}

// Exact float literal (hexadecimal: no decimal rounding).
std::string flt(float f) { return fmt::format("{:a}f", f); }

std::string bool_lit(bool b) { return b ? "true" : "false"; }

class Writer {
 public:
  Writer(const Plan& p) : p_(p) {}

  std::string pointer(int id) const {
    const PlanBuffer& b = p_.buffers[id];
    return fmt::format("{} + {}", b.constant ? "W" : "A", b.offset);
  }
  std::string view(int id, bool writable) const {
    const PlanBuffer& b = p_.buffers[id];
    return fmt::format("convgen::{}{{{}, {}, {}}}", writable ? "View" : "ConstView", pointer(id), ints(b.shape),
                       bool_lit(b.channels_last));
  }
  std::string window(const Attributes& a) const {
    return fmt::format("convgen::ops::Window{{{}, {}, {}, {}, {}}}", ints(a.kernel), ints(a.strides), ints(a.dilations),
                       ints(a.pads_begin), ints(a.pads_end));
  }

  std::string step(const PlanStep& s) const {
    const Attributes& a = s.attributes;
    const std::string y = view(s.output, true);
    auto x = [&](size_t i) { return view(s.inputs[i], false); };
    switch (s.kind) {
      case StepKind::Conv:
      case StepKind::ConvTranspose: {
        const ConvDescriptor& d = s.descriptor;
        const int64_t packed = p_.buffers[s.inputs[1]].panels.floats;  // 0: ONNX weights
        const int bias = conv_bias_input(s), residual = conv_residual_input(s);
        return fmt::format("convgen::{}({}, convgen::ConvShape{{{}, {}, {}, {}, {}, {}, {}, {}, {}, {}{}}}, "
                           "{}, {}, {}, {}{});",
                           s.kind == StepKind::Conv ? "run_forward_kernel" : "run_conv_transpose_kernel", s.kernel, d.mb, d.ic, d.ih, d.iw, d.oc, d.kh, d.kw, d.oh(), d.ow(), d.g,
                           d.out_pixel_stride() != d.oc ? fmt::format(", {}, {}", packed, d.out_stride)
                           : packed > 0                  ? fmt::format(", {}", packed)
                                                         : std::string(),
                           pointer(s.inputs[0]),
                           pointer(s.inputs[1]), bias >= 0 ? pointer(bias) : "nullptr",
                           residual >= 0 ? pointer(residual) + ", " : std::string(), pointer(s.output));
      }
      case StepKind::Unary: {
        // ops::Unary's names are the ONNX op names; beta only where an op reads it.
        const bool beta = s.op == Op::HardSigmoid || s.op == Op::HardSwish || s.op == Op::Selu;
        return fmt::format("convgen::ops::unary({}, {}, convgen::ops::Unary::{}, {}, {}, {}{});", x(0), y,
                           op_name(s.op), flt(a.alpha), flt(a.clip_min), flt(a.clip_max),
                           beta ? ", " + flt(a.beta) : std::string());
      }
      case StepKind::Binary:  // ops::Binary's names are the ONNX op names
        return fmt::format("convgen::ops::binary({}, {}, {}, convgen::ops::Binary::{});", x(0), x(1), y, op_name(s.op));
      case StepKind::MaxPool: return fmt::format("convgen::ops::max_pool({}, {}, {});", x(0), window(a), y);
      case StepKind::AveragePool:
        return fmt::format("convgen::ops::average_pool({}, {}, {}, {});", x(0), window(a),
                           bool_lit(a.count_include_pad), y);
      case StepKind::GlobalPool:
        return fmt::format("convgen::ops::global_pool({}, {}, {});", x(0), bool_lit(s.op == Op::GlobalMaxPool), y);
      case StepKind::Gemm:
        if (s.inputs.size() > 2)
          return fmt::format("{{ const convgen::ConstView c = {}; convgen::ops::gemm({}, {}, &c, {}, {}, {}, {}, {}); }}",
                             x(2), x(0), x(1), flt(a.alpha), flt(a.beta), bool_lit(a.trans_a), bool_lit(a.trans_b), y);
        return fmt::format("convgen::ops::gemm({}, {}, nullptr, {}, {}, {}, {}, {});", x(0), x(1), flt(a.alpha),
                           flt(a.beta), bool_lit(a.trans_a), bool_lit(a.trans_b), y);
      case StepKind::MatMul: return fmt::format("convgen::ops::matmul({}, {}, {});", x(0), x(1), y);
      case StepKind::Concat: {
        std::string xs;
        for (size_t i = 0; i < s.inputs.size(); ++i) xs += (i ? ", " : "") + x(i);
        if (a.indices.empty()) return fmt::format("convgen::ops::concat({{{}}}, {}, {});", xs, a.axis, y);
        // The order built once (a function-local static), not per forward call.
        return fmt::format("{{ static const std::vector<int64_t> order{}; convgen::ops::concat({{{}}}, {}, {}, order); }}",
                           ints(a.indices), xs, a.axis, y);
      }
      case StepKind::Copy: {
        const PlanBuffer& in = p_.buffers[s.inputs[0]];
        const PlanBuffer& out = p_.buffers[s.output];
        return fmt::format("convgen::copy_layout({}, convgen::View{{{}, {}, {}}});", x(0), pointer(s.output),
                           ints(in.shape), bool_lit(out.channels_last && in.shape == out.shape));
      }
      case StepKind::Transpose: return fmt::format("convgen::ops::transpose({}, {}, {});", x(0), ints(a.perm), y);
      case StepKind::BatchNorm:
        return fmt::format("convgen::ops::batch_norm({}, {}, {}, {}, {}, {}, {});", x(0), x(1), x(2), x(3), x(4),
                           flt(a.epsilon), y);
      case StepKind::LRN:
        return fmt::format("convgen::ops::lrn({}, {}, {}, {}, {}, {});", x(0), a.size, flt(a.alpha), flt(a.beta),
                           flt(a.lrn_bias), y);
      case StepKind::Pad:
        return fmt::format("convgen::ops::pad({}, {}, {}, {});", x(0), ints(a.pad_amounts), flt(a.pad_value), y);
      case StepKind::Gather:
        return fmt::format("convgen::ops::gather({}, {}, {}, {});", x(0), a.axis, ints(a.indices), y);
      case StepKind::DepthSpace:
        return fmt::format("convgen::ops::depth_space({}, {}, {}, {}, {}, false);", x(0), y, a.blocksize,
                           bool_lit(a.crd), bool_lit(s.op == Op::DepthToSpace));
      case StepKind::LayerNorm: {
        const bool scale = s.inputs[1] >= 0, bias = s.inputs[2] >= 0;
        return fmt::format("convgen::ops::layer_norm({}, {}, {}, {}, {}, {}, {}, {});", x(0),
                           scale ? pointer(s.inputs[1]) : "nullptr", scale ? p_.buffers[s.inputs[1]].elements() : 0,
                           bias ? pointer(s.inputs[2]) : "nullptr", bias ? p_.buffers[s.inputs[2]].elements() : 0,
                           a.axis, flt(a.epsilon), y);
      }
      case StepKind::Resize: {
        const ops::ResizeSpec& r = a.resize;
        static const char* modes[] = {"Nearest", "Linear", "Cubic"};
        static const char* coordinates[] = {"HalfPixel", "PytorchHalfPixel", "AlignCorners", "Asymmetric",
                                            "TfHalfPixelForNn"};
        static const char* rounding[] = {"RoundPreferFloor", "RoundPreferCeil", "Floor", "Ceil"};
        std::string scales;
        for (float f : r.scales) scales += (scales.empty() ? "" : ", ") + flt(f);
        return fmt::format("convgen::ops::resize({}, convgen::ops::ResizeSpec{{convgen::ops::ResizeMode::{}, "
                           "convgen::ops::ResizeCoordinates::{}, convgen::ops::NearestRounding::{}, {}, {}, {{{}}}}}, {});",
                           x(0), modes[int(r.mode)], coordinates[int(r.coordinates)], rounding[int(r.nearest)],
                           flt(r.cubic_a), bool_lit(r.exclude_outside), scales, y);
      }
      case StepKind::Slice:
        return fmt::format("convgen::ops::slice({}, {}, {}, {});", x(0), ints(a.slice_first), ints(a.slice_step), y);
      case StepKind::Reduce:
        return fmt::format("convgen::ops::reduce({}, {}, convgen::ops::Reduce::{}, {});", x(0), ints(a.axes),
                           op_name(s.op) + 6, y);  // "ReduceMean" -> Mean
      case StepKind::NllLoss: {
        static const char* reductions[] = {"None", "Sum", "Mean"};
        // The labels built once (a function-local static), not per forward call.
        return fmt::format("{{ static const std::vector<int64_t> labels{}; convgen::ops::nll_loss({}, labels, {}, {}, {}, "
                           "convgen::ops::LossReduction::{}, {}); }}",
                           ints(a.indices), x(0), s.inputs[1] >= 0 ? pointer(s.inputs[1]) : "nullptr",
                           bool_lit(a.has_ignore_index), a.ignore_index, reductions[int(a.loss_reduction)], y);
      }
      case StepKind::Softmax:
        return fmt::format("convgen::ops::softmax({}, {}, {}, {}, {});", x(0), a.axis, bool_lit(a.softmax_coerce_2d),
                           bool_lit(s.op == Op::LogSoftmax), y);
    }
    throw Error(ExitCode::Internal, "driver codegen: unknown step");
  }

 private:
  const Plan& p_;
};

// The elements of each buffer over the whole batch (`calls` calls of the plan).
std::string elements_list(const Plan& p, const std::vector<int>& ids, int64_t calls) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(p.buffers[ids[i]].elements() * calls);
  return s;
}

}  // namespace

std::string driver_declaration(const std::string& name, const Graph& g, const Plan& p, const std::string& ns,
                               int64_t calls) {
  std::string inputs_doc, outputs_doc;
  for (size_t i = 0; i < g.inputs.size(); ++i)
    inputs_doc += fmt::format("//   inputs[{}]  '{}' {}\n", i, g.inputs[i],
                              ints(whole_batch_shape(g.value(g.inputs[i]).shape, calls)));
  for (size_t i = 0; i < g.outputs.size(); ++i)
    outputs_doc += fmt::format("//   outputs[{}] '{}' {}\n", i, g.outputs[i],
                               ints(whole_batch_shape(g.value(g.outputs[i]).shape, calls)));
  const std::string memory =
      calls == 1 ? fmt::format("an arena of {} floats", p.arena_floats)
                 : fmt::format("run as {} calls of batch {}\n// over the OpenMP threads, an arena of {} floats per "
                               "thread (the same bits on\n// every thread count),",
                               calls, g.batch, p.arena_floats);
  return fmt::format(
      "#include <cstdint>\n#include <memory>\n#include <string>\n#include <vector>\n\n"
      "{split_forward}"
      "namespace {ns} {{\n\n"
      "// The model's forward pass over a static plan: {1} steps, {2} and\n"
      "// {3} floats of weights (read from the weights file `convgen compile` wrote beside\n"
      "// this header). Data is dense float32 in ONNX order:\n{4}{5}"
      "// forward() is not reentrant ({reentrant}); use one Model per thread.\n"
      "class Model {{\n"
      " public:\n"
      "  // Throws std::runtime_error naming the file when it is missing, truncated or\n"
      "  // written by another compile.\n"
      "  explicit Model(const std::string& weights_path);\n"
      "{copies}"
      "  static constexpr int kInputs = {6}, kOutputs = {7};\n"
      "  static constexpr int64_t kInputElements[kInputs] = {{{8}}};\n"
      "  static constexpr int64_t kOutputElements[kOutputs] = {{{9}}};\n"
      "  void forward(const float* const* inputs, float* const* outputs);\n\n"
      " private:\n"
      "{members}"
      "}};\n\n"
      "}}  // namespace {ns}\n",
      name, p.steps.size(), memory, p.weights_floats, inputs_doc, outputs_doc, g.inputs.size(), g.outputs.size(),
      elements_list(p, p.inputs, calls), elements_list(p, p.outputs, calls), fmt::arg("ns", ns),
      fmt::arg("split_forward", calls == 1 ? "" : "namespace convgen { class CallArenas; }\n\n"),
      fmt::arg("reentrant", calls == 1 ? "one arena per Model" : "one set of arenas per Model"),
      fmt::arg("members", calls == 1 ? "  std::vector<float> weights_, arena_;\n"
                                     : "  std::vector<float> weights_;\n"
                                       "  std::shared_ptr<convgen::CallArenas> arenas_;  // runtime/parallel/batch_calls.h\n"),
      fmt::arg("copies", calls == 1 ? ""
                                    : "  // A copy would share the arenas: moved, never copied.\n"
                                      "  Model(const Model&) = delete;\n  Model& operator=(const Model&) = delete;\n"
                                      "  Model(Model&&) = default;\n  Model& operator=(Model&&) = default;\n"));
}

std::string driver_source(const std::string& name, const Graph& g, const Plan& p, const std::string& plan_key,
                          const std::string& target, const std::string& provenance, const std::string& ns,
                          int64_t calls) {
  Writer w(p);
  // One call's samples: a block of `elements` at call * elements (dimension 0 outermost).
  const bool split = calls > 1;
  const std::string in = split ? "    " : "  ";
  auto at_call = [&](int64_t elements) { return split ? fmt::format(" + call * {}", elements) : std::string(); };
  std::string body;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const int64_t e = p.buffers[p.inputs[i]].elements();
    body += fmt::format("{in}std::copy(inputs[{0}]{3}, inputs[{0}]{3} + {1}, {2});\n", i, e, w.pointer(p.inputs[i]),
                        at_call(e), fmt::arg("in", in));
  }
  for (const PlanStep& s : p.steps) {
    const std::string layer = s.kind == StepKind::Conv            ? ": " + s.descriptor.normalised()
                              : s.kind == StepKind::ConvTranspose ? ": backward-data of " + s.descriptor.normalised()
                                                                  : "";
    body += fmt::format("{}// {} ({}){}\n", in, s.node, op_name(s.op), layer);
    body += in + w.step(s) + "\n";
  }
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const int64_t e = p.buffers[p.outputs[i]].elements();
    body += fmt::format("{in}std::copy({0}, {0} + {1}, outputs[{2}]{3});\n", w.pointer(p.outputs[i]), e, i, at_call(e),
                        fmt::arg("in", in));
  }
  (void)g;
  // The arena(s) and forward(): one arena A, or per-thread arenas A over the calls.
  const std::string arena_init = split ? fmt::format("arenas_(std::make_shared<convgen::CallArenas>({}))", p.arena_floats)
                                       : fmt::format("arena_({} + 15)", p.arena_floats);
  const std::string forward =
      split ? fmt::format("// The batch as {} calls of the plan, spread over the threads, each thread on its own\n"
                          "// arena A (64-byte aligned: the plan's offsets are multiples of 64 bytes).\n"
                          "void Model::forward(const float* const* inputs, float* const* outputs) {{\n"
                          "  const float* const W = weights_.data();\n"
                          "  arenas_->run({}, [&](int64_t call, int, float* A) {{\n"
                          "    (void)W;\n{}  }});\n}}\n\n",
                          calls, calls, body)
            : "void Model::forward(const float* const* inputs, float* const* outputs) {\n"
              "  // The plan places buffers at multiples of 64 bytes from A: A itself starts on a cache line.\n"
              "  float* const A = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(arena_.data()) + 63) &\n"
              "                                           ~std::uintptr_t{63});\n"
              "  const float* const W = weights_.data();\n"
              "  (void)W;\n" + body + "}\n\n";
  return fmt::format(
      "{0}"
      "#include \"{1}.h\"\n\n#include <algorithm>\n#include <cstdint>\n\n#include \"runtime/driver/model_runtime.h\"\n"
      "{batch_calls}#include \"runtime/parallel/parallel_runtime.h\"\n\n"
      "namespace {ns} {{\n\n"
      "namespace {{\nconstexpr char kPlanKey[] = \"{2}\";\nconstexpr char kTarget[] = \"{target}\";\n}}  // namespace\n\n"
      "constexpr int64_t Model::kInputElements[];\nconstexpr int64_t Model::kOutputElements[];\n\n"
      "// A CPU without the kernels' features is refused before anything else.\n"
      "Model::Model(const std::string& weights_path)\n"
      "    : weights_((convgen::require_cpu_features(kTarget, \"model {1}\"),\n"
      "                convgen::read_weights_file(weights_path, {3}, kPlanKey))),\n"
      "      {4} {{\n"
      "  convgen::install_model_runtime();\n}}\n\n"
      "{5}"
      "}}  // namespace {ns}\n",
      provenance, name, plan_key, p.weights_floats, arena_init, forward, fmt::arg("ns", ns), fmt::arg("target", target),
      fmt::arg("batch_calls", split ? "#include \"runtime/parallel/batch_calls.h\"\n" : ""));
}

}  // namespace convgen::model
