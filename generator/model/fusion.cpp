#include "generator/model/fusion.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "generator/model/channel_order_folding.h"
#include "generator/model/concat_slices.h"
#include "generator/model/gemm_as_conv.h"

namespace convgen::model {

namespace {

void fold_batchnorm(Graph& g, Node& conv, const Node& bn) {
  const Value& w = g.value(conv.inputs[1]);
  const Value& scale = g.value(bn.inputs[1]);
  const Value& shift = g.value(bn.inputs[2]);
  const Value& mean = g.value(bn.inputs[3]);
  const Value& var = g.value(bn.inputs[4]);
  const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
  const int64_t k = w.shape[0], per_k = w.elements() / k;
  Value folded_w = w, folded_b;
  folded_w.name = conv.name + ".bn_folded_weights";
  folded_b.name = conv.name + ".bn_folded_bias";
  folded_b.is_constant = true;
  folded_b.shape = {k};
  folded_b.data.resize(k);
  for (int64_t o = 0; o < k; ++o) {
    const double factor = double(scale.data[o]) / std::sqrt(double(var.data[o]) + double(bn.attributes.epsilon));
    for (int64_t i = 0; i < per_k; ++i) folded_w.data[o * per_k + i] = float(double(w.data[o * per_k + i]) * factor);
    const double b = has_bias ? double(g.value(conv.inputs[2]).data[o]) : 0.0;
    folded_b.data[o] = float((b - double(mean.data[o])) * factor + double(shift.data[o]));
  }
  g.values[folded_w.name] = folded_w;
  g.values[folded_b.name] = folded_b;
  conv.inputs.resize(3);
  conv.inputs[1] = folded_w.name;
  conv.inputs[2] = folded_b.name;
  conv.outputs[0] = bn.outputs[0];
}

}  // namespace

namespace {

// The node reading `value` if it is the only reader and `value` is no graph output, else -1.
int only_reader(const Graph& g, const std::string& value) {
  const std::vector<size_t> readers = g.readers_of(value);
  return readers.size() == 1 && !g.is_output(value) ? static_cast<int>(readers[0]) : -1;
}

// Removes node `index` and the value `gone`; keeps `c` pointing at the same Conv.
void erase_node(Graph& g, size_t index, const std::string& gone, size_t& c) {
  g.values.erase(gone);
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(index));
  if (index < c) --c;
}

// BatchNormalization and Relu reading a Conv's output as their input. BatchNormalization
// folds only into a Conv with nothing fused yet; a Relu only where no other activation is.
void fuse(Graph& g, const std::vector<Op>& followers, std::vector<std::string>* why) {
  auto say = [&](const std::string& line) {
    if (why) why->push_back(line);
  };
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    if (g.nodes[c].op != Op::Conv) continue;
    for (Op next : followers) {
      Node& conv = g.nodes[c];
      const std::string out = conv.outputs[0];
      const std::vector<size_t> readers = g.readers_of(out);
      const auto follower = std::find_if(readers.begin(), readers.end(), [&](size_t r) {
        return g.nodes[r].op == next && g.nodes[r].inputs[0] == out;
      });
      if (follower == readers.end()) continue;
      const size_t reader = *follower;
      const Node& n = g.nodes[reader];
      if (only_reader(g, out) != static_cast<int>(reader)) {
        say(fmt::format("{} not fused into {}: its input '{}' has other readers", n.name, conv.name, out));
        continue;
      }
      if (next == Op::BatchNormalization) {
        bool constants = g.is_float_constant(conv.inputs[1]);
        for (int i = 1; i <= 4; ++i) constants = constants && g.is_float_constant(n.inputs[i]);
        if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) constants = constants && g.is_float_constant(conv.inputs[2]);
        if (!constants) {
          say(fmt::format("{} not folded into {}: weights or statistics are not constants", n.name, conv.name));
          continue;
        }
        if (conv.attributes.fused_relu || conv.inputs.size() > 3) continue;  // not a plain convolution's output
        fold_batchnorm(g, conv, n);
        say(fmt::format("{} folded into {}'s weights and bias", n.name, conv.name));
      } else {
        if (conv.attributes.fused_activation != Activation::None) continue;
        conv.attributes.fused_relu = true;
        conv.outputs[0] = n.outputs[0];
        say(fmt::format("{} fused into {}'s epilogue", n.name, conv.name));
      }
      erase_node(g, reader, out, c);
    }
  }
}

