// Training checkpoints (runtime/checkpoint/checkpoint.h): bit-exact round trips, the file format,
// detection of every truncation and single-bit corruption, save errors, and crash safety
// (a saver SIGKILLed at random moments always leaves a loadable checkpoint).
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "tests/common/temp_dir.h"
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "schedules/errors.h"

namespace fs = std::filesystem;
using namespace convgen::train;
using convgen::Error;
using convgen::ExitCode;

namespace {

// Temporary directories for this file's tests.
struct TempDir : convgen::test::TempDir {
  TempDir() : convgen::test::TempDir("convgen-ckpt") {}
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t bits_of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

uint64_t bits_of(double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, 8);
  return bits;
}

double double_from_bits(uint64_t bits) {
  double d;
  std::memcpy(&d, &bits, 8);
  return d;
}

// Bitwise equality of two checkpoints (NaN payloads and signed zeros included).
bool same(const Checkpoint& a, const Checkpoint& b) {
  if (a.model_sha256 != b.model_sha256 || a.options_hash != b.options_hash || a.options_text != b.options_text ||
      a.step != b.step || a.epoch != b.epoch || a.position != b.position || a.seed != b.seed ||
      bits_of(a.lr) != bits_of(b.lr) || a.extra != b.extra || a.tensors.size() != b.tensors.size())
    return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const CheckpointTensor& x = a.tensors[i];
    const CheckpointTensor& y = b.tensors[i];
    if (x.name != y.name || x.kind != y.kind || x.shape != y.shape || x.data.size() != y.data.size()) return false;
    if (!x.data.empty() && std::memcmp(x.data.data(), y.data.data(), x.data.size() * 4) != 0) return false;
  }
  return true;
}

// A small checkpoint: the corruption tests try every byte of it.
Checkpoint small_checkpoint() {
  Checkpoint c;
  c.model_sha256 = "ab12";
  c.options_hash = "cd34";
  c.options_text = "batch 8";
  c.step = 7;
  c.epoch = 1;
  c.position = 3;
  c.seed = 42;
  c.lr = 0.01;
  c.extra = {{"schedule", "step"}};
  c.tensors = {{"conv1_w", "value", {2, 1}, {1.5f, -2.0f}}, {"conv1_w", "momentum", {2, 1}, {0.25f, 0.0f}}};
  return c;
}

// Every awkward value the format must carry exactly.
Checkpoint rich_checkpoint() {
  Checkpoint c;
  c.model_sha256 = std::string(64, 'f');
  c.options_hash = "0123456789abcdef";
  c.options_text = "batch 32, lr schedule \"cosine\"\nmomentum 0.9, caf\xc3\xa9";
  c.step = std::numeric_limits<int64_t>::max();
  c.epoch = std::numeric_limits<int64_t>::min();
  c.position = -1;
  c.seed = 0xFFFFFFFFFFFFFFFFull;
  c.lr = 0.1 + 0.2;  // 0.30000000000000004: not the nearest double to 0.3
  c.extra = {{"", ""}, {"warmup", "5"}, {"quote\"\\", "line\nbreak\ttab\x01"}, {"unicode", "\xe2\x88\x87L"}};
  std::vector<float> special = {-0.0f,
                                0.0f,
                                from_bits(0x7fc00001),  // quiet NaN with a payload
                                from_bits(0xffbadbad),  // negative NaN with a payload
                                from_bits(0x7f800001),  // signalling NaN
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(),
                                from_bits(0x00000001),  // smallest denormal
                                FLT_MAX,
                                -FLT_MIN,
                                1.0f / 3.0f,
                                12345.678f};
  c.tensors.push_back({"conv1_w", "value", {3, 2, 2}, special});
  c.tensors.push_back({"conv1_w", "momentum", {3, 4}, std::vector<float>(12, -0.0f)});
  c.tensors.push_back({"bn1.running_mean", "state", {}, {from_bits(0x7fffffff)}});  // a scalar
  c.tensors.push_back({"empty", "state", {0, 5}, {}});
  std::vector<float> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = from_bits(static_cast<uint32_t>(i * 2654435761u));
  c.tensors.push_back({"fc_w", "value", {10, 100}, big});
  return c;
}

// Checks that `f` throws a convgen::Error with `code` whose message is one line that
// starts with `path` and contains `fragment`.
template <typename F>
void require_error(F&& f, ExitCode code, const std::string& path, const std::string& fragment = "") {
  try {
    f();
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(e.code() == code);
    CHECK(message.rfind(path + ": ", 0) == 0);
    CHECK(message.find('\n') == std::string::npos);
    if (!fragment.empty()) CHECK(message.find(fragment) != std::string::npos);
    return;
  }
  FAIL("no convgen::Error thrown");
}

