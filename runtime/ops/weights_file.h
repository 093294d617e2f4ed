// The weights file of a compiled model (`convgen compile` writes NAME.weights, the
// generated driver reads it): a 128-byte header -- "CONVGENW", format version, value
// count, the 64-hex-digit key of the compile it belongs to -- then float32 values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace convgen {

// Reads one and checks it was written for this driver (`plan_key`) and holds `floats`
// values. Throws std::runtime_error naming the file otherwise.
std::vector<float> read_weights_file(const std::string& path, int64_t floats, const std::string& plan_key);

// Writes one durably (schedules/durable_file.h); Io error naming the path.
void write_weights_file(const std::string& path, const std::vector<float>& weights, const std::string& plan_key);

}  // namespace convgen
