#include "peer_isa.h"

#include <blis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "errors.h"

namespace convgen::bench {
namespace {

int blis_arch_id(const std::string& name) {
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id)
    if (name == bli_arch_string(static_cast<arch_t>(id))) return id;
  return -1;
}

// BLIS aborts the process when BLIS_ARCH_TYPE names a sub-configuration it was built
// without, so each candidate is first tried in a child process.
bool blis_has_arch(int id) {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1);
    bli_init();  // registers the contexts; the arch query below checks the id against them
    _exit(bli_arch_query_id() == static_cast<arch_t>(id) ? 0 : 1);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool blis_arch_has_width(const std::string& arch, int vector_floats) {
  static const char* const k16[] = {"skx", "knl"};
  static const char* const k8[] = {"zen3", "zen2", "zen", "haswell"};
  if (vector_floats == 16) {
    for (const char* a : k16) if (arch == a) return true;
    return false;
  }
  for (const char* a : k8) if (arch == a) return true;
  return false;
}

bool cpu_is_amd() {
  __builtin_cpu_init();
  return __builtin_cpu_is("amd");
}

}  // namespace

PeerIsa select_peer_isa(int vector_floats, bool matched) {
  PeerIsa r;
  if (matched) {
    const dnnl::cpu_isa cap = vector_floats == 16 ? dnnl::cpu_isa::avx512_core : dnnl::cpu_isa::avx2;
    try {
      dnnl::set_max_cpu_isa(cap);
    } catch (const dnnl::error& e) {
      throw Error(ExitCode::Internal, std::string("cannot cap oneDNN's ISA: ") + e.what());
    }
    r.onednn_isa = vector_floats == 16 ? "avx512_core" : "avx2";
  } else {
    r.onednn_isa = "native";
  }

  if (std::getenv("BLIS_ARCH_TYPE") != nullptr) {
    r.blis_how = "BLIS_ARCH_TYPE from the environment";
  } else if (matched) {
    // The choice BLIS would make, asked in a child so that this process stays undecided.
    std::vector<std::string> wanted;
    if (vector_floats == 16) wanted = {"skx"};
    else wanted = cpu_is_amd() ? std::vector<std::string>{"zen3", "haswell"}
                               : std::vector<std::string>{"haswell", "zen3"};
    int pipefd[2];
    std::string own;
    if (pipe(pipefd) == 0) {
      const pid_t pid = fork();
      if (pid == 0) {
        close(pipefd[0]);
        bli_init();
        const char* s = bli_arch_string(bli_arch_query_id());
        if (write(pipefd[1], s, std::strlen(s)) < 0) _exit(1);
        _exit(0);
      }
      close(pipefd[1]);
      char buf[64];
      ssize_t n;
      while ((n = read(pipefd[0], buf, sizeof buf)) > 0) own.append(buf, static_cast<size_t>(n));
      close(pipefd[0]);
      if (pid > 0) waitpid(pid, nullptr, 0);
    }
    if (blis_arch_has_width(own, vector_floats)) {
      r.blis_how = "chosen by BLIS";
    } else {
      r.blis_how = "BLIS chose '" + own + "'; no kernel set for " + std::to_string(vector_floats) +
                   " lanes in this build";
      for (const std::string& name : wanted) {
        const int id = blis_arch_id(name);
        if (id >= 0 && blis_has_arch(id)) {
          setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1);
          r.blis_how = "set for " + std::to_string(vector_floats) + " lanes (BLIS chose '" + own + "')";
          break;
        }
      }
    }
  } else {
    r.blis_how = "chosen by BLIS";
  }
  bli_init();
  r.blis_arch = bli_arch_string(bli_arch_query_id());
  return r;
}

}  // namespace convgen::bench
