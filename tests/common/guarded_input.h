// An input buffer for kernel tests that faults on reads outside it: the values end at a
// page mapped PROT_NONE (Edge::End) or begin at one (Edge::Start), so a kernel that
// loads even one float outside an input faults instead of reading whatever the heap
// holds there; read_outside_inputs turns the fault into a failed check saying which
// input it hit and how far outside.
//
// Kernels once loaded a vector up to 28 bytes before an input and discarded those lanes:
// Halide 14 starts a stride-2..4 load's dense vector early (generator/conv/
// kernel_pipeline.cpp now loads the exact span) and GEMM's per-group input copy shifted
// its vector back over earlier groups (generator/conv/packing.cpp). No slack is left
// between an input and its page, so no such read goes unnoticed.
#pragma once

#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace convgen::test {

class GuardedInput {
 public:
  enum class Edge { Start, End };

  GuardedInput(const std::vector<float>& values, Edge edge) : bytes_(values.size() * sizeof(float)) {
    const size_t pages = (bytes_ + page_ - 1) / page_;
    span_ = (pages + 2) * page_;
    void* raw = mmap(nullptr, span_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<char*>(raw);
    mprotect(base_, page_, PROT_NONE);
    mprotect(base_ + (pages + 1) * page_, page_, PROT_NONE);
    char* first = base_ + page_;
    const size_t usable = pages * page_;
    // NaN on the readable side, so a kernel using a float read there fails the comparison.
    std::fill_n(reinterpret_cast<float*>(first), usable / sizeof(float), std::numeric_limits<float>::quiet_NaN());
    data_ = edge == Edge::Start ? first : first + usable - bytes_;
    if (bytes_ > 0) std::memcpy(data_, values.data(), bytes_);
  }
  GuardedInput(const GuardedInput&) = delete;
  GuardedInput& operator=(const GuardedInput&) = delete;
  ~GuardedInput() { munmap(base_, span_); }

  // Where `address` lies relative to this input, if in one of its faulting pages: e.g.
  // "28 bytes past the end", else "".
  std::string describe_fault(std::uintptr_t address) const {
    const auto base = reinterpret_cast<std::uintptr_t>(base_), data = reinterpret_cast<std::uintptr_t>(data_);
    if (address >= base && address < base + page_) return std::to_string(data - address) + " bytes before the start";
    if (address >= base + span_ - page_ && address < base + span_)
      return std::to_string(address - (data + bytes_) + 1) + " bytes past the end";
    return "";
  }

  const float* data() const { return bytes_ > 0 ? reinterpret_cast<const float*>(data_) : nullptr; }
  float* data() { return bytes_ > 0 ? reinterpret_cast<float*>(data_) : nullptr; }

 private:
  size_t bytes_, span_ = 0;
  const size_t page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* base_ = nullptr;
  char* data_ = nullptr;
};

// The sweeps run every case on integer-valued data and again on real data: the first run
// guards the inputs' ends, the second their starts.
inline GuardedInput::Edge guarded_edge(bool integer_valued) {
  return integer_valued ? GuardedInput::Edge::End : GuardedInput::Edge::Start;
}

namespace fault_detail {
inline thread_local sigjmp_buf* armed = nullptr;
inline thread_local std::uintptr_t address = 0;
inline void on_fault(int sig, siginfo_t* info, void*) {
  if (armed == nullptr) {  // not the calling thread, or outside a call: the default action
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  siglongjmp(*armed, 1);
}
}  // namespace fault_detail

// Runs `call` (a kernel on guarded inputs, on this thread) and returns 0, or the address
// it faulted at (SIGSEGV/SIGBUS) -- the case then fails with that address instead of the
// whole test binary dying at its first out-of-bounds read.
template <typename Call>
std::uintptr_t run_catching_faults(Call&& call) {
  struct sigaction catcher {}, old_segv {}, old_bus {};
  catcher.sa_sigaction = fault_detail::on_fault;
  catcher.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&catcher.sa_mask);
  sigaction(SIGSEGV, &catcher, &old_segv);
  sigaction(SIGBUS, &catcher, &old_bus);
  sigjmp_buf here;
  std::uintptr_t fault = 0;
  if (sigsetjmp(here, 1) == 0) {
    fault_detail::armed = &here;
    call();
  } else {
    fault = fault_detail::address == 0 ? 1 : fault_detail::address;
  }
  fault_detail::armed = nullptr;
  sigaction(SIGSEGV, &old_segv, nullptr);
  sigaction(SIGBUS, &old_bus, nullptr);
  return fault;
}

// Runs `call` over the named guarded inputs: "" when it reads only inside them, else what
// it read outside, e.g. "dy: 28 bytes past the end" (the bare address if in none of
// their faulting pages).
template <typename Call>
std::string read_outside_inputs(Call&& call,
                                std::initializer_list<std::pair<const char*, const GuardedInput*>> inputs) {
  const std::uintptr_t address = run_catching_faults(std::forward<Call>(call));
  if (address == 0) return "";
  for (const auto& [name, input] : inputs) {
    const std::string where = input->describe_fault(address);
    if (!where.empty()) return std::string(name) + ": " + where;
  }
  char text[32];
  std::snprintf(text, sizeof text, "address %#zx", static_cast<size_t>(address));
  return text;
}

}  // namespace convgen::test
