// The ranks of an `mpirun` launch as a ProcessGroup (runtime/parallel/process_group.h):
// MPI_COMM_WORLD's processes, collectives over a duplicate of it. Only the CLI and
// programs that want several processes link this library (convgen_distributed);
// convgen::runtime and the installed package never need MPI.
#pragma once

#include <memory>

#include "runtime/parallel/process_group.h"

namespace convgen {

// True when this process was started by mpirun (OpenMPI's or a PMI launcher's
// environment). `convgen train` initialises MPI only then: started on its own, it makes
// no MPI call at all, so it starts and runs exactly as a build without MPI.
bool launched_by_mpirun();

class MpiProcessGroup final : public ProcessGroup {
 public:
  // Initialises MPI (thread support "funneled": only the thread that made the group
  // calls MPI); one group per process.
  MpiProcessGroup();
  ~MpiProcessGroup() override;  // MPI_Finalize
  MpiProcessGroup(const MpiProcessGroup&) = delete;
  MpiProcessGroup& operator=(const MpiProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) override;
  void alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                const std::vector<int64_t>& recv_bytes) override;
  void sum(int64_t* values, int64_t count) override;
  void broadcast(std::string& bytes, int root) override;
  // Non-blocking MPI collectives on the group's communicator, without arrival notices
  // (posting is not a meeting point); complete() waits under the watch's heartbeats.
  Ticket start_alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                        const std::vector<int64_t>& recv_bytes) override;
  Ticket start_allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) override;
  bool test(Ticket ticket) override;
  void complete(Ticket ticket) override;
  // ArrivalWatch (arrival_watch.h): every exchange waits for the other ranks' arrival
  // notices first, at most `seconds` of time they are not busy.
  void watch(double seconds) override;
  void busy(bool on) override;

  // Ends every rank of the launch with `exit_code` (MPI_Abort): what a rank does when it
  // fails while the others may be waiting in a collective for it.
  [[noreturn]] void abort(int exit_code);

 private:
  struct Comm;
  std::unique_ptr<Comm> comm_;
  int rank_ = 0, size_ = 1;
};

}  // namespace convgen
