// Parsing, printing and validation of ConvDescriptor. docs/descriptor.md is the
// grammar; every failure is a one-line convgen::Error naming the offending field.
#include "schedules/conv_descriptor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>

#include "schedules/errors.h"

namespace convgen {
namespace {

// Generated code indexes tensors with 32-bit integers, so every extent and element
// count must stay below 2^31.
constexpr int64_t kMaxIndex = (int64_t{1} << 31) - 1;
// Paddings are legal up to any size in principle; this bound only catches typos.
constexpr int64_t kPadLimit = int64_t{1} << 20;

[[noreturn]] void fail(std::string_view field, const std::string& what) {
  throw Error(ExitCode::Usage, fmt::format("bad descriptor: {}: {}", field, what));
}

// ---------------------------------------------------------------------------------
// validation

// Product of non-negative factors, saturating at INT64_MAX instead of overflowing.
int64_t saturating_product(std::initializer_list<int64_t> factors) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f != 0 && p > kMax / f) return kMax;
    p *= f;
  }
  return p;
}

void check_sizes(const ConvDescriptor& d) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"g", d.g},   {"mb", d.mb}, {"ic", d.ic}, {"ih", d.ih}, {"iw", d.iw}, {"oc", d.oc},
      {"kh", d.kh}, {"kw", d.kw}, {"sh", d.sh}, {"sw", d.sw}, {"dh", d.dh}, {"dw", d.dw}};
  for (const auto& [field, v] : sizes) {
    if (v < 1) fail(field, fmt::format("must be >= 1, got {}", v));
    if (v > kMaxIndex) fail(field, fmt::format("must be < 2^31, got {}", v));
  }
}

void check_paddings(const ConvDescriptor& d) {
  const std::pair<const char*, int64_t> pads[] = {
      {"pt", d.pt}, {"pb", d.pb}, {"pl", d.pl}, {"pr", d.pr}};
  for (const auto& [field, v] : pads) {
    if (v < 0) fail(field, fmt::format("must be >= 0, got {}", v));
    if (v >= kPadLimit) fail(field, fmt::format("must be < 2^20, got {}", v));
  }
}

void check_groups(const ConvDescriptor& d) {
  if (d.ic % d.g != 0) fail("ic", fmt::format("{} is not divisible by g = {}", d.ic, d.g));
  if (d.oc % d.g != 0) fail("oc", fmt::format("{} is not divisible by g = {}", d.oc, d.g));
}

// The output extent is at least 1 iff the dilated kernel fits in the padded input.
// Checked on the sum rather than via oh()/ow(), whose truncating division would
// round a negative numerator up to a bogus extent of 1.
void check_extent(const char* field, int64_t padded, int64_t k, int64_t dil) {
  const int64_t span = dil * (k - 1) + 1;
  if (padded < span)
    fail(field, fmt::format("output would be empty: the dilated kernel spans {} but the "
                            "padded input is {}", span, padded));
}

void check_tensor(const char* tensor, std::initializer_list<int64_t> dims) {
  const int64_t n = saturating_product(dims);
  if (n > kMaxIndex)
    fail(tensor, fmt::format("{} elements, must be < 2^31 for 32-bit indexing", n));
}

// ---------------------------------------------------------------------------------
// descriptor grammar

// Integer keys. Matching always takes the longest key that fits, so the table order
// does not matter and a future one-letter key cannot shadow a two-letter one.
constexpr std::array<std::string_view, 20> kKeys = {
    "g",  "mb", "ic", "ih", "iw", "oc", "oh", "ow", "kh", "kw",
    "sh", "sw", "ph", "pw", "pt", "pb", "pl", "pr", "dh", "dw"};
constexpr std::array<std::string_view, 8> kFlags = {"bias", "residual", "outstride", "relu", "clip", "leakyrelu", "hardswish", "silu"};

struct Tokens {
  std::map<std::string_view, int64_t> values;  // key -> number as written
  bool bias = false;
  bool residual = false;
  int64_t out_stride = 0;
  bool relu = false;
  Activation activation = Activation::None;
  float clip_lo = 0.0f, clip_hi = 0.0f, leaky_alpha = 0.0f;
  std::optional<std::string> name;

  bool has(std::string_view key) const { return values.count(key) != 0; }
  int64_t get(std::string_view key, int64_t fallback) const {
    auto it = values.find(key);
    return it == values.end() ? fallback : it->second;
  }
};

