// SHA-256 (FIPS 180-4) for provenance: a model file's digest in the manifest, and the
// content-addressed kernel cache's keys.
#pragma once

#include <cstdint>
#include <string>

namespace convgen {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t size);
  void update(const std::string& s) { update(s.data(), s.size()); }
  // Lower-case hex of the digest; the object is finished afterwards.
  std::string hex();

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buffer_[64];
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

std::string sha256_hex(const std::string& data);

// Of a file's bytes, read in blocks (a model's weights are never held twice); Io error
// naming the file when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace convgen
