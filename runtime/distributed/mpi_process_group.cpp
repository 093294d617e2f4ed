#include "runtime/distributed/mpi_process_group.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "runtime/distributed/arrival_watch.h"
#include "schedules/errors.h"

namespace convgen {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw Error(ExitCode::Internal, fmt::format("MPI: {} failed: {}", what, std::string(text, static_cast<size_t>(length))));
}

// MPI's counts and displacements are ints: one collective moves under 2 GiB per rank.
std::vector<int> as_ints(const std::vector<int64_t>& bytes, const char* what) {
  std::vector<int> out(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] < 0 || bytes[i] > INT_MAX)
      throw Error(ExitCode::Unsupported, fmt::format("MPI: {} of {} bytes from one rank (2 GiB at most)", what, bytes[i]));
    out[i] = static_cast<int>(bytes[i]);
  }
  return out;
}

std::vector<int> offsets(const std::vector<int>& counts, const char* what) {
  std::vector<int> out(counts.size());
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    out[i] = static_cast<int>(at);
    at += counts[i];
    if (at > INT_MAX) throw Error(ExitCode::Unsupported, fmt::format("MPI: {} of over 2 GiB in all", what));
  }
  return out;
}

// One collective: MPI's blocking call when the watch is off (no change from a run
// without it), else its non-blocking twin, waited for by the watch.
template <typename Blocking, typename Start>
void collective(ArrivalWatch& watch, const char* what, Blocking blocking, Start start) {
  if (!watch.armed()) {
    blocking();
    return;
  }
  MPI_Request r = MPI_REQUEST_NULL;
  start(&r);
  watch.finish(&r, what);
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

struct MpiProcessGroup::Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<ArrivalWatch> watch;  // made with the group: its communicator is a collective's
  // Posted exchanges by ticket: the request and the count and offset arrays MPI reads
  // until the exchange completes (std::map: they stay in place).
  struct Posted {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> send_counts, send_at, recv_counts, recv_at;
    const char* what = "";
  };
  std::map<Ticket, Posted> posted;
  Ticket next_ticket = 1;
};

MpiProcessGroup::MpiProcessGroup() : comm_(std::make_unique<Comm>()) {
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    throw Error(ExitCode::MissingDependency, "MPI: this MPI library does not support threads (MPI_THREAD_FUNNELED)");
  }
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_->comm), "MPI_Comm_dup");
  check(MPI_Comm_rank(comm_->comm, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(comm_->comm, &size_), "MPI_Comm_size");
  comm_->watch = std::make_unique<ArrivalWatch>(comm_->comm);
}

MpiProcessGroup::~MpiProcessGroup() {
  comm_->watch.reset();
  if (comm_->comm != MPI_COMM_NULL) MPI_Comm_free(&comm_->comm);
  MPI_Finalize();
}

void MpiProcessGroup::watch(double seconds) {
  if (size_ > 1) comm_->watch->arm(seconds);
}

void MpiProcessGroup::busy(bool on) { comm_->watch->busy(on); }

void MpiProcessGroup::allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) {
  const std::vector<int> counts = as_ints(bytes, "allgather"), at = offsets(counts, "allgather");
  char* base = static_cast<char*>(all);
  // In place when `mine` is already this rank's block of `all`.
  const void* send = mine == base + at[static_cast<size_t>(rank_)] ? MPI_IN_PLACE : mine;
  const int mine_count = counts[static_cast<size_t>(rank_)];
  ArrivalWatch& watch = *comm_->watch;
  watch.arrive("all-gather");
  collective(
      watch, "all-gather",
      [&] {
        check(MPI_Allgatherv(send, mine_count, MPI_BYTE, all, counts.data(), at.data(), MPI_BYTE, comm_->comm),
              "MPI_Allgatherv");
      },
      [&](MPI_Request* r) {
        check(MPI_Iallgatherv(send, mine_count, MPI_BYTE, all, counts.data(), at.data(), MPI_BYTE, comm_->comm, r),
              "MPI_Iallgatherv");
      });
}

void MpiProcessGroup::alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                               const std::vector<int64_t>& recv_bytes) {
  const std::vector<int> sc = as_ints(send_bytes, "alltoall"), rc = as_ints(recv_bytes, "alltoall");
  const std::vector<int> sd = offsets(sc, "alltoall"), rd = offsets(rc, "alltoall");
  ArrivalWatch& watch = *comm_->watch;
  watch.arrive("all-to-all");
  collective(
      watch, "all-to-all",
      [&] {
        check(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_->comm),
              "MPI_Alltoallv");
      },
      [&](MPI_Request* r) {
        check(MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(), MPI_BYTE, comm_->comm,
                             r),
              "MPI_Ialltoallv");
      });
}

