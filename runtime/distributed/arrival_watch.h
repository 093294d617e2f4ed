// The watchdog of an mpirun launch (docs/distributed.md, "Faults"). Before each
// collective a rank tells every other rank that it has arrived, then waits -- polling, on
// the thread that makes the group's MPI calls -- until every other rank has said so too;
// then all run the collective, non-blocking, and wait for it the same way, sending a
// heartbeat while they wait. A rank that has not arrived after the timeout (not counting
// time in which it said it was busy: building kernels), or that went silent inside the
// collective for the timeout, is named on stderr and the run ends on every rank
// (MPI_Abort, exit code 12). A rank that dies is OpenMPI's to end; this is for one that
// hangs or was stopped.
//
// Notices are two integers (kind, sequence number) on a communicator of their own, sent
// eagerly and received into one posted receive per peer: a few microseconds per
// collective, R - 1 messages per rank and heartbeat. Every rank must call arrive() and
// finish() for the same collectives, in the same order (the ProcessGroup contract).
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace convgen {

class ArrivalWatch {
 public:
  // Duplicates `world` (a collective call: every rank constructs its watch together).
  // A timeout of 0 or less never ends the run: arrive() then returns at once.
  explicit ArrivalWatch(MPI_Comm world);
  ~ArrivalWatch();  // cancels the posted receives, completes the sends, frees the communicator
  ArrivalWatch(const ArrivalWatch&) = delete;
  ArrivalWatch& operator=(const ArrivalWatch&) = delete;

  // From the next collective on, wait at most `seconds` (not counting busy time) for the
  // other ranks. Every rank arms with the same value at the same point.
  void arm(double seconds);
  bool armed() const { return timeout_ > 0; }

  // This rank reached the collective named `what` (e.g. "all-gather"); returns once every
  // rank has, or ends the run.
  void arrive(const char* what);
  // Waits for `request`, the non-blocking collective every rank reached (arrive), or ends
  // the run when a rank stays silent for the timeout meanwhile.
  void finish(MPI_Request* request, const char* what);
  // This rank starts (true) or ends (false) work whose length does not mean it hangs.
  void busy(bool on);

 private:
  enum Kind : int64_t { kArrived = 0, kBusy = 1, kIdle = 2, kAlive = 3 };
  using Clock = std::chrono::steady_clock;
  struct Notice {
    int64_t kind = 0, seq = 0;
  };
  struct Sent {
    Notice notice;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void post_receive(int peer);
  void poll();
  void send_all(Kind kind);
  void heartbeat(Clock::time_point now);
  [[noreturn]] void time_out(const char* what, const std::vector<int>& ranks, bool inside) const;

  MPI_Comm world_ = MPI_COMM_NULL, comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_ = 0;
  int64_t seq_ = 0;                  // collectives this rank has reached
  std::vector<int64_t> arrived_;     // per peer: the last collective it said it reached
  std::vector<char> busy_;           // per peer: between its busy(true) and busy(false)
  std::vector<Clock::time_point> heard_;  // per peer: when its last notice came
  Clock::time_point last_beat_{};
  std::vector<Notice> received_;     // per peer: the posted receive's buffer
  std::vector<MPI_Request> receives_;
  std::deque<Sent> sent_;            // in flight; a deque keeps their buffers in place
};

}  // namespace convgen
