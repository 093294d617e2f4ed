#include "generator/kernel_cache/link_shared_object.h"

#include <spawn.h>
#include <sys/wait.h>
#include <fcntl.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

extern char** environ;

namespace convgen {

std::string linker_command() {
  if (const char* ld = std::getenv("CONVGEN_LD"); ld && *ld) return ld;
  return "ld";
}

LinkResult link_shared_object(const std::string& output, const std::string& soname,
                              const std::vector<std::string>& inputs, const std::string& rpath,
                              const std::string& log_path) {
  const std::string ld = linker_command();
  std::vector<std::string> args = {ld, "-shared", "-z", "noexecstack", "-soname", soname, "-o", output};
  args.insert(args.end(), inputs.begin(), inputs.end());
  if (!rpath.empty()) {
    args.push_back("-rpath");
    args.push_back(rpath);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int spawn_error = posix_spawnp(&pid, ld.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  LinkResult r;
  if (spawn_error != 0) {
    r.linker_missing = true;
    r.message = fmt::format("cannot run the linker '{}' ({}; set CONVGEN_LD)", ld, std::strerror(spawn_error));
    return r;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      r.message = fmt::format("waiting for the linker '{}' failed: {}", ld, std::strerror(errno));
      return r;
    }
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    r.ok = true;
    return r;
  }
  // posix_spawnp reports a missing program as exit status 127 from the child on glibc.
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) r.linker_missing = true;
  std::ifstream log(log_path);
  std::string first;
  std::getline(log, first);
  r.message = fmt::format("the linker '{}' failed ({}): {}", ld,
                          WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                            : fmt::format("signal {}", WTERMSIG(status)),
                          first.empty() ? "(no output)" : first);
  return r;
}

}  // namespace convgen
