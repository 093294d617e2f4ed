#include "generator/cli/subprocess.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>

#include <fmt/format.h>

#include "schedules/errors.h"

namespace convgen {

namespace {

pid_t start(const ChildJob& job) {
  std::vector<char*> argv;
  for (const auto& a : job.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(ExitCode::Internal, "cannot start a child process (fork failed)");
  if (pid == 0) {
    if (!job.cwd.empty() && ::chdir(job.cwd.c_str()) != 0) ::_exit(126);
    if (!job.stderr_path.empty()) {
      const int fd = ::open(job.stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) ::_exit(126);
      ::dup2(fd, 2);
      ::dup2(fd, 1);
      ::close(fd);
    }
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

}  // namespace

void run_jobs(std::vector<ChildJob>& jobs, int parallel) {
  std::map<pid_t, size_t> running;
  size_t next = 0;
  while (next < jobs.size() || !running.empty()) {
    while (next < jobs.size() && static_cast<int>(running.size()) < std::max(1, parallel)) {
      running[start(jobs[next])] = next;
      ++next;
    }
    int status = 0;
    const pid_t done = ::waitpid(-1, &status, 0);
    if (done < 0) throw Error(ExitCode::Internal, "waitpid failed while generating kernels");
    auto it = running.find(done);
    if (it == running.end()) continue;
    jobs[it->second].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    running.erase(it);
  }
}

std::string self_executable() {
  char buffer[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) throw Error(ExitCode::Internal, "cannot find convgen's own executable (/proc/self/exe)");
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace convgen
