#include "generator/train/driver_codegen.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "schedules/errors.h"

namespace convgen::model {

namespace {

std::string c_string(const std::string& s);

// The training record's parallel modes as TrainerOptions::recorded_modes assignments.
std::string recorded_modes_code(const TrainDriverSpec& spec) {
  if (spec.recorded_modes.empty()) return "";
  std::string out = "  // Parallel modes from the training record the driver was compiled with.\n";
  for (const auto& [node, mode] : spec.recorded_modes)
    out += fmt::format("  o.recorded_modes[{}] = convgen::model::ParallelMode::{};\n", c_string(node),
                       mode == "whole-batch" ? "WholeBatch" : "MicroBatch");
  out += fmt::format("  o.recorded_modes_source = {};\n", c_string("the training record compiled into " + spec.name));
  return out;
}

// A C++ string literal; octal escapes (always three digits) so no escape runs into the
// next character.
std::string c_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\{:03o}", c);
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

// The shortest decimal that reads back as the same float, as a float literal.
std::string float_literal(float f) {
  if (std::isnan(f)) return "std::numeric_limits<float>::quiet_NaN()";
  if (std::isinf(f)) return f > 0 ? "std::numeric_limits<float>::infinity()" : "-std::numeric_limits<float>::infinity()";
  std::string s = fmt::format("{}", f);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s + "f";
}

std::string int_literal(int64_t v) {
  if (v == std::numeric_limits<int64_t>::min()) return "std::numeric_limits<int64_t>::min()";
  return std::to_string(v);
}

std::string int_list(const std::vector<int64_t>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + int_literal(v[i]);
  return out + "}";
}

std::string string_list(const std::vector<std::string>& v) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + c_string(v[i]);
  return out + "}";
}

const char* bool_literal(bool b) { return b ? "true" : "false"; }

// The attribute fields that differ from their defaults, one statement each. Every field
// of Attributes is listed: a field missed here would silently take its default in the
// driver (the generated-driver tests compare every bit against the in-process trainer).
std::string attribute_statements(const Attributes& a) {
  const Attributes d;
  std::string out;
  auto ints = [&](const char* field, const std::vector<int64_t>& v, const std::vector<int64_t>& def) {
    if (v != def) out += fmt::format(" a.{} = {};", field, int_list(v));
  };
  auto integer = [&](const char* field, int64_t v, int64_t def) {
    if (v != def) out += fmt::format(" a.{} = {};", field, int_literal(v));
  };
  auto real = [&](const char* field, float v, float def) {
    if (std::memcmp(&v, &def, sizeof v) != 0) out += fmt::format(" a.{} = {};", field, float_literal(v));
  };
  auto flag = [&](const char* field, bool v, bool def) {
    if (v != def) out += fmt::format(" a.{} = {};", field, bool_literal(v));
  };
  ints("kernel", a.kernel, d.kernel);
  ints("strides", a.strides, d.strides);
  ints("dilations", a.dilations, d.dilations);
  ints("pads_begin", a.pads_begin, d.pads_begin);
  ints("pads_end", a.pads_end, d.pads_end);
  integer("group", a.group, d.group);
  flag("ceil_mode", a.ceil_mode, d.ceil_mode);
  flag("count_include_pad", a.count_include_pad, d.count_include_pad);
  real("alpha", a.alpha, d.alpha);
  real("beta", a.beta, d.beta);
  flag("trans_a", a.trans_a, d.trans_a);
  flag("trans_b", a.trans_b, d.trans_b);
  real("clip_min", a.clip_min, d.clip_min);
  real("clip_max", a.clip_max, d.clip_max);
  integer("axis", a.axis, d.axis);
  flag("softmax_coerce_2d", a.softmax_coerce_2d, d.softmax_coerce_2d);
  ints("perm", a.perm, d.perm);
  ints("axes", a.axes, d.axes);
  flag("keepdims", a.keepdims, d.keepdims);
  ints("slice_first", a.slice_first, d.slice_first);
  ints("slice_step", a.slice_step, d.slice_step);
  ints("shape", a.shape, d.shape);
  real("epsilon", a.epsilon, d.epsilon);
  real("momentum", a.momentum, d.momentum);
  integer("size", a.size, d.size);
  real("lrn_bias", a.lrn_bias, d.lrn_bias);
  ints("pad_amounts", a.pad_amounts, d.pad_amounts);
  real("pad_value", a.pad_value, d.pad_value);
  real("ratio", a.ratio, d.ratio);
  flag("fused_relu", a.fused_relu, d.fused_relu);
  flag("fused_clip", a.fused_clip, d.fused_clip);
  integer("blocksize", a.blocksize, d.blocksize);
  ints("indices", a.indices, d.indices);
  flag("crd", a.crd, d.crd);
  if (a.resize.mode != d.resize.mode) out += fmt::format(" a.resize.mode = convgen::ops::ResizeMode({});", int(a.resize.mode));
  if (a.resize.coordinates != d.resize.coordinates)
    out += fmt::format(" a.resize.coordinates = convgen::ops::ResizeCoordinates({});", int(a.resize.coordinates));
  if (a.resize.nearest != d.resize.nearest)
    out += fmt::format(" a.resize.nearest = convgen::ops::NearestRounding({});", int(a.resize.nearest));
  real("resize.cubic_a", a.resize.cubic_a, d.resize.cubic_a);
  flag("resize.exclude_outside", a.resize.exclude_outside, d.resize.exclude_outside);
  if (!a.resize.scales.empty()) {
    std::string scales;
    for (float f : a.resize.scales) scales += (scales.empty() ? "" : ", ") + float_literal(f);
    out += fmt::format(" a.resize.scales = {{{}}};", scales);
  }
  return out;
}

std::string graph_builder(const TrainGraph& tg) {
  const Graph& g = tg.graph;
  std::string out;
  out += "TrainGraph training_graph(const float* W) {\n  TrainGraph t;\n  Graph& g = t.graph;\n";
  out += fmt::format("  g.source = {};\n  g.opset = {};\n  g.batch = {};\n", c_string(std::filesystem::path(g.source).filename().string()), g.opset, g.batch);
  out += fmt::format("  g.inputs = {};\n  g.outputs = {};\n", string_list(g.inputs), string_list(g.outputs));
  out += "  // Tensors: activations (shapes at the micro-batch size) and constants (floats from\n"
         "  // the weights file, in this order).\n";
  int64_t offset = 0;
  for (const auto& [name, v] : g.values) {
    if (v.is_float_constant()) {
      if (int64_t(v.data.size()) != v.elements())
        throw Error(ExitCode::Internal, fmt::format("training driver: constant {} has {} floats for {} elements", name,
                                                    v.data.size(), v.elements()));
      out += fmt::format("  constant(g, {}, {}, W + {});\n", c_string(name), int_list(v.shape), offset);
      offset += v.elements();
    } else if (v.is_constant) {
      out += fmt::format("  int64_constant(g, {}, {}, {});\n", c_string(name), int_list(v.shape), int_list(v.int64_data));
    } else {
      out += fmt::format("  activation(g, {}, {});\n", c_string(name), int_list(v.shape));
    }
  }
  out += "  // Nodes, in execution order.\n";
  for (const Node& n : g.nodes) {
    const std::string attrs = attribute_statements(n.attributes);
    out += fmt::format("  {{ Attributes& a = node(g, {}, Op::{}, {}, {});{} (void)a; }}\n", c_string(n.name),
                       op_name(n.op), string_list(n.inputs), string_list(n.outputs), attrs);
  }
  out += fmt::format("  t.input = {};\n  t.logits = {};\n  t.classes = {};\n  t.sample_shape = {};\n", c_string(tg.input),
                     c_string(tg.logits), tg.classes, int_list(tg.sample_shape));
  if (tg.label_elements != 1) out += fmt::format("  t.label_elements = {};\n", tg.label_elements);
  out += fmt::format("  t.trainable = {};\n  return t;\n}}\n", string_list(tg.trainable));
  return out;
}

int64_t blob_floats(const TrainGraph& tg) {
  int64_t n = 0;
  for (const auto& entry : tg.graph.values)
    if (entry.second.is_float_constant()) n += entry.second.elements();
  return n;
}

std::string kernel_table(const TrainDriverSpec& spec) {
  std::string out = "std::vector<AotConvKernels> kernel_table() {\n  return {\n";
  for (const TrainKernelRow& k : spec.kernels) {
    const bool bias = k.descriptor.bias;
    out += fmt::format("      {{{}, {}, {}, {}, {}}},\n", c_string(k.descriptor.normalised()),
                       k.forward.empty() ? "nullptr" : k.forward,
                       k.backward_data.empty() ? "nullptr" : k.backward_data, bias ? "nullptr" : k.backward_weights,
                       bias ? k.backward_weights : "nullptr");
  }
  return out + "  };\n}\n";
}

}  // namespace