uint32_t get_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

uint64_t get_u64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(s[at + i])) << (8 * i);
  return v;
}

void put_u32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}

void put_u64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}

void set_u32(std::string* s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*s)[at + i] = static_cast<char>(v >> (8 * i));
}

// A checkpoint file taken apart by the documented format.
struct Parts {
  std::string prefix;  // magic, version, reserved
  std::string header;  // the JSON
  std::string payload;
};

Parts split(const std::string& file) {
  REQUIRE(file.size() >= 36);
  Parts p;
  p.prefix = file.substr(0, 16);
  const uint64_t h = get_u64(file, 16);
  REQUIRE(24 + h + 8 <= file.size());
  p.header = file.substr(24, h);
  const uint64_t n = get_u64(file, 24 + h);
  REQUIRE(24 + h + 8 + n + 4 == file.size());
  p.payload = file.substr(24 + h + 8, n);
  return p;
}

// Reassembles the parts with consistent sizes and a valid overall CRC.
std::string join(const Parts& p) {
  std::string file = p.prefix;
  put_u64(&file, p.header.size());
  file += p.header;
  put_u64(&file, p.payload.size());
  file += p.payload;
  put_u32(&file, crc32_of(file.data(), file.size()));
  return file;
}

// Replaces the one occurrence of `from` in `text` with `to`.
std::string replace_once(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  REQUIRE(text.find(from, at + 1) == std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("crc32_of is the IEEE CRC-32 and chains", "[checkpoint]") {
  const std::string text = "123456789";
  CHECK(crc32_of(text.data(), text.size()) == 0xCBF43926u);
  CHECK(crc32_of(text.data() + 4, text.size() - 4, crc32_of(text.data(), 4)) == 0xCBF43926u);
  CHECK(crc32_of(nullptr, 0) == 0u);
  CHECK(crc32_of(nullptr, 0, 0x12345678u) == 0x12345678u);
}

TEST_CASE("checkpoint_path names DIR/checkpoint.cgck", "[checkpoint]") {
  CHECK(checkpoint_path("/some/dir") == "/some/dir/checkpoint.cgck");
  CHECK(checkpoint_path("/some/dir/") == "/some/dir/checkpoint.cgck");
  CHECK(checkpoint_path("rel") == "rel/checkpoint.cgck");
}

TEST_CASE("a checkpoint round-trips bit for bit", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("run/ckpt");  // created, parents too
  const Checkpoint c = rich_checkpoint();
  save_checkpoint(dir, c);
  const Checkpoint back = load_checkpoint(dir);
  CHECK(same(c, back));
  CHECK(back.seed == 0xFFFFFFFFFFFFFFFFull);
  CHECK(bits_of(back.lr) == bits_of(0.1 + 0.2));
  CHECK(back.lr != 0.3);
  CHECK(bits_of(back.tensors[0].data[0]) == 0x80000000u);
  CHECK(bits_of(back.tensors[0].data[2]) == 0x7fc00001u);
  CHECK(bits_of(back.tensors[0].data[3]) == 0xffbadbadu);
  CHECK(bits_of(back.tensors[0].data[4]) == 0x7f800001u);
  CHECK(back.tensors[2].shape.empty());
  CHECK(back.tensors[3].data.empty());

  SECTION("saving the same state again gives the same bytes") {
    const std::string first = read_bytes(checkpoint_path(dir));
    save_checkpoint(dir, back);
    CHECK(read_bytes(checkpoint_path(dir)) == first);
  }
  SECTION("the default (empty) checkpoint") {
    save_checkpoint(dir, Checkpoint{});
    CHECK(same(load_checkpoint(dir), Checkpoint{}));
  }
  SECTION("every kind of learning rate") {
    const double lrs[] = {0.0, -0.0, 1e-300, 4.9e-324, 0.1, 1.0 / 3.0, DBL_MAX,
                          std::numeric_limits<double>::infinity(), double_from_bits(0x7ff8000000000123ull),
                          double_from_bits(0xfff0000000000001ull)};
    for (double lr : lrs) {
      Checkpoint x = small_checkpoint();
      x.lr = lr;
      save_checkpoint(dir, x);
      const Checkpoint y = load_checkpoint(dir);
      INFO(bits_of(lr));
      CHECK(bits_of(y.lr) == bits_of(lr));
    }
  }
}

TEST_CASE("the checkpoint file has the documented layout", "[checkpoint]") {
  TempDir tmp;
  const Checkpoint c = small_checkpoint();
  save_checkpoint(tmp.file("d"), c);
  const std::string file = read_bytes(checkpoint_path(tmp.file("d")));
  CHECK(file.substr(0, 8) == std::string("CGCKPT\0\0", 8));
  CHECK(get_u32(file, 8) == 1u);
  CHECK(get_u32(file, 12) == 0u);
  const Parts p = split(file);
  CHECK(p.header.front() == '{');
  CHECK(p.header.back() == '}');
  CHECK(get_u32(file, file.size() - 4) == crc32_of(file.data(), file.size() - 4));
  // The payload: the tensors' float32 bit patterns, little-endian, back to back.
  std::string expected;
  for (const CheckpointTensor& t : c.tensors)
    for (float f : t.data) put_u32(&expected, bits_of(f));
  CHECK(p.payload == expected);
  CHECK(p.header.find("\"name\":\"conv1_w\"") != std::string::npos);
  CHECK(p.header.find("\"lr_bits\":\"3f847ae147ae147b\"") != std::string::npos);  // 0.01
  CHECK(join(p) == file);
}

TEST_CASE("overwriting a checkpoint leaves exactly one file", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  Checkpoint a = small_checkpoint();
  Checkpoint b = rich_checkpoint();
  save_checkpoint(dir, a);
  CHECK(entries(dir) == std::vector<std::string>{"checkpoint.cgck"});
  save_checkpoint(dir, b);
  CHECK(entries(dir) == std::vector<std::string>{"checkpoint.cgck"});
  CHECK(same(load_checkpoint(dir), b));
  save_checkpoint(dir, a);
  CHECK(entries(dir) == std::vector<std::string>{"checkpoint.cgck"});
  CHECK(same(load_checkpoint(dir), a));
}

TEST_CASE("leftover temporaries of a killed saver are ignored", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, small_checkpoint());
  write_bytes(tmp.file("ckpt/.checkpoint.cgck.tmp.99999"), "CGCKPT\0\0 half a file");
  write_bytes(tmp.file("ckpt/.checkpoint.cgck.tmp." + std::to_string(getpid())), "stale, same pid");
  CHECK(same(load_checkpoint(dir), small_checkpoint()));
  save_checkpoint(dir, rich_checkpoint());  // overwrites a temporary of its own pid
  CHECK(same(load_checkpoint(dir), rich_checkpoint()));
  CHECK(entries(dir) == std::vector<std::string>{".checkpoint.cgck.tmp.99999", "checkpoint.cgck"});
}

TEST_CASE("every truncation of a checkpoint is detected", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, small_checkpoint());
  const std::string path = checkpoint_path(dir);
  const std::string good = read_bytes(path);
  for (size_t length = 0; length < good.size(); ++length) {
    INFO("length " << length << " of " << good.size());
    write_bytes(path, good.substr(0, length));
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "truncated");
  }
  write_bytes(path, good + "x");
  require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "unexpected bytes");
  write_bytes(path, good);
  CHECK(same(load_checkpoint(dir), small_checkpoint()));
}

