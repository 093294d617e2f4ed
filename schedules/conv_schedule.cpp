// ConvSchedule as data: equality, names of enum values, target facts, the legal value
// space and validation. The analytic default lives in analytic_default.cpp.
#include "schedules/conv_schedule.h"

#include <fmt/format.h>

#include <cstddef>
#include <sstream>

#include "schedules/errors.h"
#include "schedules/schedule_records.h"

namespace convgen {
namespace {

// Each enum's names, in declaration order. to_string, from_string and schedule_space
// all read these tables, so adding a value is one line here.
template <typename E>
struct Named {
  E value;
  const char* name;
};

constexpr Named<Strategy> kStrategyNames[] = {{Strategy::Gemm, "gemm"},
                                              {Strategy::Depthwise, "depthwise"},
                                              {Strategy::Grouped, "grouped"},
                                              {Strategy::GemmInputLanes, "gemm_input_lanes"}};
constexpr Named<Layout> kLayoutNames[] = {{Layout::Nhwc, "nhwc"}};
constexpr Named<PackInput> kPackInputNames[] = {
    {PackInput::None, "none"}, {PackInput::Image, "image"}, {PackInput::Rows, "rows"}, {PackInput::Panel, "panel"}};
constexpr Named<PackWeights> kPackWeightsNames[] = {{PackWeights::PerCall, "per_call"},
                                                          {PackWeights::Prepacked, "prepacked"}};
constexpr Named<LoopOrder> kLoopOrderNames[] = {{LoopOrder::PixelsOuter, "pixels_outer"},
                                                {LoopOrder::ChannelsOuter, "channels_outer"}};
constexpr Named<Parallel> kParallelNames[] = {
    {Parallel::None, "none"}, {Parallel::Pixels, "pixels"}, {Parallel::Images, "images"}, {Parallel::Channels, "channels"}};
constexpr Named<OutputStores> kOutputStoresNames[] = {{OutputStores::Cached, "cached"},
                                                      {OutputStores::Streaming, "streaming"}};

template <typename E, std::size_t N>
std::string name_of(const Named<E> (&table)[N], E v) {
  for (const auto& row : table) {
    if (row.value == v) return row.name;
  }
  // Only reachable through a cast of an out-of-range integer: a bug in the caller.
  throw Error(ExitCode::Internal, fmt::format("schedule: enum value {} has no name", static_cast<int>(v)));
}

template <typename E, std::size_t N>
bool value_of(const Named<E> (&table)[N], const std::string& name, E* out) {
  for (const auto& row : table) {
    if (name == row.name) {
      *out = row.value;
      return true;
    }
  }
  return false;
}

template <typename E, std::size_t N>
std::vector<E> all_values(const Named<E> (&table)[N]) {
  std::vector<E> values;
  for (const auto& row : table) values.push_back(row.value);
  return values;
}

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * KiB;

// Target facts keyed by the instruction-set features of the Halide target string. The
// first row whose features are all present wins; the last row matches everything.
struct TargetRow {
  const char* features;  // '-'-separated feature names, all required; "x*" = prefix x
  int vector_floats;
  int vector_registers;
  int64_t l1_bytes, l2_bytes, l3_bytes;
};

constexpr TargetRow kTargetRows[] = {
    // AVX-512 (Skylake-X / Ice Lake server class). Skylake-X has a 32 KiB L1d and 1 MiB
    // L2 per core; Ice Lake's 48 KiB L1d is not assumed so KC/MC stay safe on both.
    // 16 MiB L3 is a mid-range part's shared L3.
    {"avx512*", 16, 32, 32 * KiB, 1 * MiB, 16 * MiB},
    // AVX2+FMA: AMD Zen 3 (the build's default target machine), L3 per 8-core CCX.
    {"avx2", 8, 16, 32 * KiB, 512 * KiB, 32 * MiB},
    {"avx-fma", 8, 16, 32 * KiB, 512 * KiB, 32 * MiB},
    // SSE baseline: any x86-64; conservative caches since the CPU is unknown.
    {"", 4, 16, 32 * KiB, 256 * KiB, 8 * MiB},
};

constexpr const char* kDefaultTarget = "x86-64-linux-avx-avx2-f16c-fma-sse41";
constexpr const char* kX86Prefix = "x86-64-";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

bool has_feature(const std::vector<std::string>& tokens, const std::string& feature) {
  const bool prefix = !feature.empty() && feature.back() == '*';
  const std::string stem = prefix ? feature.substr(0, feature.size() - 1) : feature;
  for (const auto& t : tokens) {
    if (prefix ? t.compare(0, stem.size(), stem) == 0 : t == stem) return true;
  }
  return false;
}

bool row_matches(const TargetRow& row, const std::vector<std::string>& tokens) {
  for (const auto& feature : split(row.features, '-')) {
    if (!has_feature(tokens, feature)) return false;
  }
  return true;
}

[[noreturn]] void invalid(const std::string& field, const std::string& what) {
  throw Error(ExitCode::BadRecord, fmt::format("schedule: {}: {}", field, what));
}

void require_non_negative(const std::string& field, int v) {
  if (v < 0) invalid(field, fmt::format("{} must be >= 0", v));
}

}  // namespace

bool ConvSchedule::operator==(const ConvSchedule& o) const {
  return strategy == o.strategy && mr == o.mr && nr == o.nr && kc == o.kc && mc == o.mc &&
         nc == o.nc && layout == o.layout && pack_input == o.pack_input &&
         pack_weights == o.pack_weights && loop_order == o.loop_order && parallel == o.parallel &&
         partitions == o.partitions && output_stores == o.output_stores;
}

std::string to_string(Strategy v) { return name_of(kStrategyNames, v); }
std::string to_string(Layout v) { return name_of(kLayoutNames, v); }
std::string to_string(PackInput v) { return name_of(kPackInputNames, v); }
std::string to_string(PackWeights v) { return name_of(kPackWeightsNames, v); }
std::string to_string(LoopOrder v) { return name_of(kLoopOrderNames, v); }
std::string to_string(Parallel v) { return name_of(kParallelNames, v); }
std::string to_string(OutputStores v) { return name_of(kOutputStoresNames, v); }

bool from_string(const std::string& name, Strategy* out) { return value_of(kStrategyNames, name, out); }
bool from_string(const std::string& name, Layout* out) { return value_of(kLayoutNames, name, out); }
bool from_string(const std::string& name, PackInput* out) { return value_of(kPackInputNames, name, out); }
bool from_string(const std::string& name, PackWeights* out) { return value_of(kPackWeightsNames, name, out); }
bool from_string(const std::string& name, LoopOrder* out) { return value_of(kLoopOrderNames, name, out); }
bool from_string(const std::string& name, Parallel* out) { return value_of(kParallelNames, name, out); }
bool from_string(const std::string& name, OutputStores* out) { return value_of(kOutputStoresNames, name, out); }

std::string describe(const ConvSchedule& s) {
  return fmt::format(
      "{} mr={} nr={} kc={} mc={} nc={} layout={} pack_input={} pack_weights={} loop_order={} "
      "parallel={} partitions={} output_stores={}",
      to_string(s.strategy), s.mr, s.nr, s.kc, s.mc, s.nc, to_string(s.layout),
      to_string(s.pack_input), to_string(s.pack_weights), to_string(s.loop_order),
      to_string(s.parallel), s.partitions, to_string(s.output_stores));
}

TargetInfo default_target() { return target_info(kDefaultTarget); }

std::string host_target_string() {
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd"))
    return "x86-64-linux-avx-avx2-avx512-avx512_skylake-f16c-fma-sse41";
  if (avx2) return kDefaultTarget;
  if (__builtin_cpu_supports("sse4.1")) return "x86-64-linux-sse41";
  return "x86-64-linux";
}

TargetInfo target_info(const std::string& target_string) {
  if (target_string == "host") return target_info(host_target_string());
  if (target_string.compare(0, std::char_traits<char>::length(kX86Prefix), kX86Prefix) != 0) {
    throw Error(ExitCode::Unsupported,
                fmt::format("target: \"{}\": only x86-64 targets are supported", target_string));
  }
  const auto tokens = split(target_string, '-');
  for (const auto& row : kTargetRows) {
    if (!row_matches(row, tokens)) continue;
    TargetInfo t;
    t.target = target_string;
    t.vector_floats = row.vector_floats;
    t.vector_registers = row.vector_registers;
    t.l1_bytes = row.l1_bytes;
    t.l2_bytes = row.l2_bytes;
    t.l3_bytes = row.l3_bytes;
    return t;
  }
  throw Error(ExitCode::Internal, "target: the target table has no fallback row");
}

std::vector<int> wide_pixel_tiles(const TargetInfo& t) {
  if (t.vector_registers < 32) return {};
  return {10, 12, 14, ConvSchedule::kMaxNr};
}

ScheduleSpace schedule_space(const TargetInfo& t) {
  ScheduleSpace space;
  space.strategy = all_values(kStrategyNames);
  for (int vectors = 1; vectors <= 4; ++vectors) space.mr.push_back(vectors * t.vector_floats);
  space.nr = {1, 2, 3, 4, 5, 6, 8, 9};  // 9: a 3x3 window as one backward-weights tile
  // The analytic default takes 2 x 14 of them (analytic_default.cpp).
  const std::vector<int> wide = wide_pixel_tiles(t);
  space.nr.insert(space.nr.end(), wide.begin(), wide.end());
  space.kc = {0, 8, 24, 64};
  space.mc = {0, 48, 96};
  space.nc = {0, 8, 30, 96};
  space.layout = all_values(kLayoutNames);
  space.pack_input = all_values(kPackInputNames);
  space.pack_weights = all_values(kPackWeightsNames);
  space.loop_order = all_values(kLoopOrderNames);
  space.parallel = all_values(kParallelNames);
  space.partitions = {1, 2, 4, 8};
  space.output_stores = all_values(kOutputStoresNames);
  return space;
}

void validate(const ConvSchedule& s, const TargetInfo& t) {
  const int vf = t.vector_floats;
  if (s.mr <= 0) invalid("mr", fmt::format("{} must be positive", s.mr));
  if (s.mr % vf != 0) {
    invalid("mr", fmt::format("{} is not a multiple of the vector width {} of {}", s.mr, vf, t.target));
  }
  // Capped at 4 vectors, the widest tile schedule_space offers (register pressure).
  if (s.mr > 4 * vf) {
    invalid("mr", fmt::format("{} exceeds 4 vectors ({}) on {}", s.mr, 4 * vf, t.target));
  }
  if (s.nr < 1 || s.nr > ConvSchedule::kMaxNr)
    invalid("nr", fmt::format("{} is outside 1..{}", s.nr, ConvSchedule::kMaxNr));
  // MC and NC need not be multiples of MR/NR: the generator rounds them up.
  require_non_negative("kc", s.kc);
  require_non_negative("mc", s.mc);
  require_non_negative("nc", s.nc);
  if (s.partitions < 1 || s.partitions > 64) invalid("partitions", fmt::format("{} is outside 1..64", s.partitions));
}

void validate_forward_strategy(const ConvSchedule& s) {
  if (s.strategy == Strategy::GemmInputLanes)
    throw Error(ExitCode::Usage,
                "schedule: strategy gemm_input_lanes is a backward-weights tile (unpadded 1x1 layers); the forward "
                "and backward-data passes take gemm, depthwise or grouped");
}

namespace {

template <typename E>
void set_enum(const std::string& field, const std::string& value, E* out) {
  if (!from_string(value, out)) throw Error(ExitCode::Usage, fmt::format("schedule: {}: unknown value '{}'", field, value));
}

int parse_int_field(const std::string& field, const std::string& value) {
  try {
    size_t used = 0;
    const int v = std::stoi(value, &used);
    if (used == value.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(ExitCode::Usage, fmt::format("schedule: {}: '{}' is not an integer", field, value));
}

}  // namespace

void apply_schedule_overrides(const std::string& text, ConvSchedule* s) {
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    const size_t eq = word.find('=');
    if (eq == std::string::npos) {
      set_enum("strategy", word, &s->strategy);
      continue;
    }
    const std::string field = word.substr(0, eq), value = word.substr(eq + 1);
    if (field == "strategy") set_enum(field, value, &s->strategy);
    else if (field == "mr") s->mr = parse_int_field(field, value);
    else if (field == "nr") s->nr = parse_int_field(field, value);
    else if (field == "kc") s->kc = parse_int_field(field, value);
    else if (field == "mc") s->mc = parse_int_field(field, value);
    else if (field == "nc") s->nc = parse_int_field(field, value);
    else if (field == "layout") set_enum(field, value, &s->layout);
    else if (field == "pack_input") set_enum(field, value, &s->pack_input);
    else if (field == "pack_weights") set_enum(field, value, &s->pack_weights);
    else if (field == "loop_order") set_enum(field, value, &s->loop_order);
    else if (field == "parallel") set_enum(field, value, &s->parallel);
    else if (field == "partitions") s->partitions = parse_int_field(field, value);
    else if (field == "output_stores") set_enum(field, value, &s->output_stores);
    else throw Error(ExitCode::Usage, fmt::format("schedule: unknown field '{}'", field));
  }
}

}  // namespace convgen
