#include "runtime/labels.h"

#include "base/file_io.h"

namespace edgevit {

Result<std::vector<std::string>> load_labels(const std::string& path, int num_classes) {
  EV_ASSIGN_OR_RETURN(const ReadOnlyFile file, ReadOnlyFile::open(path, "labels file"));
  if (file.size() > kMaxLabelsBytes)
    return config_error(path + ": labels file is " + std::to_string(file.size()) + " bytes, more than the " +
                        std::to_string(kMaxLabelsBytes) + "-byte limit (kMaxLabelsBytes)");
  EV_ASSIGN_OR_RETURN(const std::string text, file.read_all(kMaxLabelsBytes, StatusCode::kConfigError));
  std::vector<std::string> labels;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    const size_t next = end == std::string::npos ? text.size() : end + 1;
    if (end == std::string::npos) end = text.size();
    if (end > begin && text[end - 1] == '\r') --end;
    if (labels.size() == kMaxLabels)
      return config_error(path + ": labels file has more than " + std::to_string(kMaxLabels) + " lines");
    labels.emplace_back(text, begin, end - begin);
    begin = next;
  }
  if (num_classes > 0 && labels.size() != static_cast<size_t>(num_classes))
    return config_error(path + ": labels file has " + std::to_string(labels.size()) +
                        " lines, the model has num_classes " + std::to_string(num_classes) +
                        " (one label per class, one per line)");
  return labels;
}

}  // namespace edgevit