std::string training_driver_declaration(const TrainGraph& tg, const TrainDriverSpec& spec) {
  std::string counts;
  for (int64_t c : spec.sample_counts) counts += (counts.empty() ? "" : ", ") + std::to_string(c);
  return fmt::format(
      "#include <cstdint>\n#include <memory>\n#include <string>\n#include <utility>\n\n#include \"runtime/train/trainer.h\"\n\n"
      "namespace {ns} {{\n\n"
      "// Fixed when the driver was generated: kernels exist for these sizes only.\n"
      "constexpr int64_t kBatch = {1};        // samples per mini-batch (train_step's count at most)\n"
      "constexpr int64_t kMicroBatch = {2};   // samples per micro-batch (one thread's share)\n"
      "constexpr int64_t kClasses = {3};\n"
      "constexpr int64_t kSampleShape[] = {4};  // C, H, W of one sample (dense NCHW floats)\n"
      "// Data sizes whose last, partial mini-batch (size mod kBatch) has kernels too; any other\n"
      "// partial size is a convgen::Error naming the command that would add it.\n"
      "constexpr int64_t kSampleCounts[] = {{{5}}};\n\n"
      "// What may change from run to run without regenerating. Results are bit-identical\n"
      "// for every thread count and with intra_kernel (docs/training.md).\n"
      "struct TrainOptions {{\n"
      "  float lr = 0.01f, momentum = 0.9f, weight_decay = 0.0f;\n"
      "  int threads = 1;\n"
      "  bool intra_kernel = false;\n"
      "  uint64_t seed = 0;  // dropout masks\n"
      "  int32_t ignore_label = -1;  // a label value that counts nowhere (-1: none)\n"
      "}};\n\n"
      "// The batch-parallel trainer of this model on its generated kernels. Errors are\n"
      "// exceptions (convgen::Error, std::runtime_error) with a message, never aborts.\n"
      "class Trainer {{\n"
      " public:\n"
      "  // Reads the initial weights (NAME.weights, generated beside this file).\n"
      "  explicit Trainer(const std::string& weights_path, const TrainOptions& options = {{}});\n"
      "  // One SGD step with momentum on `count` samples (1 <= count <= kBatch): pixels\n"
      "  // dense NCHW, labels in [0, kClasses) or ignore_label, one per sample (or H x W for\n"
      "  // a segmentation model's logits); the loss is their mean cross-entropy.\n"
      "  convgen::model::StepStats train_step(const float* pixels, const int32_t* labels, int64_t count);\n"
      "  // Forward only: loss and correct count, no state changes.\n"
      "  convgen::model::StepStats evaluate(const float* pixels, const int32_t* labels, int64_t count);\n"
      "  // Forward only, the logits out: count x kClasses floats (BatchNorm on running\n"
      "  // statistics, Dropout off).\n"
      "  void forward(const float* pixels, int64_t count, float* logits);\n"
      "  // The current weights (trained parameters, BatchNormalization statistics) as a\n"
      "  // weights file this constructor reads; temp file + rename, never half-written.\n"
      "  void save_weights(const std::string& path) const;\n"
      "  // Weights from the float initializers of an ONNX model file of this architecture\n"
      "  // (e.g. trained elsewhere); momentum is left as it is. Error naming the tensor.\n"
      "  void load_onnx_weights(const std::string& path);\n"
      "  // Everything to continue bit-identically (weights, momentum, BatchNormalization\n"
      "  // state, step count, learning rate) and the caller's place in its data, to\n"
      "  // DIR/checkpoint.cgck, atomically (docs/training.md).\n"
      "  void save_checkpoint(const std::string& dir, int64_t epoch = 0, int64_t position = 0) const;\n"
      "  // Restores a checkpoint of this driver written with the same momentum, weight decay\n"
      "  // and seed (else a convgen::Error naming the file); returns {{epoch, position}}.\n"
      "  std::pair<int64_t, int64_t> load_checkpoint(const std::string& dir);\n"
      "  // Parameters (values, momentum), BatchNormalization state, step count, learning rate.\n"
      "  convgen::model::Trainer& engine() {{ return *engine_; }}\n"
      "  const convgen::model::Trainer& engine() const {{ return *engine_; }}\n\n"
      " private:\n"
      "  std::unique_ptr<convgen::model::Trainer> engine_;\n"
      "}};\n\n"
      "}}  // namespace {ns}\n",
      spec.name, spec.batch, spec.micro_batch, tg.classes, [&] {
        std::string s = "{";
        for (size_t i = 0; i < tg.sample_shape.size(); ++i) s += (i ? ", " : "") + std::to_string(tg.sample_shape[i]);
        return s + "}";
      }(), counts.empty() ? "0" : counts, fmt::arg("ns", spec.cpp_namespace), fmt::arg("recorded_modes", recorded_modes_code(spec)));
}

