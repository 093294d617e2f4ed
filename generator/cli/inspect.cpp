// convgen inspect: import a model and print the layer graph convgen sees.
#include <fmt/format.h>

#include "generator/cli/cli.h"
#include "generator/onnx/import.h"
#include "schedules/errors.h"

namespace convgen::cli {

namespace {

const char* kInspectUsage = R"(usage: convgen inspect MODEL.onnx [--batch N]

Imports an ONNX model (docs/model-import.md) and prints the graph convgen compiles: one
line per node with its op, inputs and outputs and their shapes, and for each Conv the
layer descriptor its kernels are generated for. Constant sub-graphs (Constant nodes,
shape computations) are folded and do not appear.

  --batch N    batch size bound to a dynamic batch dimension (default 1)
)";

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i]);
  return s.empty() ? "scalar" : s;
}

std::string value_text(const model::Graph& g, const std::string& name) {
  if (name.empty()) return "-";
  const model::Value& v = g.value(name);
  return fmt::format("{}[{}]{}", name, shape_text(v.shape), v.is_constant ? "=const" : "");
}

}  // namespace

int inspect(const Args& args) {
  std::string path, batch_text;
  OptionReader r(args);
  while (!r.done()) {
    if (r.help_or_version(kInspectUsage)) return 0;
    if (r.value("--batch", &batch_text)) continue;
    if (!path.empty()) throw Error(ExitCode::Usage, fmt::format("unexpected argument '{}'", r.peek()));
    path = r.positional();
  }
  if (path.empty()) throw Error(ExitCode::Usage, "inspect: missing MODEL.onnx (see --help)");
  model::ImportOptions options;
  if (!batch_text.empty()) options.batch = parse_count("--batch", batch_text);
  const model::Graph g = model::import_onnx(path, options);
  fmt::print("model {} (opset {}, batch {}): {} nodes\n", path, g.opset, g.batch, g.nodes.size());
  for (const auto& in : g.inputs) fmt::print("input  {}\n", value_text(g, in));
  for (const auto& node : g.nodes) {
    std::string ins, outs;
    for (const auto& i : node.inputs) ins += (ins.empty() ? "" : ", ") + value_text(g, i);
    for (const auto& o : node.outputs) outs += (outs.empty() ? "" : ", ") + value_text(g, o);
    fmt::print("{:<18} {:<24} {} -> {}\n", model::op_name(node.op), node.name, ins, outs);
    if (node.op == model::Op::Conv) fmt::print("{:<18} {:<24} layer {}\n", "", "", model::conv_descriptor(g, node).normalised());
    if (node.op == model::Op::ConvTranspose)
      fmt::print("{:<18} {:<24} backward-data of {}\n", "", "", model::conv_transpose_descriptor(g, node).normalised());
  }
  for (const auto& out : g.outputs) fmt::print("output {}\n", value_text(g, out));
  return 0;
}

}  // namespace convgen::cli
