// Files that a crash must never leave half-written: checkpoints, schedule records, saved
// models and weights, profiles. One implementation, so every writer gets the same care.
#pragma once

#include <string>
#include <string_view>

namespace convgen {

// Writes `bytes` to `path` so that a reader, or a restart after a crash, Ctrl-C or
// kill -9, finds the old file or the new one and never a mix: a temporary ".NAME.tmp.PID"
// beside it, written fully and fsync'ed, renamed over `path`, then the directory
// fsync'ed. On failure the temporary is removed and an Io error names `path`. Two
// threads of one process must not write the same path at once (they share the name of
// the temporary).
void write_file_durably(const std::string& path, std::string_view bytes);

}  // namespace convgen