TEST_CASE("every single-bit corruption of a checkpoint is detected", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, small_checkpoint());
  const std::string path = checkpoint_path(dir);
  const std::string good = read_bytes(path);
  for (size_t at = 0; at < good.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      INFO("byte " << at << " bit " << bit << " of " << good.size() << " bytes");
      std::string bad = good;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      write_bytes(path, bad);
      require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path);
    }
  }
}

TEST_CASE("foreign, future and missing checkpoints are refused", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, small_checkpoint());
  const std::string path = checkpoint_path(dir);
  const std::string good = read_bytes(path);

  SECTION("wrong magic") {
    std::string bad = good;
    bad[0] = 'X';
    write_bytes(path, bad);
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "not a convgen checkpoint");
    write_bytes(path, "{\"step\": 3}\n");
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "not a convgen checkpoint");
    write_bytes(path, "CG");  // a proper prefix of the magic: just short
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "truncated");
  }
  SECTION("a future version, with or without a valid CRC") {
    std::string bad = good;
    set_u32(&bad, 8, 2);
    write_bytes(path, bad);
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path,
                  "checkpoint version 2 is not supported (this convgen reads 1)");
    Parts p = split(good);
    set_u32(&p.prefix, 8, 7);
    write_bytes(path, join(p));
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path,
                  "checkpoint version 7 is not supported (this convgen reads 1)");
    try {
      load_checkpoint(dir);
    } catch (const Error& e) {
      CHECK(std::string(e.what()) == path + ": checkpoint version 7 is not supported (this convgen reads 1)");
    }
  }
  SECTION("a missing file or directory") {
    fs::remove(path);
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "No such file");
    const std::string nowhere = tmp.file("no/such/dir");
    require_error([&] { load_checkpoint(nowhere); }, ExitCode::BadData, checkpoint_path(nowhere), "No such file");
  }
  SECTION("checkpoint.cgck is a directory") {
    fs::remove(path);
    fs::create_directory(path);
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "not a regular file");
  }
  SECTION("an empty file") {
    write_bytes(path, "");
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, "truncated");
  }
}

