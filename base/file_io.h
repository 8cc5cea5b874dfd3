// Files named by users (model and device configs, checkpoints, inputs, labels), opened so that no path can
// block the caller or make it read without bound: open(2) with O_NONBLOCK (a FIFO without a writer does
// not hang open), fstat on the open descriptor (no race with a rename), regular files only (a FIFO,
// character or block device such as /dev/zero, directory or socket is refused by name), and a size cap
// checked before anything is allocated. Every loader reads through here (docs/reliability.md).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace edgevit {

class ReadOnlyFile {
 public:
  // kNotFound if `path` does not exist; kIoError if it cannot be opened or is not a regular file. `what`
  // names the file's role in messages ("labels file", "input file").
  static Result<ReadOnlyFile> open(const std::string& path, const std::string& what);

  ReadOnlyFile(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile& operator=(ReadOnlyFile&& other) noexcept;
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;
  ~ReadOnlyFile();

  int fd() const { return fd_; }              // owned; closed by the destructor
  int64_t size() const { return size_; }      // from fstat at open
  const std::string& path() const { return path_; }

  // The whole file (as large as it was at open). A file over max_bytes is refused with `too_large` before
  // anything is allocated; kIoError if a read fails.
  Result<std::string> read_all(int64_t max_bytes, StatusCode too_large) const;

 private:
  ReadOnlyFile() = default;
  std::string path_, what_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// ReadOnlyFile::open then read_all.
Result<std::string> read_regular_file(const std::string& path, const std::string& what, int64_t max_bytes,
                                      StatusCode too_large);

}  // namespace edgevit