// Add(Conv(...), other) with `other` of the Conv's output shape: the Conv takes `other`
// as its residual input (conv.inputs[3]) and moves to the Add's place in the order,
// where every input of both is computed. Only a Conv with no activation yet (the sum
// comes before it) whose output the Add alone reads; of two such operands, the later
// Conv. The kernel adds in float after the bias, as the Add would: the same bits.
void fuse_residual_adds(Graph& g, std::vector<std::string>* why) {
  auto say = [&](const std::string& line) {
    if (why) why->push_back(line);
  };
  for (size_t a = 0; a < g.nodes.size(); ++a) {
    const Node& add = g.nodes[a];
    if (add.op != Op::Add || add.inputs.size() != 2 || add.inputs[0] == add.inputs[1]) continue;
    int conv = -1, operand = -1;
    for (int i = 0; i < 2; ++i) {
      const int producer = g.producer_of(add.inputs[i]);
      if (producer < 0) continue;
      const Node& p = g.nodes[producer];
      if (p.op != Op::Conv || p.attributes.fused_relu || p.attributes.fused_activation != Activation::None ||
          p.inputs.size() > 3 || only_reader(g, add.inputs[i]) != static_cast<int>(a))
        continue;
      if (g.value(add.inputs[i]).shape != g.value(add.inputs[1 - i]).shape) {
        say(fmt::format("{} not fused into {}: its operands' shapes differ (a broadcast)", add.name, p.name));
        continue;
      }
      if (producer > conv) conv = producer, operand = i;
    }
    if (conv < 0) continue;
    Node fused = g.nodes[conv];
    fused.inputs.resize(3);
    fused.inputs.push_back(add.inputs[1 - operand]);
    fused.outputs = add.outputs;
    say(fmt::format("{} fused into {}'s epilogue (residual input '{}')", add.name, fused.name, fused.inputs[3]));
    g.values.erase(add.inputs[operand]);
    g.nodes[a] = fused;
    g.nodes.erase(g.nodes.begin() + conv);
    --a;  // conv < a: the Add's place moved up by one
  }
}

// Clip, LeakyRelu, HardSwish, and Mul(x, Sigmoid(x)) (SiLU, written so by PyTorch's export)
// after a Conv whose epilogue has no activation yet.
void fuse_activations(Graph& g, std::vector<std::string>* why) {
  auto say = [&](const std::string& line) {
    if (why) why->push_back(line);
  };
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    if (g.nodes[c].op != Op::Conv || g.nodes[c].attributes.fused_relu ||
        g.nodes[c].attributes.fused_activation != Activation::None)
      continue;
    const std::string out = g.nodes[c].outputs[0];
    if (g.is_output(out)) continue;
    const std::vector<size_t> readers = g.readers_of(out);
    if (readers.size() == 1) {
      const Node& n = g.nodes[readers[0]];
      Attributes& a = g.nodes[c].attributes;
      if (n.op == Op::Clip) {
        if (!(n.attributes.clip_min <= n.attributes.clip_max) || !std::isfinite(n.attributes.clip_min) ||
            !std::isfinite(n.attributes.clip_max)) {
          say(fmt::format("{} not fused into {}: its bounds are not finite and ordered", n.name, g.nodes[c].name));
          continue;
        }
        a.fused_activation = Activation::Clip;
        a.clip_min = n.attributes.clip_min;
        a.clip_max = n.attributes.clip_max;
      } else if (n.op == Op::LeakyRelu) {
        if (!std::isfinite(n.attributes.alpha)) {
          say(fmt::format("{} not fused into {}: its slope is not finite", n.name, g.nodes[c].name));
          continue;
        }
        a.fused_activation = Activation::LeakyRelu;
        a.alpha = n.attributes.alpha;
      } else if (n.op == Op::HardSwish) {
        a.fused_activation = Activation::HardSwish;
      } else {
        continue;
      }
      g.nodes[c].outputs[0] = n.outputs[0];
      say(fmt::format("{} fused into {}'s epilogue", n.name, g.nodes[c].name));
      erase_node(g, readers[0], out, c);
      continue;
    }
    // SiLU: the Conv's output read by exactly a Sigmoid and a Mul of it with the Sigmoid.
    if (readers.size() != 2) continue;
    size_t sigmoid = readers[0], mul = readers[1];
    if (g.nodes[sigmoid].op != Op::Sigmoid) std::swap(sigmoid, mul);
    if (g.nodes[sigmoid].op != Op::Sigmoid || g.nodes[mul].op != Op::Mul) continue;
    const std::string gate = g.nodes[sigmoid].outputs[0];
    const std::vector<std::string>& product = g.nodes[mul].inputs;
    const bool silu = product.size() == 2 && ((product[0] == out && product[1] == gate) ||
                                              (product[0] == gate && product[1] == out));
    if (!silu || only_reader(g, gate) != static_cast<int>(mul)) continue;
    g.nodes[c].attributes.fused_activation = Activation::Silu;
    g.nodes[c].outputs[0] = g.nodes[mul].outputs[0];
    say(fmt::format("{} and {} (x * Sigmoid(x)) fused into {}'s epilogue", g.nodes[sigmoid].name, g.nodes[mul].name,
                    g.nodes[c].name));
    // Erase the later node first so the other index stays valid.
    const size_t first = std::min(sigmoid, mul), second = std::max(sigmoid, mul);
    erase_node(g, second, second == mul ? out : gate, c);
    erase_node(g, first, first == mul ? out : gate, c);
  }
}

}  // namespace

void fuse_for_inference(Graph& g, std::vector<std::string>* why) {
  fold_channel_permutations(g, why);
  lower_gemms_to_convs(g, why);
  fuse(g, {Op::BatchNormalization, Op::Relu}, why);
  fuse_residual_adds(g, why);
  fuse(g, {Op::Relu}, why);  // a Relu after a residual sum
  fuse_activations(g, why);
  write_concat_slices(g, why);  // last: the Convs' outputs are final
}

void fuse_for_training(Graph& g, std::vector<std::string>* why) { fuse(g, {Op::Relu}, why); }

}  // namespace convgen::model