// Faults behind a valid overall CRC: a checkpoint written by something that is not this
// convgen, or a tensor corrupted before the file's CRC was computed.
TEST_CASE("inconsistent contents behind a valid CRC are refused", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  save_checkpoint(dir, small_checkpoint());
  const std::string path = checkpoint_path(dir);
  const Parts good = split(read_bytes(path));
  CHECK(same(load_checkpoint(dir), small_checkpoint()));

  auto refused = [&](const Parts& p, const std::string& fragment) {
    write_bytes(path, join(p));
    require_error([&] { load_checkpoint(dir); }, ExitCode::BadData, path, fragment);
  };
  auto with_header = [&](const std::string& from, const std::string& to) {
    Parts p = good;
    p.header = replace_once(p.header, from, to);
    return p;
  };

  {
    Parts p = good;
    p.payload[1] ^= 0x10;  // in the first tensor
    refused(p, "CRC mismatch in tensor 'conv1_w'");
  }
  {
    Parts p = good;
    set_u32(&p.prefix, 12, 5);
    refused(p, "reserved");
  }
  {
    Parts p = good;
    p.header = "{\"step\": 1,";
    refused(p, "bad checkpoint header");
  }
  {
    Parts p = good;
    p.header = "[1, 2]";
    refused(p, "bad checkpoint header");
  }
  {
    Parts p = good;
    p.payload += std::string(4, '\0');  // payload bytes no tensor covers
    refused(p, "bad checkpoint header");
  }
  refused(with_header("\"kind\":\"momentum\"", "\"kind\":\"velocity\""), "unknown kind 'velocity'");
  refused(with_header("\"kind\":\"momentum\"", "\"kind\":\"value\""), "appears twice");
  refused(with_header("\"offset\":8,\"shape\":[2,1]", "\"offset\":8,\"shape\":[3,1]"), "does not match");
  refused(with_header("\"offset\":8,\"shape\":[2,1]", "\"offset\":8,\"shape\":[-2,-1]"), "shape");
  refused(with_header("\"lr_bits\":\"3f847ae147ae147b\"", "\"lr_bits\":\"0.01\""), "lr_bits");
  refused(with_header("\"lr_bits\":\"3f847ae147ae147b\"", "\"lr\":0.01"), "'lr_bits' is missing");
  refused(with_header("\"seed\":42", "\"seed\":-42"), "'seed'");
  refused(with_header("\"step\":7", "\"step\":7.5"), "'step'");
  refused(with_header("\"step\":7", "\"step\":9223372036854775808"), "'step'");
  refused(with_header("\"extra\":{\"schedule\":\"step\"}", "\"extra\":{\"schedule\":3}"), "extra 'schedule'");
  refused(with_header("\"model_sha256\":\"ab12\"", "\"model_sha256\":null"), "'model_sha256'");
  // The second tensor's directory entry, pointing into the first or past the end.
  refused(with_header("\"offset\":8", "\"offset\":4"), "offset");
  refused(with_header("\"offset\":8", "\"offset\":18446744073709551615"), "offset");
  {
    // A payload shorter than the directory says: the second tensor runs past its end.
    Parts p = good;
    p.payload.resize(12);
    refused(p, "bad checkpoint header");
  }
  // The original still loads: none of the above touched it.
  write_bytes(path, join(good));
  CHECK(same(load_checkpoint(dir), small_checkpoint()));
}