std::string_view longest_match(std::string_view rest, const std::string_view* begin,
                               const std::string_view* end) {
  std::string_view best;
  for (auto it = begin; it != end; ++it)
    if (it->size() > best.size() && rest.substr(0, it->size()) == *it) best = *it;
  return best;
}

// Splits the trimmed text into key/number pairs, +flags and n"name". Positions in
// messages are 1-based offsets into the caller's (untrimmed) text.
class Lexer {
 public:
  Lexer(std::string_view text, size_t begin, size_t end) : text_(text), pos_(begin), end_(end) {}

  Tokens run() {
    Tokens t;
    for (skip_underscores(); pos_ < end_; skip_underscores()) {
      if (text_[pos_] == '+')
        read_flag(t);
      else if (text_[pos_] == 'n')
        read_name(t);
      else
        read_pair(t);
    }
    return t;
  }

 private:
  std::string_view rest() const { return text_.substr(pos_, end_ - pos_); }

  void skip_underscores() {
    while (pos_ < end_ && text_[pos_] == '_') ++pos_;
  }

  // The text at `at`, shortened, to quote in a message.
  std::string excerpt(size_t at) const {
    constexpr size_t kShown = 16;
    std::string_view s = text_.substr(at, end_ - at);
    return s.size() <= kShown ? std::string(s) : std::string(s.substr(0, kShown)) + "...";
  }

  [[noreturn]] void fail_at(size_t at, std::string_view field, const std::string& what) const {
    if (at >= end_) fail(field, fmt::format("{} at end of text", what));
    fail(field, fmt::format("{} at position {} (\"{}\")", what, at + 1, excerpt(at)));
  }

  void read_flag(Tokens& t) {
    const size_t at = pos_++;
    const std::string_view flag = longest_match(rest(), kFlags.begin(), kFlags.end());
    if (flag.empty())
      fail_at(at, "flag", "unknown flag, expected +bias, +residual, +outstride(C), +relu, +clip(LO,HI), +leakyrelu(ALPHA), +hardswish or +silu");
    pos_ += flag.size();
    if (flag == "bias") {
      if (t.bias) fail_at(at, flag, "given twice");
      t.bias = true;
      return;
    }
    if (flag == "residual") {
      if (t.residual) fail_at(at, flag, "given twice");
      t.residual = true;
      return;
    }
    if (flag == "outstride") {
      if (t.out_stride) fail_at(at, flag, "given twice");
      if (pos_ >= end_ || text_[pos_] != '(') fail_at(at, flag, "expected (CHANNELS)");
      ++pos_;
      t.out_stride = read_number(flag);
      if (t.out_stride == 0) fail_at(at, flag, "needs CHANNELS >= 1");
      if (pos_ >= end_ || text_[pos_] != ')') fail_at(at, flag, "missing ')'");
      ++pos_;
      return;
    }
    if (t.relu || t.activation != Activation::None) fail_at(at, flag, "a second activation (one at most)");
    if (flag == "relu") {
      t.relu = true;
    } else if (flag == "clip") {
      t.activation = Activation::Clip;
      const std::vector<float> args = read_float_args(flag, 2);
      t.clip_lo = args[0];
      t.clip_hi = args[1];
      if (!(t.clip_lo <= t.clip_hi)) fail_at(at, flag, "needs LO <= HI");
    } else if (flag == "leakyrelu") {
      t.activation = Activation::LeakyRelu;
      t.leaky_alpha = read_float_args(flag, 1)[0];
    } else {
      t.activation = flag == "hardswish" ? Activation::HardSwish : Activation::Silu;
    }
  }

  // "(a,b,...)": exactly `count` finite floats.
  std::vector<float> read_float_args(std::string_view flag, size_t count) {
    const size_t at = pos_;
    if (pos_ >= end_ || text_[pos_] != '(') fail_at(at, flag, fmt::format("expected ({} number{})", count, count > 1 ? "s" : ""));
    const size_t close = text_.find(')', pos_);
    if (close == std::string_view::npos || close >= end_) fail_at(at, flag, "missing ')'");
    std::vector<float> args;
    std::string_view inside = text_.substr(pos_ + 1, close - pos_ - 1);
    for (size_t start = 0; start <= inside.size();) {
      size_t comma = inside.find(',', start);
      if (comma == std::string_view::npos) comma = inside.size();
      const std::string field(inside.substr(start, comma - start));
      char* parsed_end = nullptr;
      const float v = field.empty() ? 0.0f : std::strtof(field.c_str(), &parsed_end);
      if (field.empty() || parsed_end != field.c_str() + field.size() || !std::isfinite(v))
        fail_at(at, flag, fmt::format("\"{}\" is not a finite number", field));
      args.push_back(v);
      start = comma + 1;
    }
    if (args.size() != count) fail_at(at, flag, fmt::format("expected {} number{}, got {}", count, count > 1 ? "s" : "", args.size()));
    pos_ = close + 1;
    return args;
  }

