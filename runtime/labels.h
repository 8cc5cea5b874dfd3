// Labels files: one class name per line, named by a model config's `labels:` key. Read through
// ReadOnlyFile (base/file_io.h): regular files only, bounded before anything is read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace edgevit {

// 16 MiB: ImageNet-21k's 21843 labels take about 0.5 MB.
inline constexpr int64_t kMaxLabelsBytes = int64_t{16} << 20;
inline constexpr size_t kMaxLabels = 1'000'000;

// One label per line (empty lines kept as "", a CR before the LF dropped; no line after a final LF).
// With num_classes > 0 the file must hold exactly that many lines. Errors name the file: kNotFound when
// missing, kIoError when it is not a regular file (a FIFO, /dev/zero, a directory) or cannot be read,
// kConfigError when over kMaxLabelsBytes or kMaxLabels lines, or when its line count is not num_classes.
Result<std::vector<std::string>> load_labels(const std::string& path, int num_classes);

}  // namespace edgevit
