#include "base/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace edgevit {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  return "an unknown kind";
}

}  // namespace

Result<ReadOnlyFile> ReadOnlyFile::open(const std::string& path, const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return not_found(path + ": no such file");
    return io_error(path + ": cannot open the " + what + ": " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error(path + ": cannot stat the " + what + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error(path + ": " + what + " is not a regular file (" + file_kind(st.st_mode) + ")");
  }
  ReadOnlyFile f;
  f.path_ = path;
  f.what_ = what;
  f.fd_ = fd;
  f.size_ = static_cast<int64_t>(st.st_size);
  return f;
}

ReadOnlyFile::ReadOnlyFile(ReadOnlyFile&& other) noexcept { *this = std::move(other); }

ReadOnlyFile& ReadOnlyFile::operator=(ReadOnlyFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
    fd_ = other.fd_;
    size_ = other.size_;
    other.fd_ = -1;
    other.size_ = 0;
  }
  return *this;
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::string> ReadOnlyFile::read_all(int64_t max_bytes, StatusCode too_large) const {
  if (size_ > max_bytes)
    return Status(too_large, path_ + ": " + what_ + " is " + std::to_string(size_) + " bytes, more than the " +
                                 std::to_string(max_bytes) + "-byte limit");
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(size_));
  } catch (const std::bad_alloc&) {
    return Status(too_large, path_ + ": cannot allocate " + std::to_string(size_) + " bytes for the " + what_);
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd_, &bytes[done], bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(path_ + ": reading the " + what_ + " failed: " + std::strerror(errno));
    if (n == 0) break;  // the file shrank since open: what is there
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

Result<std::string> read_regular_file(const std::string& path, const std::string& what, int64_t max_bytes,
                                      StatusCode too_large) {
  EV_ASSIGN_OR_RETURN(ReadOnlyFile file, ReadOnlyFile::open(path, what));
  return file.read_all(max_bytes, too_large);
}

}  // namespace edgevit
