#include "generator/model/gemm_as_conv.h"

#include <fmt/format.h>

namespace convgen::model {

namespace {

// Why Gemm node n cannot run as a convolution, or "" when it can.
std::string refusal(const Graph& g, const Node& n) {
  const Attributes& a = n.attributes;
  if (a.alpha != 1.0f) return "alpha is not 1";
  if (a.trans_a) return "A is transposed";
  if (g.value(n.inputs[0]).shape.size() != 2) return "A is not 2-D";
  if (!g.is_float_constant(n.inputs[1])) return "B is not a constant";
  const int64_t outputs = g.value(n.outputs[0]).shape.at(1);
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    if (a.beta != 1.0f) return "beta is not 1";
    if (!g.is_float_constant(n.inputs[2])) return "C is not a constant";
    const std::vector<int64_t>& c = g.value(n.inputs[2]).shape;
    const bool per_output = (c.size() == 1 && c[0] == outputs) || (c.size() == 2 && c[0] == 1 && c[1] == outputs);
    if (!per_output) return "C is not one value per output";
  }
  return "";
}

std::string unused_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.values.count(name) != 0; ++i) name = fmt::format("{}.{}", base, i);
  return name;
}

}  // namespace

void lower_gemms_to_convs(Graph& g, std::vector<std::string>* why) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].op != Op::Gemm) continue;
    const Node gemm = g.nodes[i];
    if (const std::string no = refusal(g, gemm); !no.empty()) {
      if (why) why->push_back(fmt::format("{} kept as a BLIS Gemm: {}", gemm.name, no));
      continue;
    }
    const std::vector<int64_t> x_shape = g.value(gemm.inputs[0]).shape;
    const int64_t m = x_shape[0], k = x_shape[1], n = g.value(gemm.outputs[0]).shape[1];
    // W' as convolution weights [N, K, 1, 1]: B itself with transB, else B transposed.
    const Value& b = g.value(gemm.inputs[1]);
    Value w;
    w.name = unused_name(g, gemm.name + ".conv_weights");
    w.shape = {n, k, 1, 1};
    w.is_constant = true;
    w.data.resize(static_cast<size_t>(n * k));
    for (int64_t o = 0; o < n; ++o)
      for (int64_t c = 0; c < k; ++c)
        w.data[static_cast<size_t>(o * k + c)] = gemm.attributes.trans_b ? b.data[static_cast<size_t>(o * k + c)]
                                                                         : b.data[static_cast<size_t>(c * n + o)];
    std::vector<std::string> conv_inputs;
    Value x_image, y_image;
    x_image.name = unused_name(g, gemm.name + ".input_as_image");
    x_image.shape = {m, k, 1, 1};
    y_image.name = unused_name(g, gemm.name + ".output_as_image");
    y_image.shape = {m, n, 1, 1};
    conv_inputs = {x_image.name, w.name};
    if (gemm.inputs.size() > 2 && !gemm.inputs[2].empty()) {
      Value bias = g.value(gemm.inputs[2]);
      bias.name = unused_name(g, gemm.name + ".conv_bias");
      bias.shape = {n};
      conv_inputs.push_back(bias.name);
      g.values[bias.name] = bias;
    }
    g.values[w.name] = w;
    g.values[x_image.name] = x_image;
    g.values[y_image.name] = y_image;

    Node to_image, conv, to_rows;
    to_image.name = gemm.name + ".to_image";
    to_image.op = Op::Reshape;
    to_image.inputs = {gemm.inputs[0]};
    to_image.outputs = {x_image.name};
    conv.name = gemm.name;
    conv.op = Op::Conv;
    conv.inputs = conv_inputs;
    conv.outputs = {y_image.name};
    conv.attributes.kernel = {1, 1};
    conv.attributes.strides = {1, 1};
    conv.attributes.dilations = {1, 1};
    conv.attributes.pads_begin = {0, 0};
    conv.attributes.pads_end = {0, 0};
    conv.attributes.group = 1;
    to_rows.name = gemm.name + ".to_rows";
    to_rows.op = Op::Reshape;
    to_rows.inputs = {y_image.name};
    to_rows.outputs = gemm.outputs;
    g.nodes[i] = to_image;
    g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, {conv, to_rows});
    i += 2;
    // B and C live on in their converted copies: drop them unless something else reads
    // them (VGG's first classifier layer is 400 MB).
    for (size_t in = 1; in < gemm.inputs.size(); ++in)
      if (!gemm.inputs[in].empty() && g.readers_of(gemm.inputs[in]).empty() && !g.is_output(gemm.inputs[in]))
        g.values.erase(gemm.inputs[in]);
    if (why)
      why->push_back(fmt::format("{} runs as a 1x1 convolution of {} one-pixel image{} ({} -> {} channels)", gemm.name,
                                 m, m > 1 ? "s" : "", k, n));
  }
}

}  // namespace convgen::model
