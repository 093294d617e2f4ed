#include "bench/peer_isa.h"

#include <blis.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <string>
#include <vector>

#include "runtime/im2col/im2col_blis.h"
#include "schedules/errors.h"

namespace convgen::bench {
namespace {

int blis_arch_id(const std::string& name) {
  for (int id = 0; id < BLIS_NUM_ARCHS; ++id)
    if (name == bli_arch_string(static_cast<arch_t>(id))) return id;
  return -1;
}

// The kernel set BLIS settles on in a child process, given `arch_type` as BLIS_ARCH_TYPE
// (empty: none), or "" when the child died. BLIS fixes its choice on first use and aborts
// on an id it was built without, so this process must not ask before it has decided.
std::string blis_choice_in_child(const std::string& arch_type) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "";
  const pid_t pid = fork();
  if (pid < 0) {
    close(pipefd[0]);
    close(pipefd[1]);
    return "";
  }
  if (pid == 0) {
    close(pipefd[0]);
    if (!arch_type.empty()) setenv("BLIS_ARCH_TYPE", arch_type.c_str(), 1);
    const std::string s = blis_arch();
    _exit(write(pipefd[1], s.data(), s.size()) == static_cast<ssize_t>(s.size()) ? 0 : 1);
  }
  close(pipefd[1]);
  std::string out;
  char buf[64];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return "";
  return out;
}

// BLIS's kernel sets of one vector width, the one to prefer on this CPU first.
std::vector<std::string> blis_kernel_sets(int vector_floats) {
  if (vector_floats == 16) return {"skx", "knl"};
  __builtin_cpu_init();
  if (__builtin_cpu_is("amd")) return {"zen3", "zen2", "zen", "haswell"};
  return {"haswell", "zen3", "zen2", "zen"};
}

}  // namespace

PeerIsa select_peer_isa(int vector_floats, bool matched) {
  PeerIsa r;
  if (matched) {
    const bool wide = vector_floats == 16;
    try {
      dnnl::set_max_cpu_isa(wide ? dnnl::cpu_isa::avx512_core : dnnl::cpu_isa::avx2);
    } catch (const dnnl::error& e) {
      throw Error(ExitCode::Internal, std::string("cannot cap oneDNN's ISA: ") + e.what());
    }
    r.onednn_isa = wide ? "avx512_core" : "avx2";
  } else {
    r.onednn_isa = "native";
  }

  r.blis_how = "chosen by BLIS";
  if (std::getenv("BLIS_ARCH_TYPE") != nullptr) {
    r.blis_how = "BLIS_ARCH_TYPE from the environment";
  } else if (matched) {
    const std::vector<std::string> sets = blis_kernel_sets(vector_floats);
    const std::string own = blis_choice_in_child("");
    if (std::find(sets.begin(), sets.end(), own) == sets.end()) {
      r.blis_how = "BLIS chose '" + own + "'; no kernel set for " + std::to_string(vector_floats) +
                   " lanes in this build";
      for (const std::string& name : sets) {
        const int id = blis_arch_id(name);
        if (id < 0 || blis_choice_in_child(std::to_string(id)) != name) continue;
        setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1);
        r.blis_how = "set for " + std::to_string(vector_floats) + " lanes (BLIS chose '" + own + "')";
        break;
      }
    }
  }
  r.blis_arch = blis_arch();
  return r;
}

}  // namespace convgen::bench