  void read_name(Tokens& t) {
    const size_t at = pos_++;
    if (pos_ >= end_ || text_[pos_] != '"') fail_at(at, "name", "expected n\"...\"");
    const size_t close = text_.find('"', pos_ + 1);
    if (close == std::string_view::npos || close >= end_)
      fail_at(at, "name", "missing closing quote");
    if (t.name) fail_at(at, "name", "given twice");
    t.name = std::string(text_.substr(pos_ + 1, close - pos_ - 1));
    pos_ = close + 1;
  }

  void read_pair(Tokens& t) {
    const size_t at = pos_;
    const std::string_view key = longest_match(rest(), kKeys.begin(), kKeys.end());
    if (key.empty()) fail_at(at, "key", "unknown key");
    if (t.has(key)) fail_at(at, key, "given twice");
    pos_ += key.size();
    t.values[key] = read_number(key);
  }

  int64_t read_number(std::string_view key) {
    const size_t at = pos_;
    int64_t v = 0;
    while (pos_ < end_ && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = v * 10 + (text_[pos_++] - '0');
      if (v > kMaxIndex) fail_at(at, key, "number too large (must be < 2^31)");
    }
    if (pos_ == at) fail_at(at, key, "expected a number");
    return v;
  }

  std::string_view text_;
  size_t pos_;
  size_t end_;
};

// Applies benchdnn's defaults: square w from h, benchdnn dilation (d-1) to ONNX (d).
ConvDescriptor from_tokens(const Tokens& t) {
  for (const char* key : {"ic", "ih", "oc", "kh"})
    if (!t.has(key)) fail(key, "required key missing");
  ConvDescriptor d;
  d.name = t.name.value_or("");
  d.bias = t.bias;
  d.residual = t.residual;
  d.out_stride = t.out_stride;
  d.relu = t.relu;
  d.activation = t.activation;
  d.clip_lo = t.clip_lo;
  d.clip_hi = t.clip_hi;
  d.leaky_alpha = t.leaky_alpha;
  d.g = t.get("g", 1);
  d.mb = t.get("mb", 1);
  d.ic = t.get("ic", 0);
  d.oc = t.get("oc", 0);
  d.ih = t.get("ih", 0);
  d.iw = t.get("iw", d.ih);
  d.kh = t.get("kh", 0);
  d.kw = t.get("kw", d.kh);
  d.sh = t.get("sh", 1);
  d.sw = t.get("sw", d.sh);
  const int64_t dh = t.get("dh", 0);
  d.dh = dh + 1;
  d.dw = t.get("dw", dh) + 1;
  const int64_t ph = t.get("ph", 0);
  const int64_t pw = t.get("pw", ph);
  d.pt = t.get("pt", ph);
  d.pb = t.get("pb", ph);
  d.pl = t.get("pl", pw);
  d.pr = t.get("pr", pw);
  return d;
}

// ow mirrors oh only for a fully square descriptor: once any w-side key is written,
// copying oh would silently invent right padding for a non-square layer.
std::optional<int64_t> requested_ow(const Tokens& t) {
  if (t.has("ow")) return t.get("ow", 0);
  for (const char* key : {"iw", "kw", "sw", "pw", "dw", "pl", "pr"})
    if (t.has(key)) return std::nullopt;
  if (t.has("oh")) return t.get("oh", 0);
  return std::nullopt;
}

// benchdnn derives the far-side (bottom/right) padding from a requested output
// extent; an explicitly written far padding wins and the extent is only checked.
void derive_far_pad(const char* out_key, const char* far_key, bool far_given, int64_t want,
                    int64_t in, int64_t near, int64_t k, int64_t s, int64_t dil, int64_t& far) {
  if (far_given) return;
  far = (want - 1) * s + dil * (k - 1) + 1 - in - near;
  if (far < 0)
    fail(out_key, fmt::format("{} is unreachable: it would need {} = {}", want, far_key, far));
}

