#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "schedules/durable_file.h"
#include "schedules/errors.h"

namespace convgen::train {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kMagic[8] = {'C', 'G', 'C', 'K', 'P', 'T', '\0', '\0'};
constexpr const char* kFileName = "checkpoint.cgck";
// magic, version, reserved, H
constexpr uint64_t kPrefixBytes = 8 + 4 + 4 + 8;

bool valid_kind(const std::string& kind) { return kind == "value" || kind == "momentum" || kind == "state"; }

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08" PRIx32, v);
  return text;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
  return text + "]";
}

// Elements of a shape; false for a negative extent or a product above `limit`.
bool shape_elements(const std::vector<int64_t>& shape, uint64_t limit, uint64_t* elements) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  }
  if (n > limit) return false;
  *elements = n;
  return true;
}

// ---- little-endian encoding ----

void put_u32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_u64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const std::string& in, uint64_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

uint64_t get_u64(const std::string& in, uint64_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + i])) << (8 * i);
  return v;
}

// Appends the float32 data as little-endian bit patterns.
void put_floats(std::string* out, const std::vector<float>& data) {
  const size_t at = out->size();
  out->resize(at + data.size() * 4);
  char* p = &(*out)[at];
  for (float f : data) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int i = 0; i < 4; ++i) *p++ = static_cast<char>((bits >> (8 * i)) & 0xff);
  }
}

void get_floats(const std::string& in, uint64_t at, uint64_t count, std::vector<float>* data) {
  data->resize(count);
  for (uint64_t k = 0; k < count; ++k) {
    const uint32_t bits = get_u32(in, at + 4 * k);
    std::memcpy(&(*data)[k], &bits, 4);
  }
}

std::string lr_bits_text(double lr) {
  uint64_t bits;
  std::memcpy(&bits, &lr, 8);
  char text[24];
  std::snprintf(text, sizeof text, "%016" PRIx64, bits);
  return text;
}

bool parse_lr_bits(const std::string& text, double* lr) {
  if (text.size() != 16) return false;
  uint64_t bits = 0;
  for (char ch : text) {
    int digit;
    if (ch >= '0' && ch <= '9') digit = ch - '0';
    else if (ch >= 'a' && ch <= 'f') digit = ch - 'a' + 10;
    else return false;
    bits = (bits << 4) | static_cast<uint64_t>(digit);
  }
  std::memcpy(lr, &bits, 8);
  return true;
}

// ---- writing ----

// nlohmann's dump() refuses invalid UTF-8; say which field it is.
void require_utf8(const std::string& path, const std::string& field, const std::string& text) {
  try {
    (void)json(text).dump();
  } catch (const json::exception&) {
    throw Error(ExitCode::Unsupported, path + ": cannot save a checkpoint: " + field + " is not valid UTF-8");
  }
}

// ---- reading ----

Error bad_data(const std::string& path, const std::string& what) {
  return Error(ExitCode::BadData, path + ": " + what);
}

std::string read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw bad_data(path, std::string("cannot read the checkpoint: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw bad_data(path, std::string("cannot read the checkpoint: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw bad_data(path, "cannot read the checkpoint: not a regular file");
  }
  std::string bytes;
  bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw bad_data(path, std::string("cannot read the checkpoint: ") + std::strerror(err));
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return bytes;
}

std::string one_line(std::string text) {
  for (char& ch : text)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return text;
}

// Typed access to the header JSON; every fault is a BadData error naming the field.
class HeaderReader {
 public:
  explicit HeaderReader(std::string path) : path_(std::move(path)) {}

  const json& field(const json& object, const std::string& key, const std::string& where) const {
    auto it = object.find(key);
    if (it == object.end()) throw bad(where + "'" + key + "' is missing");
    return *it;
  }
  std::string string_field(const json& object, const std::string& key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_string()) throw bad(where + "'" + key + "' is not a string");
    return v.get<std::string>();
  }
  int64_t int64_field(const json& object, const std::string& key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
      throw bad(where + "'" + key + "' is not a 64-bit integer");
    return v.get<int64_t>();
  }
  uint64_t uint64_field(const json& object, const std::string& key, const std::string& where = "") const {
    const json& v = field(object, key, where);
    if (!v.is_number_unsigned()) throw bad(where + "'" + key + "' is not an unsigned 64-bit integer");
    return v.get<uint64_t>();
  }
  Error bad(const std::string& what) const { return bad_data(path_, "bad checkpoint header: " + what); }

 private:
  std::string path_;
};

}  // namespace

