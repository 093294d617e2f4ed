#include "runtime/distributed/arrival_watch.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedules/errors.h"

namespace convgen {

namespace {

constexpr int kTag = 7;  // the watch's communicator carries notices only

// Spinning on MPI_Test for this long catches a notice already on its way; after it the
// wait polls in short sleeps so that a rank waiting for a slow one does not spin for minutes.
constexpr std::chrono::microseconds kSpin{2000}, kNap{100};
// A pause this long between two polls means this rank was not running (stopped, or
// descheduled): the gap is its own, and counting it against the others would blame them.
constexpr std::chrono::milliseconds kPaused{250};

}  // namespace

ArrivalWatch::ArrivalWatch(MPI_Comm world) : world_(world) {
  MPI_Comm_dup(world, &comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  const auto n = static_cast<size_t>(size_);
  arrived_.assign(n, 0);
  busy_.assign(n, 0);
  heard_.assign(n, Clock::now());
  received_.assign(n, Notice{});
  receives_.assign(n, MPI_REQUEST_NULL);
}

ArrivalWatch::~ArrivalWatch() {
  for (int p = 0; p < size_; ++p) {
    MPI_Request& r = receives_[static_cast<size_t>(p)];
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  // Notices are two integers: sent eagerly, they complete whether or not a peer still
  // receives them.
  for (Sent& s : sent_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
  MPI_Comm_free(&comm_);
}

void ArrivalWatch::arm(double seconds) {
  if (timeout_ <= 0 && seconds > 0)
    for (int p = 0; p < size_; ++p)
      if (p != rank_) post_receive(p);
  timeout_ = seconds > 0 ? seconds : timeout_;
}

void ArrivalWatch::post_receive(int peer) {
  const auto i = static_cast<size_t>(peer);
  MPI_Irecv(&received_[i], 2, MPI_INT64_T, peer, kTag, comm_, &receives_[i]);
}

void ArrivalWatch::poll() {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const auto i = static_cast<size_t>(p);
    for (;;) {
      int done = 0;
      MPI_Test(&receives_[i], &done, MPI_STATUS_IGNORE);
      if (!done) break;
      const Notice n = received_[i];
      heard_[i] = Clock::now();
      if (n.kind == kArrived) arrived_[i] = std::max(arrived_[i], n.seq);
      else if (n.kind == kBusy || n.kind == kIdle) busy_[i] = n.kind == kBusy;
      post_receive(p);
    }
  }
  while (!sent_.empty()) {
    int done = 0;
    MPI_Test(&sent_.front().request, &done, MPI_STATUS_IGNORE);
    if (!done) break;
    sent_.pop_front();
  }
}

void ArrivalWatch::send_all(Kind kind) {
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    sent_.push_back(Sent{Notice{kind, seq_}, MPI_REQUEST_NULL});
    MPI_Isend(&sent_.back().notice, 2, MPI_INT64_T, p, kTag, comm_, &sent_.back().request);
  }
}

// While waiting, a rank says it is alive a few times per timeout (at most once a
// second): what tells a rank stopped inside a collective from one merely slow.
void ArrivalWatch::heartbeat(Clock::time_point now) {
  const double every = std::min(1.0, timeout_ / 4);
  if (std::chrono::duration<double>(now - last_beat_).count() < every) return;
  last_beat_ = now;
  send_all(kAlive);
}

void ArrivalWatch::busy(bool on) {
  if (armed()) send_all(on ? kBusy : kIdle);
}

void ArrivalWatch::arrive(const char* what) {
  if (!armed()) return;
  ++seq_;
  send_all(kArrived);
  const auto start = Clock::now();
  last_beat_ = start;
  auto last = start;
  double counted = 0;  // seconds spent waiting with a missing rank that was not busy
  std::vector<int> missing;
  for (;;) {
    poll();
    missing.clear();
    bool any_idle = false;
    for (int p = 0; p < size_; ++p) {
      const auto i = static_cast<size_t>(p);
      if (p == rank_ || arrived_[i] >= seq_) continue;
      missing.push_back(p);
      any_idle = any_idle || !busy_[i];
    }
    if (missing.empty()) return;
    const auto now = Clock::now();
    if (any_idle && now - last < kPaused) counted += std::chrono::duration<double>(now - last).count();
    last = now;
    if (counted > timeout_) time_out(what, missing, false);
    heartbeat(now);
    if (now - start > kSpin) std::this_thread::sleep_for(kNap);
  }
}

void ArrivalWatch::finish(MPI_Request* request, const char* what) {
  if (!armed()) {
    MPI_Wait(request, MPI_STATUS_IGNORE);
    return;
  }
  auto start = Clock::now(), last = start;
  std::vector<int> silent;
  for (;;) {
    int done = 0;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return;
    poll();
    const auto now = Clock::now();
    if (now - last >= kPaused) start = now;  // this rank was paused: the others' silence starts now
    last = now;
    silent.clear();
    for (int p = 0; p < size_; ++p) {
      const auto i = static_cast<size_t>(p);
      if (p == rank_) continue;
      const auto since = std::max(heard_[i], start);
      if (std::chrono::duration<double>(now - since).count() > timeout_) silent.push_back(p);
    }
    if (!silent.empty()) time_out(what, silent, true);
    heartbeat(now);
    if (now - start > kSpin) std::this_thread::sleep_for(kNap);
  }
}

void ArrivalWatch::time_out(const char* what, const std::vector<int>& ranks, bool inside) const {
  const std::string who = fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ", "));
  if (inside)
    std::fprintf(stderr,
                 "convgen: rank %d: %s went silent for %g s inside exchange %lld (%s); ending the run on every rank\n",
                 rank_, who.c_str(), timeout_, static_cast<long long>(seq_), what);
  else
    std::fprintf(stderr,
                 "convgen: rank %d: %s did not reach exchange %lld (%s) within %g s (time spent building kernels "
                 "not counted); ending the run on every rank\n",
                 rank_, who.c_str(), static_cast<long long>(seq_), what, timeout_);
  std::fflush(stderr);
  MPI_Abort(world_, static_cast<int>(ExitCode::RankTimeout));
  std::_Exit(static_cast<int>(ExitCode::RankTimeout));
}

}  // namespace convgen