void check_requested(const char* out_key, std::optional<int64_t> want, int64_t got) {
  if (want && *want != got)
    fail(out_key, fmt::format("{} does not match the {} implied by the other keys", *want, got));
}

// ---------------------------------------------------------------------------------
// TSV layer rows

constexpr std::array<std::string_view, 15> kTsvColumns = {
    "name", "mb", "ic", "ih", "iw", "oc", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "g"};

std::vector<std::string> split_fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(f);
  return fields;
}

[[noreturn]] void fail_row(const std::string& where, const std::string& detail) {
  throw Error(ExitCode::Usage, fmt::format("{}: bad layer row: {}", where, detail));
}

int64_t parse_int(const std::string& field, std::string_view column, const std::string& where) {
  int64_t v = 0;
  const char* end = field.data() + field.size();
  const auto [p, ec] = std::from_chars(field.data(), end, v);
  if (ec != std::errc() || p != end)
    fail_row(where, fmt::format("column {}: \"{}\" is not an integer", column, field));
  return v;
}

bool is_blank_or_comment(const std::string& line) {
  const size_t first = line.find_first_not_of(" \t\r\n");
  return first == std::string::npos || line[first] == '#';
}

// The shared layer files start each table with a column-name row.
bool is_header(const std::string& line) {
  const auto fields = split_fields(line);
  return std::equal(fields.begin(), fields.end(), kTsvColumns.begin(), kTsvColumns.end());
}

}  // namespace

// ---------------------------------------------------------------------------------
// public API

double ConvDescriptor::flops() const {
  return 2.0 * static_cast<double>(mb) * static_cast<double>(oc) * static_cast<double>(icg()) *
         static_cast<double>(kh) * static_cast<double>(kw) * static_cast<double>(oh()) *
         static_cast<double>(ow());
}

int64_t ConvDescriptor::im2col_bytes() const {
  // Saturates: valid descriptors bound each factor group below 2^31 but not the product.
  return saturating_product({mb, oh(), ow(), icg(), kh, kw, g, int64_t{sizeof(float)}});
}

std::string ConvDescriptor::normalised() const {
  // oh()/ow() divide by the strides; refuse rather than trap on an invalid descriptor.
  if (sh < 1) fail("sh", fmt::format("must be >= 1, got {}", sh));
  if (sw < 1) fail("sw", fmt::format("must be >= 1, got {}", sw));
  std::string s = fmt::format(
      "g{}mb{}ic{}ih{}iw{}oc{}oh{}ow{}kh{}kw{}sh{}sw{}pt{}pb{}pl{}pr{}dh{}dw{}", g, mb, ic, ih,
      iw, oc, oh(), ow(), kh, kw, sh, sw, pt, pb, pl, pr, dh - 1, dw - 1);
  if (bias) s += "+bias";
  if (residual) s += "+residual";
  if (relu) s += "+relu";
  const std::string act = activation_flag(*this);
  if (!act.empty()) s += "+" + act;
  if (out_stride > 0 && out_stride != oc) s += fmt::format("+outstride({})", out_stride);
  return s;
}

bool activation_is_exact(const ConvDescriptor& d) {
  return d.activation != Activation::HardSwish && d.activation != Activation::Silu;
}

double inexact_activation_bound(double want) { return 8.0 * 0x1p-23 * std::fabs(want) + 1e-30; }

std::string activation_flag(const ConvDescriptor& d) {
  switch (d.activation) {
    case Activation::None: return "";
    case Activation::Clip: return fmt::format("clip({},{})", d.clip_lo, d.clip_hi);
    case Activation::LeakyRelu: return fmt::format("leakyrelu({})", d.leaky_alpha);
    case Activation::HardSwish: return "hardswish";
    case Activation::Silu: return "silu";
  }
  return "";
}

std::string inference_only_flags(const ConvDescriptor& d) {
  const std::string act = activation_flag(d);
  return std::string(d.residual ? "+residual" : "") + (d.activation != Activation::None ? "+" + act : "") +
         (d.out_stride > 0 && d.out_stride != d.oc ? fmt::format("+outstride({})", d.out_stride) : "");
}