uint32_t crc32_of(const void* data, size_t bytes, uint32_t start) {
  // zlib returns its initial value, not `start`, for a null buffer: skip empty input.
  const Bytef* p = static_cast<const Bytef*>(data);
  uLong crc = start;
  while (bytes > 0) {
    const size_t chunk = bytes < (size_t{1} << 30) ? bytes : (size_t{1} << 30);
    crc = ::crc32(crc, p, static_cast<uInt>(chunk));
    p += chunk;
    bytes -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string checkpoint_path(const std::string& dir) { return (fs::path(dir) / kFileName).string(); }

void save_checkpoint(const std::string& dir, const Checkpoint& c) {
  const std::string path = checkpoint_path(dir);

  // The tensors must be readable back: a fault here is a bug of the caller.
  std::set<std::pair<std::string, std::string>> seen;
  for (const CheckpointTensor& t : c.tensors) {
    const std::string what = path + ": cannot save a checkpoint: tensor '" + t.name + "' (" + t.kind + ")";
    if (!valid_kind(t.kind)) throw Error(ExitCode::Internal, what + " has an unknown kind");
    uint64_t elements = 0;
    if (!shape_elements(t.shape, UINT64_MAX / 4, &elements) || elements != t.data.size())
      throw Error(ExitCode::Internal, what + ": shape " + shape_text(t.shape) + " does not match its " +
                                          std::to_string(t.data.size()) + " values");
    if (!seen.insert({t.name, t.kind}).second) throw Error(ExitCode::Internal, what + " appears twice");
  }
  require_utf8(path, "model_sha256", c.model_sha256);
  require_utf8(path, "options_hash", c.options_hash);
  require_utf8(path, "options_text", c.options_text);
  for (const auto& [key, value] : c.extra) {
    require_utf8(path, "an extra key", key);
    require_utf8(path, "extra '" + key + "'", value);
  }
  for (const CheckpointTensor& t : c.tensors) require_utf8(path, "a tensor name", t.name);

  // The payload, and the tensor directory pointing into it.
  std::string payload;
  size_t payload_bytes = 0;
  for (const CheckpointTensor& t : c.tensors) payload_bytes += t.data.size() * 4;
  payload.reserve(payload_bytes);
  json tensors = json::array();
  for (const CheckpointTensor& t : c.tensors) {
    const uint64_t offset = payload.size();
    put_floats(&payload, t.data);
    const uint64_t bytes = payload.size() - offset;
    tensors.push_back({{"name", t.name},
                       {"kind", t.kind},
                       {"shape", t.shape},
                       {"offset", offset},
                       {"bytes", bytes},
                       {"crc32", crc32_of(payload.data() + offset, bytes)}});
  }
  json extra = json::object();
  for (const auto& [key, value] : c.extra) extra[key] = value;
  const json header = {{"model_sha256", c.model_sha256},
                       {"options_hash", c.options_hash},
                       {"options_text", c.options_text},
                       {"step", c.step},
                       {"epoch", c.epoch},
                       {"position", c.position},
                       {"seed", c.seed},
                       {"lr_bits", lr_bits_text(c.lr)},
                       {"extra", extra},
                       {"tensors", tensors}};
  const std::string header_text = header.dump();

  std::string file;
  file.reserve(kPrefixBytes + header_text.size() + 8 + payload.size() + 4);
  file.append(kMagic, 8);
  put_u32(&file, Checkpoint::kVersion);
  put_u32(&file, 0);
  put_u64(&file, header_text.size());
  file += header_text;
  put_u64(&file, payload.size());
  file += payload;
  put_u32(&file, crc32_of(file.data(), file.size()));

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(ExitCode::Io, dir + ": cannot create the checkpoint directory: " + ec.message());
  if (!fs::is_directory(dir, ec))
    throw Error(ExitCode::Io, dir + ": cannot create the checkpoint directory: " +
                                  (ec ? ec.message() : std::string("it exists and is not a directory")));
  // Temporary .checkpoint.cgck.tmp.PID beside it; loading ignores one left by a crash.
  write_file_durably(path, file);
}

Checkpoint load_checkpoint(const std::string& dir) {
  const std::string path = checkpoint_path(dir);
  return parse_checkpoint(read_whole_file(path), path);
}

std::string read_checkpoint_file(const std::string& dir) { return read_whole_file(checkpoint_path(dir)); }

Checkpoint parse_checkpoint(const std::string& in, const std::string& path) {
  const uint64_t size = in.size();
  auto truncated = [&](uint64_t needed) {
    return bad_data(path, "truncated (" + std::to_string(size) + " bytes, expected " +
                              (needed == 0 ? std::string("more") : std::to_string(needed)) + ")");
  };

  // Magic and version first: a later version may lay out the rest differently.
  if (size < 8) {
    if (std::memcmp(in.data(), kMagic, size) == 0) throw truncated(0);
    throw bad_data(path, "not a convgen checkpoint (bad magic)");
  }
  if (std::memcmp(in.data(), kMagic, 8) != 0) throw bad_data(path, "not a convgen checkpoint (bad magic)");
  if (size < 12) throw truncated(0);
  const uint32_t version = get_u32(in, 8);
  if (version != Checkpoint::kVersion)
    throw bad_data(path, "checkpoint version " + std::to_string(version) + " is not supported (this convgen reads " +
                             std::to_string(Checkpoint::kVersion) + ")");

  // Sizes: prefix, H bytes of JSON, u64 P, P bytes of payload, u32 CRC.
  if (size < kPrefixBytes) throw truncated(0);
  const uint64_t header_bytes = get_u64(in, 16);
  if (header_bytes > size - kPrefixBytes || size - kPrefixBytes - header_bytes < 8) throw truncated(0);
  const uint64_t payload_size_at = kPrefixBytes + header_bytes;
  const uint64_t payload_bytes = get_u64(in, payload_size_at);
  const uint64_t rest = size - payload_size_at - 8;  // payload and CRC
  if (rest < 4 || payload_bytes > rest - 4) {
    // The size the header implies, unless that overflows (then "expected more").
    const bool fits = payload_bytes <= UINT64_MAX - payload_size_at - 12;
    const uint64_t needed = fits ? payload_size_at + 12 + payload_bytes : 0;
    throw truncated(needed);
  }
  if (payload_bytes < rest - 4)
    throw bad_data(path, std::to_string(rest - 4 - payload_bytes) + " unexpected bytes after the checksum");
  const uint64_t payload_at = payload_size_at + 8;

  const uint32_t stored_crc = get_u32(in, size - 4);
  const uint32_t crc = crc32_of(in.data(), size - 4);
  if (stored_crc != crc)
    throw bad_data(path, "CRC mismatch (stored " + hex32(stored_crc) + ", computed " + hex32(crc) + ")");
  const uint32_t reserved = get_u32(in, 12);
  if (reserved != 0) throw bad_data(path, "reserved field is " + std::to_string(reserved) + ", not 0");

  json header;
  try {
    header = json::parse(in.begin() + static_cast<std::ptrdiff_t>(kPrefixBytes),
                         in.begin() + static_cast<std::ptrdiff_t>(payload_size_at));
  } catch (const json::exception& e) {
    throw bad_data(path, "bad checkpoint header: " + one_line(e.what()));
  }
  const HeaderReader r(path);
  if (!header.is_object()) throw r.bad("not a JSON object");

  Checkpoint c;
  c.model_sha256 = r.string_field(header, "model_sha256");
  c.options_hash = r.string_field(header, "options_hash");
  c.options_text = r.string_field(header, "options_text");
  c.step = r.int64_field(header, "step");
  c.epoch = r.int64_field(header, "epoch");
  c.position = r.int64_field(header, "position");
  c.seed = r.uint64_field(header, "seed");
  if (!parse_lr_bits(r.string_field(header, "lr_bits"), &c.lr))
    throw r.bad("'lr_bits' is not 16 lower-case hex digits");
  const json& extra = r.field(header, "extra", "");
  if (!extra.is_object()) throw r.bad("'extra' is not an object");
  for (auto it = extra.begin(); it != extra.end(); ++it) {
    if (!it->is_string()) throw r.bad("extra '" + it.key() + "' is not a string");
    c.extra[it.key()] = it->get<std::string>();
  }

  const json& tensors = r.field(header, "tensors", "");
  if (!tensors.is_array()) throw r.bad("'tensors' is not an array");
  std::set<std::pair<std::string, std::string>> seen;
  uint64_t next_offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    const std::string where = "tensor " + std::to_string(i) + ": ";
    if (!t.is_object()) throw r.bad("tensor " + std::to_string(i) + " is not an object");
    CheckpointTensor out;
    out.name = r.string_field(t, "name", where);
    out.kind = r.string_field(t, "kind", where);
    const std::string what = "tensor '" + out.name + "'";
    if (!valid_kind(out.kind)) throw r.bad(what + " has the unknown kind '" + out.kind + "'");
    if (!seen.insert({out.name, out.kind}).second) throw r.bad(what + " (" + out.kind + ") appears twice");
    const json& shape = r.field(t, "shape", where);
    if (!shape.is_array()) throw r.bad(what + ": 'shape' is not an array");
    for (const json& d : shape) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw r.bad(what + ": 'shape' holds something other than non-negative integers");
      out.shape.push_back(d.get<int64_t>());
    }
    const uint64_t offset = r.uint64_field(t, "offset", where);
    const uint64_t bytes = r.uint64_field(t, "bytes", where);
    const uint64_t stored = r.uint64_field(t, "crc32", where);
    uint64_t elements = 0;
    if (!shape_elements(out.shape, UINT64_MAX / 4, &elements) || elements * 4 != bytes)
      throw r.bad(what + ": shape " + shape_text(out.shape) + " does not match its " + std::to_string(bytes) +
                  " bytes");
    // Version 1 lays the tensors out back to back, in directory order.
    if (offset != next_offset)
      throw r.bad(what + " is at payload offset " + std::to_string(offset) + ", expected " +
                  std::to_string(next_offset));
    if (bytes > payload_bytes - offset)
      throw r.bad(what + " (" + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                  ") runs past the payload's " + std::to_string(payload_bytes) + " bytes");
    next_offset = offset + bytes;
    const uint32_t computed = crc32_of(in.data() + payload_at + offset, bytes);
    if (stored != computed) throw bad_data(path, "CRC mismatch in tensor '" + out.name + "'");
    get_floats(in, payload_at + offset, elements, &out.data);
    c.tensors.push_back(std::move(out));
  }
  if (next_offset != payload_bytes)
    throw r.bad("the tensors cover " + std::to_string(next_offset) + " of the payload's " +
                std::to_string(payload_bytes) + " bytes");
  return c;
}

}  // namespace convgen::train
