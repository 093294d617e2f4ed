// The processes one training run spans (docs/distributed.md), as the trainer sees them:
// a rank, a count, and collectives that only move bytes and add integers. Every
// floating-point sum stays the trainer's own, made in its fixed tree (pairwise_tree.h),
// so no result depends on how an MPI library would have added floats, nor on the number
// of ranks. One process is no group at all (a null pointer): the trainer then runs
// exactly as it does without MPI.
//
// Contract for implementations: every rank calls the same collectives in the same order
// with the same sizes (the `bytes` lists are the same on every rank); a failure is an
// exception on the rank that sees it (the caller ends the run, e.g. MPI_Abort).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace convgen {

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank's block, concatenated in rank order into `all` (rank r gives bytes[r]
  // bytes). `mine` may be `all` plus this rank's offset: then the call is in place.
  virtual void allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) = 0;
  // A personalised exchange: send_bytes[r] bytes from `send` (blocks in rank order) go to
  // rank r; recv_bytes[r] bytes from rank r land in `recv` (blocks in rank order).
  virtual void alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                        const std::vector<int64_t>& recv_bytes) = 0;
  // Element-wise sums over the ranks, in place: integers, exact in any order.
  virtual void sum(int64_t* values, int64_t count) = 0;
  // Rank `root`'s bytes to every rank (their vectors are resized to it).
  virtual void broadcast(std::string& bytes, int root) = 0;

  // Exchanges that run beside computation (docs/distributed.md, "Overlap"): start_*
  // posts one and returns its ticket at once; test(ticket) lets posted exchanges advance
  // (OpenMPI moves a non-blocking collective only inside MPI calls) and says at once
  // whether that one is done; complete(ticket) returns when it is done. The caller leaves the buffers and
  // the bytes lists alone until then. Every rank starts the same exchanges in the same
  // order relative to all its exchanges, and completes them in the order started. By
  // default the exchange runs, blocking, at start.
  using Ticket = int64_t;
  virtual Ticket start_alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                const std::vector<int64_t>& recv_bytes) {
    alltoall(send, send_bytes, recv, recv_bytes);
    return 0;
  }
  virtual Ticket start_allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) {
    allgather(mine, all, bytes);
    return 0;
  }
  virtual bool test(Ticket ticket) {
    (void)ticket;
    return true;
  }
  virtual void complete(Ticket ticket) { (void)ticket; }

  // A watchdog over the exchanges, armed by every rank at the same point (after start-up):
  // from then on a rank that does not reach an exchange within `seconds`, not counting
  // time it spends busy, ends the run on every rank, named. 0 leaves it off. A group
  // without one (a single process) ignores both calls.
  virtual void watch(double seconds) { (void)seconds; }
  // This rank starts (true) or ends (false) work whose length does not mean it hangs --
  // building kernels -- which ranks waiting for it then do not count.
  virtual void busy(bool on) { (void)on; }
};

// The part of `count` items (a gradient's elements; micro-batches are split by
// tree_aligned_cuts, pairwise_tree.h) rank `rank` of `ranks` holds:
// contiguous ranges in rank order covering [0, count), sizes differing by at most one,
// the larger ones first. A rank may hold none.
std::pair<int64_t, int64_t> rank_range(int64_t count, int rank, int ranks);

}  // namespace convgen
