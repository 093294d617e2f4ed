#include "runtime/ops/weights_file.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "schedules/durable_file.h"

namespace convgen {

namespace {

constexpr char kMagic[8] = {'C', 'O', 'N', 'V', 'G', 'E', 'N', 'W'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 128;  // magic, version, reserved, count, 64-char key, zero padding

}  // namespace

std::vector<float> read_weights_file(const std::string& path, int64_t floats, const std::string& plan_key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read the weights file");
  char header[kHeaderBytes] = {};
  in.read(header, kHeaderBytes);
  uint32_t version = 0;
  uint64_t count = 0;
  std::memcpy(&version, header + 8, 4);
  std::memcpy(&count, header + 16, 8);
  const std::string key(header + 24, 64);
  if (!in || std::memcmp(header, kMagic, 8) != 0 || version != kVersion)
    throw std::runtime_error(path + ": not a convgen weights file (version " + std::to_string(kVersion) + ")");
  if (key != plan_key || count != static_cast<uint64_t>(floats))
    throw std::runtime_error(path + ": weights written for another model or compile (recompile with convgen compile)");
  std::vector<float> w(static_cast<size_t>(floats));
  in.read(reinterpret_cast<char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
  if (!in) throw std::runtime_error(path + ": truncated weights file");
  return w;
}

void write_weights_file(const std::string& path, const std::vector<float>& weights, const std::string& plan_key) {
  char header[kHeaderBytes] = {};
  std::memcpy(header, kMagic, 8);
  std::memcpy(header + 8, &kVersion, 4);
  const uint64_t count = weights.size();
  std::memcpy(header + 16, &count, 8);
  std::memcpy(header + 24, plan_key.data(), std::min<size_t>(64, plan_key.size()));
  std::string bytes(header, kHeaderBytes);
  bytes.append(reinterpret_cast<const char*>(weights.data()), weights.size() * sizeof(float));
  write_file_durably(path, bytes);
}

}  // namespace convgen
