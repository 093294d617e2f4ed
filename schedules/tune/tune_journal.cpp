#include "schedules/tune/tune_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "schedules/errors.h"

namespace convgen {
TuneJournal::TuneJournal(std::string path) : path_(std::move(path)), inflight_path_(path_ + ".inflight") {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);
  if (fd_ < 0) throw io_error(path_, "cannot open for tuning", errno);
  // The lock goes with the process: a killed tuner never leaves the file locked.
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    if (err == EWOULDBLOCK)
      throw Error(ExitCode::Busy, fmt::format("{}: another convgen tune is writing this records file; wait for it "
                                              "to finish (or stop it), or tune into another file",
                                              path_));
    throw io_error(path_, "cannot lock", err);
  }
  try {
    int64_t torn = -1;
    records_ = read_records(path_, &torn, &training_);
    if (torn >= 0) {
      const off_t size = ::lseek(fd_, 0, SEEK_END);
      repaired_ = static_cast<int64_t>(size) - torn;
      if (::ftruncate(fd_, torn) != 0) throw io_error(path_, "cannot cut off its incomplete last line", errno);
      if (::fsync(fd_) != 0) throw io_error(path_, "cannot fsync", errno);
    }
    // A whole last line without its newline (a hand-written file, or a write that lost
    // only the newline) is ended, so the next line is not appended onto it.
    const off_t size = ::lseek(fd_, 0, SEEK_END);
    char last = '\n';
    if (size > 0 && ::pread(fd_, &last, 1, size - 1) != 1) throw io_error(path_, "cannot read", errno);
    if (last != '\n') {
      if (::write(fd_, "\n", 1) != 1) throw io_error(path_, "cannot append", errno);
      if (::fsync(fd_) != 0) throw io_error(path_, "cannot fsync", errno);
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

TuneJournal::~TuneJournal() {
  if (fd_ >= 0) ::close(fd_);
}

const ScheduleRecord* TuneJournal::find_trial(const ScheduleKey& key, const ConvSchedule& s,
                                              const Provenance& p) const {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it) {
    if (it->kind != RecordKind::Trial || it->key != key || it->schedule != s) continue;
    const Provenance& q = it->tuning.provenance;
    if (q.cpu == p.cpu && q.threads == p.threads && q.variant == p.variant && q.micro_batch == p.micro_batch &&
        q.timing_method == p.timing_method)
      return &*it;
  }
  return nullptr;
}

const ScheduleRecord* TuneJournal::find_tuned(const ScheduleKey& key) const {
  for (auto it = records_.rbegin(); it != records_.rend(); ++it)
    if (it->kind == RecordKind::Schedule && it->key == key && it->tuning.present) return &*it;
  return nullptr;
}

void TuneJournal::append(const ScheduleRecord& r) {
  const std::string line = to_json_line(r);
  parse_record_line(line, fmt::format("{}: new line", path_));  // never write what cannot be read
  append_line(line);
  records_.push_back(r);
}

void TuneJournal::append(const TrainingRecord& r) {
  const std::string line = to_json_line(r);
  parse_training_record_line(line, fmt::format("{}: new line", path_));
  append_line(line);
  training_.push_back(r);
}

void TuneJournal::append_line(const std::string& line) {
  const std::string text = line + "\n";
  // One write: O_APPEND puts it at the end whole; a crash mid-way leaves a torn line
  // without its newline, which the next open cuts off.
  const ssize_t n = ::write(fd_, text.data(), text.size());
  if (n != static_cast<ssize_t>(text.size())) throw io_error(path_, "cannot append", n < 0 ? errno : EIO);
  if (::fsync(fd_) != 0) throw io_error(path_, "cannot fsync", errno);
}

const TrainingRecord* TuneJournal::find_training_trial(const TrainingKey& key, int64_t micro_batch,
                                                       const std::map<std::string, std::string>& modes,
                                                       const Provenance& p) const {
  for (auto it = training_.rbegin(); it != training_.rend(); ++it) {
    if (it->kind != RecordKind::Trial || it->key != key || it->micro_batch != micro_batch ||
        it->parallel_modes != modes)
      continue;
    const Provenance& q = it->tuning.provenance;
    if (q.cpu == p.cpu && q.threads == p.threads && q.timing_method == p.timing_method) return &*it;
  }
  return nullptr;
}

// PATH.inflight: "<attempts> <key and schedule, one line>". Written whole through a
// rename (no fsync: losing it after a power cut only means one more attempt).
namespace {
std::string inflight_id(const ScheduleKey& key, const ConvSchedule& s) {
  return fmt::format("{}|{}|{}|{}|{}", key.descriptor, key.pass, key.target, key.generator_hash, describe(s));
}
}  // namespace

int TuneJournal::begin_trial(const ScheduleKey& key, const ConvSchedule& s) {
  const std::string id = inflight_id(key, s);
  int begun = 0;
  {
    std::ifstream in(inflight_path_);
    std::string noted;
    if (in >> begun && std::getline(in >> std::ws, noted) && noted != id) begun = 0;
  }
  const std::string tmp = inflight_path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << begun + 1 << ' ' << id << '\n';
    if (!out) throw Error(ExitCode::Io, fmt::format("{}: cannot write", tmp));
  }
  if (std::rename(tmp.c_str(), inflight_path_.c_str()) != 0) throw io_error(inflight_path_, "cannot write", errno);
  return begun;
}

void TuneJournal::end_trial() { ::unlink(inflight_path_.c_str()); }

}  // namespace convgen