std::string training_driver_source(const TrainGraph& tg, const TrainDriverSpec& spec, const std::string& provenance) {
  std::string includes;
  for (const TrainKernelRow& k : spec.kernels)
    for (const std::string* f : {&k.forward, &k.backward_data, &k.backward_weights})
      if (!f->empty() && includes.find("/" + *f + ".h") == std::string::npos)
        includes += fmt::format("#include \"kernels/{}.h\"\n", *f);
  return fmt::format(
      "{0}"
      "#include \"{1}.h\"\n\n#include <limits>\n#include <vector>\n\n"
      "#include \"runtime/driver/cpu_features.h\"\n#include \"runtime/ops/weights_file.h\"\n#include \"runtime/parallel/parallel_runtime.h\"\n#include \"runtime/train/train_conv_aot.h\"\n"
      "#include \"runtime/train/trainer_state.h\"\n#include \"schedules/conv_schedule.h\"\n{2}\n"
      "namespace {ns} {{\n\n"
      "namespace {{\n\n"
      "using namespace convgen::model;\n\n"
      "constexpr char kWeightsKey[] = \"{3}\";\n"
      "constexpr int64_t kWeightFloats = {4};\n"
      "constexpr char kTarget[] = {5};\n"
      "constexpr char kRegenerate[] = {6};\n\n"
      "void activation(Graph& g, const char* name, std::vector<int64_t> shape) {{\n"
      "  Value& v = g.values[name];\n  v.name = name;\n  v.shape = std::move(shape);\n}}\n\n"
      "void constant(Graph& g, const char* name, std::vector<int64_t> shape, const float* data) {{\n"
      "  Value& v = g.values[name];\n  v.name = name;\n  v.shape = std::move(shape);\n  v.is_constant = true;\n"
      "  v.data.assign(data, data + v.elements());\n}}\n\n"
      "void int64_constant(Graph& g, const char* name, std::vector<int64_t> shape, std::vector<int64_t> data) {{\n"
      "  Value& v = g.values[name];\n  v.name = name;\n  v.shape = std::move(shape);\n  v.is_constant = true;\n"
      "  v.is_int64 = true;\n  v.int64_data = std::move(data);\n}}\n\n"
      "Attributes& node(Graph& g, const char* name, Op op, std::vector<std::string> inputs,\n"
      "                 std::vector<std::string> outputs) {{\n"
      "  Node n;\n  n.name = name;\n  n.op = op;\n  n.inputs = std::move(inputs);\n  n.outputs = std::move(outputs);\n"
      "  g.nodes.push_back(std::move(n));\n  return g.nodes.back().attributes;\n}}\n\n"
      "{7}\n"
      "// Every layer at every size the compiler saw: descriptor, forward, backward-data,\n"
      "// backward-weights (without bias), backward-weights with bias.\n"
      "{8}\n"
      "}}  // namespace\n\n"
      "Trainer::Trainer(const std::string& weights_path, const TrainOptions& options) {{\n"
      "  convgen::require_cpu_features({5}, \"training driver {1}\");  // before any kernel runs\n"
      "  convgen::install_kernel_runtime();\n"
      "  const std::vector<float> weights = convgen::read_weights_file(weights_path, kWeightFloats, kWeightsKey);\n"
      "  TrainerOptions o;\n"
      "  o.batch = kBatch;\n  o.micro_batch = kMicroBatch;\n{recorded_modes}"
      "  o.lr = options.lr;\n  o.momentum = options.momentum;\n  o.weight_decay = options.weight_decay;\n"
      "  o.threads = options.threads;\n  o.intra_kernel = options.intra_kernel;\n  o.seed = options.seed;\n"
      "  o.ignore_label = options.ignore_label;\n"
      "  engine_ = std::make_unique<convgen::model::Trainer>(training_graph(weights.data()), o,\n"
      "                                                      convgen::target_info(kTarget),\n"
      "                                                      make_aot_conv_factory(kernel_table(), kRegenerate));\n"
      "}}\n\n"
      "convgen::model::StepStats Trainer::train_step(const float* pixels, const int32_t* labels, int64_t count) {{\n"
      "  return engine_->train_step(pixels, labels, count);\n}}\n\n"
      "convgen::model::StepStats Trainer::evaluate(const float* pixels, const int32_t* labels, int64_t count) {{\n"
      "  return engine_->evaluate(pixels, labels, count);\n}}\n\n"
      "void Trainer::forward(const float* pixels, int64_t count, float* logits) {{\n"
      "  engine_->forward(pixels, count, logits);\n}}\n\n"
      "void Trainer::save_weights(const std::string& path) const {{\n"
      "  convgen::write_weights_file(path, current_weights_blob(*engine_), kWeightsKey);\n}}\n\n"
      "void Trainer::load_onnx_weights(const std::string& path) {{\n"
      "  convgen::model::load_onnx_weights(*engine_, path);\n}}\n\n"
      "void Trainer::save_checkpoint(const std::string& dir, int64_t epoch, int64_t position) const {{\n"
      "  save_driver_checkpoint(*engine_, dir, kWeightsKey, epoch, position);\n}}\n\n"
      "std::pair<int64_t, int64_t> Trainer::load_checkpoint(const std::string& dir) {{\n"
      "  return load_driver_checkpoint(*engine_, dir, kWeightsKey);\n}}\n\n"
      "}}  // namespace {ns}\n",
      provenance, spec.name, includes, spec.weights_key, blob_floats(tg), c_string(spec.target),
      c_string(spec.regenerate), graph_builder(tg), kernel_table(spec), fmt::arg("ns", spec.cpp_namespace), fmt::arg("recorded_modes", recorded_modes_code(spec)));
}

}  // namespace convgen::model