void MpiProcessGroup::sum(int64_t* values, int64_t count) {
  if (count > INT_MAX) throw Error(ExitCode::Unsupported, "MPI: a sum of over 2^31 integers");
  const int n = static_cast<int>(count);
  ArrivalWatch& watch = *comm_->watch;
  watch.arrive("integer sum");
  collective(
      watch, "integer sum",
      [&] { check(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, MPI_SUM, comm_->comm), "MPI_Allreduce"); },
      [&](MPI_Request* r) {
        check(MPI_Iallreduce(MPI_IN_PLACE, values, n, MPI_INT64_T, MPI_SUM, comm_->comm, r), "MPI_Iallreduce");
      });
}

void MpiProcessGroup::broadcast(std::string& bytes, int root) {
  int64_t size = static_cast<int64_t>(bytes.size());
  ArrivalWatch& watch = *comm_->watch;
  watch.arrive("broadcast");  // once: the size and the bytes are one exchange
  auto bcast = [&](void* data, int count, MPI_Datatype type) {
    collective(
        watch, "broadcast", [&] { check(MPI_Bcast(data, count, type, root, comm_->comm), "MPI_Bcast"); },
        [&](MPI_Request* r) { check(MPI_Ibcast(data, count, type, root, comm_->comm, r), "MPI_Ibcast"); });
  };
  bcast(&size, 1, MPI_INT64_T);
  if (size > INT_MAX) throw Error(ExitCode::Unsupported, "MPI: a broadcast of over 2 GiB");
  bytes.resize(static_cast<size_t>(size));
  bcast(bytes.data(), static_cast<int>(size), MPI_BYTE);
}

ProcessGroup::Ticket MpiProcessGroup::start_alltoall(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                                                     const std::vector<int64_t>& recv_bytes) {
  const Ticket ticket = comm_->next_ticket++;
  Comm::Posted& p = comm_->posted[ticket];
  p.what = "all-to-all";
  p.send_counts = as_ints(send_bytes, "alltoall"), p.recv_counts = as_ints(recv_bytes, "alltoall");
  p.send_at = offsets(p.send_counts, "alltoall"), p.recv_at = offsets(p.recv_counts, "alltoall");
  check(MPI_Ialltoallv(send, p.send_counts.data(), p.send_at.data(), MPI_BYTE, recv, p.recv_counts.data(),
                       p.recv_at.data(), MPI_BYTE, comm_->comm, &p.request),
        "MPI_Ialltoallv");
  return ticket;
}

ProcessGroup::Ticket MpiProcessGroup::start_allgather(const void* mine, void* all, const std::vector<int64_t>& bytes) {
  const Ticket ticket = comm_->next_ticket++;
  Comm::Posted& p = comm_->posted[ticket];
  p.what = "all-gather";
  p.recv_counts = as_ints(bytes, "allgather"), p.recv_at = offsets(p.recv_counts, "allgather");
  char* base = static_cast<char*>(all);
  const void* send = mine == base + p.recv_at[static_cast<size_t>(rank_)] ? MPI_IN_PLACE : mine;
  check(MPI_Iallgatherv(send, p.recv_counts[static_cast<size_t>(rank_)], MPI_BYTE, all, p.recv_counts.data(),
                        p.recv_at.data(), MPI_BYTE, comm_->comm, &p.request),
        "MPI_Iallgatherv");
  return ticket;
}

bool MpiProcessGroup::test(Ticket ticket) {
  const auto it = comm_->posted.find(ticket);
  if (it == comm_->posted.end()) throw Error(ExitCode::Internal, fmt::format("MPI: no posted exchange {}", ticket));
  if (it->second.request == MPI_REQUEST_NULL) return true;
  int done = 0;
  check(MPI_Test(&it->second.request, &done, MPI_STATUS_IGNORE), "MPI_Test");  // a finished request becomes null
  return done != 0;
}

void MpiProcessGroup::complete(Ticket ticket) {
  const auto it = comm_->posted.find(ticket);
  if (it == comm_->posted.end()) throw Error(ExitCode::Internal, fmt::format("MPI: no posted exchange {}", ticket));
  comm_->watch->finish(&it->second.request, it->second.what);  // at once if it already finished
  comm_->posted.erase(it);
}

void MpiProcessGroup::abort(int exit_code) {
  MPI_Abort(comm_->comm != MPI_COMM_NULL ? comm_->comm : MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace convgen
