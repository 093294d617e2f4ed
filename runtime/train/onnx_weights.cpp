#include "runtime/train/onnx_weights.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "schedules/errors.h"

namespace convgen {

namespace {

// ONNX field numbers (onnx.proto3): ModelProto.graph = 7, GraphProto.initializer = 5;
// TensorProto: dims = 1, data_type = 2, float_data = 4, name = 8, raw_data = 9,
// data_location = 14 (1 = EXTERNAL). TensorProto.DataType FLOAT = 1.
constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5;
constexpr uint32_t kDims = 1, kDataType = 2, kFloatData = 4, kName = 8, kRawData = 9, kDataLocation = 14;

// A protobuf message's bytes, read field by field.
class Reader {
 public:
  Reader(const char* begin, const char* end, const std::string& path) : p_(begin), end_(end), path_(path) {}
  bool done() const { return p_ >= end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) bad("truncated varint");
      const uint8_t b = static_cast<uint8_t>(*p_++);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad("varint too long");
  }
  // The next field's number and wire type.
  void tag(uint32_t* field, uint32_t* wire) {
    const uint64_t t = varint();
    *field = static_cast<uint32_t>(t >> 3);
    *wire = static_cast<uint32_t>(t & 7);
  }
  Reader bytes() {
    const uint64_t n = varint();
    if (n > uint64_t(end_ - p_)) bad("truncated field");
    Reader r(p_, p_ + n, path_);
    p_ += n;
    return r;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1: advance(8); return;
      case 2: bytes(); return;
      case 5: advance(4); return;
      default: bad("unknown wire type " + std::to_string(wire));
    }
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) bad("truncated fixed32");
    uint32_t v;
    std::memcpy(&v, p_, 4);  // little-endian on x86-64, as protobuf stores it
    p_ += 4;
    return v;
  }
  const char* begin() const { return p_; }
  size_t size() const { return size_t(end_ - p_); }
  [[noreturn]] void bad(const std::string& what) const {
    throw Error(ExitCode::BadData, path_ + ": not a valid ONNX model (" + what + ")");
  }

 private:
  void advance(size_t n) {
    if (size_t(end_ - p_) < n) bad("truncated field");
    p_ += n;
  }
  const char* p_;
  const char* end_;
  const std::string& path_;
};

float as_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void read_tensor(Reader r, const std::string& path, std::map<std::string, OnnxInitializer>* out) {
  OnnxInitializer t;
  std::string name;
  int64_t type = 0;
  bool external = false, has_raw = false;
  std::string raw;
  while (!r.done()) {
    uint32_t field, wire;
    r.tag(&field, &wire);
    if (field == kDims && wire == 0) {
      t.shape.push_back(static_cast<int64_t>(r.varint()));
    } else if (field == kDims && wire == 2) {
      Reader packed = r.bytes();
      while (!packed.done()) t.shape.push_back(static_cast<int64_t>(packed.varint()));
    } else if (field == kDataType && wire == 0) {
      type = static_cast<int64_t>(r.varint());
    } else if (field == kFloatData && wire == 5) {
      t.data.push_back(as_float(r.fixed32()));
    } else if (field == kFloatData && wire == 2) {
      Reader packed = r.bytes();
      while (!packed.done()) t.data.push_back(as_float(packed.fixed32()));
    } else if (field == kName && wire == 2) {
      Reader s = r.bytes();
      name.assign(s.begin(), s.size());
    } else if (field == kRawData && wire == 2) {
      Reader s = r.bytes();
      raw.assign(s.begin(), s.size());
      has_raw = true;
    } else if (field == kDataLocation && wire == 0) {
      external = r.varint() == 1;
    } else {
      r.skip(wire);
    }
  }
  if (type != 1) return;  // float32 only
  if (external)
    throw Error(ExitCode::Unsupported, path + ": initializer '" + name + "': data stored in an external file");
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) throw Error(ExitCode::BadData, path + ": initializer '" + name + "': negative dimension");
    n *= d;
  }
  if (has_raw) {
    if (int64_t(raw.size()) != n * 4)
      throw Error(ExitCode::BadData, path + ": initializer '" + name + "': " + std::to_string(raw.size()) +
                                         " bytes of data for " + std::to_string(n) + " floats");
    t.data.resize(static_cast<size_t>(n));
    if (n > 0) std::memcpy(t.data.data(), raw.data(), raw.size());
  } else if (int64_t(t.data.size()) != n) {
    throw Error(ExitCode::BadData, path + ": initializer '" + name + "': " + std::to_string(t.data.size()) +
                                       " floats for " + std::to_string(n) + " elements");
  }
  (*out)[name] = std::move(t);
}

}  // namespace

std::map<std::string, OnnxInitializer> read_onnx_initializers(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ExitCode::Io, path + ": cannot read");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = buffer.str();
  std::map<std::string, OnnxInitializer> out;
  Reader model(bytes.data(), bytes.data() + bytes.size(), path);
  bool graph_seen = false;
  while (!model.done()) {
    uint32_t field, wire;
    model.tag(&field, &wire);
    if (field != kModelGraph || wire != 2) {
      model.skip(wire);
      continue;
    }
    graph_seen = true;
    Reader graph = model.bytes();
    while (!graph.done()) {
      uint32_t gf, gw;
      graph.tag(&gf, &gw);
      if (gf == kGraphInitializer && gw == 2)
        read_tensor(graph.bytes(), path, &out);
      else
        graph.skip(gw);
    }
  }
  if (!graph_seen) model.bad("no graph");
  return out;
}

}  // namespace convgen
