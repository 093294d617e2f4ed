#include "generator/model/concat_slices.h"

#include <algorithm>

#include <fmt/format.h>

namespace convgen::model {

namespace {

// "" when `value` can be written in place as input of Concat `concat`, else why not.
std::string refusal(const Graph& g, const std::string& value, size_t concat) {
  const int p = g.producer_of(value);
  if (p < 0 || g.nodes[p].op != Op::Conv) return fmt::format("input '{}' is not a Conv's output", value);
  if (!g.nodes[p].attributes.slice_of.empty()) return fmt::format("input '{}' is already a slice", value);
  const std::vector<size_t> readers = g.readers_of(value);
  if (readers.size() != 1 || readers[0] != concat || g.is_output(value))
    return fmt::format("input '{}' is read elsewhere too", value);
  if (std::count(g.nodes[concat].inputs.begin(), g.nodes[concat].inputs.end(), value) != 1)
    return fmt::format("input '{}' appears twice", value);
  return "";
}

}  // namespace

void write_concat_slices(Graph& g, std::vector<std::string>* why) {
  auto say = [&](const std::string& line) {
    if (why) why->push_back(line);
  };
  for (size_t c = 0; c < g.nodes.size(); ++c) {
    Node& concat = g.nodes[c];
    if (concat.op != Op::Concat) continue;
    const std::vector<int64_t>& shape = g.value(concat.outputs[0]).shape;
    if (shape.size() != 4 || concat.attributes.axis != 1 || !concat.attributes.indices.empty()) continue;
    std::string why_not;
    for (const std::string& in : concat.inputs)
      if (why_not.empty()) why_not = refusal(g, in, c);
    if (!why_not.empty()) {
      say(fmt::format("{} copies its inputs: {}", concat.name, why_not));
      continue;
    }
    int64_t channel = 0;
    for (const std::string& in : concat.inputs) {
      Attributes& a = g.nodes[static_cast<size_t>(g.producer_of(in))].attributes;
      a.slice_of = concat.outputs[0];
      a.slice_channel = channel;
      a.slice_channels_total = shape[1];
      channel += g.value(in).shape[1];
    }
    concat.attributes.written_in_place = true;
    say(fmt::format("{}: its {} Convs write their channels in place", concat.name, concat.inputs.size()));
  }
}

}  // namespace convgen::model
