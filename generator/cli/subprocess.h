// Child processes for `convgen compile`: one process per kernel keeps Halide's
// process-wide unique-name counters out of each kernel's bytes (byte-reproducible
// output), and lets independent kernels generate in parallel.
#pragma once

#include <string>
#include <vector>

namespace convgen {

struct ChildJob {
  std::vector<std::string> argv;  // argv[0] is the executable's path
  std::string cwd;                // "" = inherit
  std::string stderr_path;        // where the child's stderr goes ("" = inherit)
  int exit_code = -1;             // set by run_jobs: the exit status, or 128 + signal
};

// Runs every job, at most `parallel` at a time, and waits for all of them.
void run_jobs(std::vector<ChildJob>& jobs, int parallel);

// This executable's path (/proc/self/exe).
std::string self_executable();

}  // namespace convgen