TEST_CASE("save errors: unwritable directory, invalid checkpoints", "[checkpoint]") {
  TempDir tmp;
  const std::string file = tmp.file("plain-file");
  write_bytes(file, "not a directory");

  SECTION("DIR under a regular file") {
    const std::string dir = file + "/ckpt";
    require_error([&] { save_checkpoint(dir, small_checkpoint()); }, ExitCode::Io, dir);
  }
  SECTION("DIR is a regular file") {
    require_error([&] { save_checkpoint(file, small_checkpoint()); }, ExitCode::Io, file, "directory");
  }
  SECTION("checkpoint.cgck is a non-empty directory: the rename fails, no temporary is left") {
    const std::string dir = tmp.file("ckpt");
    fs::create_directories(checkpoint_path(dir) + "/inside");
    require_error([&] { save_checkpoint(dir, small_checkpoint()); }, ExitCode::Io, checkpoint_path(dir));
    CHECK(entries(dir) == std::vector<std::string>{"checkpoint.cgck"});
  }
  SECTION("a read-only DIR") {
    if (geteuid() == 0) return;  // root writes anyway
    const std::string dir = tmp.file("ro");
    save_checkpoint(dir, small_checkpoint());
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    require_error([&] { save_checkpoint(dir, rich_checkpoint()); }, ExitCode::Io, checkpoint_path(dir));
    fs::permissions(dir, fs::perms::owner_all);
    CHECK(same(load_checkpoint(dir), small_checkpoint()));  // the old one is intact
  }
  SECTION("a checkpoint that could not be read back is refused before anything is written") {
    const std::string dir = tmp.file("ckpt");
    Checkpoint c = small_checkpoint();
    c.tensors[0].data.push_back(1.0f);
    require_error([&] { save_checkpoint(dir, c); }, ExitCode::Internal, checkpoint_path(dir), "does not match");
    c = small_checkpoint();
    c.tensors[1].kind = "velocity";
    require_error([&] { save_checkpoint(dir, c); }, ExitCode::Internal, checkpoint_path(dir), "unknown kind");
    c = small_checkpoint();
    c.tensors[1].kind = "value";
    require_error([&] { save_checkpoint(dir, c); }, ExitCode::Internal, checkpoint_path(dir), "twice");
    c = small_checkpoint();
    c.extra["path"] = "latin-1 caf\xe9";
    require_error([&] { save_checkpoint(dir, c); }, ExitCode::Unsupported, checkpoint_path(dir), "UTF-8");
    CHECK_FALSE(fs::exists(dir));
  }
}

// A child saves A and B alternately, as fast as it can, and is SIGKILLed at a random
// moment; whatever it was doing, the checkpoint left behind loads and is exactly A or B.
// Its temporary (.checkpoint.cgck.tmp.<pid>) may be left behind; loading ignores it.
TEST_CASE("a saver killed at any moment leaves the old or the new checkpoint", "[checkpoint]") {
  TempDir tmp;
  const std::string dir = tmp.file("ckpt");
  Checkpoint a = rich_checkpoint();
  Checkpoint b = small_checkpoint();
  // Big enough that a save takes a while, so kills land inside writes too.
  for (int i = 0; i < 3; ++i) {
    std::vector<float> data(1 << 16);
    for (size_t k = 0; k < data.size(); ++k) data[k] = static_cast<float>(k * (i + 1));
    a.tensors.push_back({"big" + std::to_string(i), "value", {256, 256}, data});
    for (float& f : data) f = -f;
    b.tensors.push_back({"big" + std::to_string(i), "momentum", {1 << 16}, data});
  }
  save_checkpoint(dir, a);  // so that there is a checkpoint even if a child dies at once

  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_us(0, 20000);
  int saw_a = 0, saw_b = 0;
  for (int iteration = 0; iteration < 20; ++iteration) {
    // On odd iterations wait until the child has finished one save, so the kill surely
    // falls among its saves; on even ones kill at a random moment after the fork.
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      close(ready[0]);
      try {
        for (long n = 0;; ++n) {
          save_checkpoint(dir, n % 2 == 0 ? b : a);
          if (n == 0) {
            const char byte = 1;
            if (write(ready[1], &byte, 1) != 1) _exit(3);
          }
        }
      } catch (...) {
        _exit(2);
      }
    }
    close(ready[1]);
    if (iteration % 2 == 1) {
      char byte;
      REQUIRE(read(ready[0], &byte, 1) == 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    REQUIRE(kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    close(ready[0]);  // only now: the child's write to it must not raise SIGPIPE
    INFO("iteration " << iteration << ", status " << status);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);

    const Checkpoint loaded = load_checkpoint(dir);
    const bool is_a = same(loaded, a), is_b = same(loaded, b);
    CHECK((is_a || is_b));
    saw_a += is_a;
    saw_b += is_b;
    for (const std::string& name : entries(dir))
      CHECK((name == "checkpoint.cgck" || name.rfind(".checkpoint.cgck.tmp.", 0) == 0));
  }
  INFO("A " << saw_a << " times, B " << saw_b << " times");
  CHECK(saw_a + saw_b == 20);
  // The temporaries left behind do not disturb later saves or loads.
  save_checkpoint(dir, b);
  CHECK(same(load_checkpoint(dir), b));
}
