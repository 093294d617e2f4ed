// Errors with stable exit codes (docs/exit-codes.md). Every user-facing failure is a
// convgen::Error; main() prints its one-line message and returns its code.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>

namespace convgen {

enum class ExitCode : int {
  Ok = 0,
  Internal = 1,         // a bug in convgen
  Usage = 2,            // bad command line or bad layer descriptor
  MissingDependency = 3,
  Io = 4,               // a file could not be read or written
  BadRecord = 5,        // malformed or incompatible schedule record
  BadModel = 6,         // (reserved for model import)
  Unsupported = 7,      // valid input that convgen does not support
  BadData = 8,          // bad input data: tensor files, training data
  CheckFailed = 9,      // convgen check: some output differs from the expected data
  NonFiniteLoss = 10,   // convgen train: a step's loss is NaN or infinite
  Busy = 11,            // convgen tune: another process is tuning into the same records file
  RankTimeout = 12,     // convgen train under mpirun: a rank did not reach an exchange in time
};

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

// Error(Io) "<path>: <what>: <strerror(err)>". With err 0 the reason is left out:
// std::ifstream does not promise to set errno, and "Success" would mislead.
inline Error io_error(const std::string& path, const std::string& what, int err) {
  return Error(ExitCode::Io, err == 0 ? path + ": " + what : path + ": " + what + ": " + std::strerror(err));
}

}  // namespace convgen
