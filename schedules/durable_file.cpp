#include "schedules/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "schedules/errors.h"

namespace convgen {

namespace {

// 0 or the errno of the first failure; EINTR is retried.
int write_all(int fd, std::string_view bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;  // no progress and no error: give up rather than spin
    done += static_cast<size_t>(n);
  }
  return 0;
}

}  // namespace

void write_file_durably(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  const std::string temp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()))).string();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error(path, "cannot write", errno);
  int err = write_all(fd, bytes);
  while (err == 0 && ::fsync(fd) != 0)
    if (errno != EINTR) err = errno;
  // After a close() interrupted by a signal Linux has released the descriptor, and the
  // data is already on disk: EINTR is not a failure here.
  if (::close(fd) != 0 && err == 0 && errno != EINTR) err = errno;
  if (err == 0 && ::rename(temp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(temp.c_str());
    throw io_error(path, "cannot write", err);
  }
  // The rename is durable only once the directory is.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw io_error(path, "cannot sync the directory", errno);
  int dir_err = 0;
  while (::fsync(dfd) != 0) {
    if (errno == EINTR) continue;
    // EINVAL: the file system cannot sync directories; nothing more can be done.
    if (errno != EINVAL) dir_err = errno;
    break;
  }
  ::close(dfd);
  if (dir_err != 0) throw io_error(path, "cannot sync the directory", dir_err);
}

}  // namespace convgen