std::string ConvDescriptor::to_string() const {
  if (name.find('"') != std::string::npos) fail("name", "must not contain '\"'");
  return name.empty() ? normalised() : fmt::format("{}n\"{}\"", normalised(), name);
}

void validate(const ConvDescriptor& d) {
  if (d.name.find('"') != std::string::npos) fail("name", "must not contain '\"'");
  if (d.relu && d.activation != Activation::None) fail("relu", "a second activation (one at most)");
  if (d.activation == Activation::Clip && !(std::isfinite(d.clip_lo) && std::isfinite(d.clip_hi)))
    fail("clip", "needs finite bounds");
  if (d.activation == Activation::Clip && !(d.clip_lo <= d.clip_hi)) fail("clip", "needs LO <= HI");
  if (d.activation == Activation::LeakyRelu && !std::isfinite(d.leaky_alpha)) fail("leakyrelu", "needs a finite slope");
  if (d.out_stride < 0 || (d.out_stride > 0 && d.out_stride < d.oc))
    fail("outstride", fmt::format("{} channels cannot hold the layer's {} output channels", d.out_stride, d.oc));
  check_sizes(d);
  check_paddings(d);
  check_groups(d);
  check_extent("oh", d.ih + d.pt + d.pb, d.kh, d.dh);
  check_extent("ow", d.iw + d.pl + d.pr, d.kw, d.dw);
  check_tensor("input tensor", {d.mb, d.ic, d.ih, d.iw});
  check_tensor("output tensor", {d.mb, d.out_pixel_stride(), d.oh(), d.ow()});
  check_tensor("weights tensor", {d.oc, d.icg(), d.kh, d.kw});
  check_tensor("padded input tensor", {d.mb, d.ic, d.ih + d.pt + d.pb, d.iw + d.pl + d.pr});
}

ConvDescriptor parse_descriptor(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) fail("descriptor", "empty");
  const size_t end = text.find_last_not_of(" \t\r\n") + 1;
  const Tokens t = Lexer(text, begin, end).run();

  ConvDescriptor d = from_tokens(t);
  check_sizes(d);  // the derivations below divide by strides and multiply extents
  const std::optional<int64_t> oh = t.has("oh") ? std::optional(t.get("oh", 0)) : std::nullopt;
  const std::optional<int64_t> ow = requested_ow(t);
  if (oh) derive_far_pad("oh", "pb", t.has("pb"), *oh, d.ih, d.pt, d.kh, d.sh, d.dh, d.pb);
  if (ow) derive_far_pad("ow", "pr", t.has("pr"), *ow, d.iw, d.pl, d.kw, d.sw, d.dw, d.pr);
  validate(d);
  check_requested("oh", oh, d.oh());
  check_requested("ow", ow, d.ow());
  return d;
}

ConvDescriptor parse_tsv_row(const std::string& line, const std::string& where) {
  const std::vector<std::string> f = split_fields(line);
  if (f.size() != kTsvColumns.size())
    fail_row(where, fmt::format("expected {} columns ({}), got {}", kTsvColumns.size(),
                                fmt::join(kTsvColumns, " "), f.size()));
  std::array<int64_t, kTsvColumns.size()> v{};
  for (size_t i = 1; i < f.size(); ++i) v[i] = parse_int(f[i], kTsvColumns[i], where);

  ConvDescriptor d;
  d.name = f[0];
  d.mb = v[1], d.ic = v[2], d.ih = v[3], d.iw = v[4], d.oc = v[5];
  d.kh = v[6], d.kw = v[7], d.sh = v[8], d.sw = v[9];
  d.pt = d.pb = v[10];
  d.pl = d.pr = v[11];
  d.dh = v[12], d.dw = v[13], d.g = v[14];
  try {
    validate(d);
  } catch (const Error& e) {
    throw Error(e.code(), fmt::format("{}: {}", where, e.what()));  // say which row
  }
  return d;
}

std::vector<ConvDescriptor> read_layer_set(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(ExitCode::Io, fmt::format("{}: cannot read", path));
  std::vector<ConvDescriptor> layers;
  std::string line;
  for (int lineno = 1; std::getline(in, line); ++lineno) {
    if (is_blank_or_comment(line) || is_header(line)) continue;
    layers.push_back(parse_tsv_row(line, fmt::format("{}:{}", path, lineno)));
  }
  if (in.bad()) throw Error(ExitCode::Io, fmt::format("{}: cannot read", path));
  return layers;
}

}  // namespace convgen
