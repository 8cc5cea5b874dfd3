// safetensors reader (mmap, validated as strictly as huggingface/safetensors), dtype conversion, and an F32
// writer. Format: 8-byte little-endian header length N, N bytes of JSON header, then the data section.
//
//   file: [u64 N][header JSON, N bytes, space padded][data section: tensors back to back, no holes]
//   header: {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}
//   data_offsets are relative to the start of the data section.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace edgevit {

// Element types edgevit reads. Other safetensors dtypes (F64, I64, U8, ...) are recognised by name and
// rejected as unsupported when a file is opened.
enum class DType { kF32, kF16, kBF16 };

const char* dtype_name(DType d);  // "F32" | "F16" | "BF16" (safetensors spelling)
size_t dtype_size(DType d);       // bytes per element

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  size_t offset = 0;  // byte offset inside the data section
  size_t nbytes = 0;
};

// A safetensors file mapped read-only. Move-only; the mapping lives as long as the object, and pointers
// returned by data() are valid until then.
class SafetensorsFile {
 public:
  // The largest header the reference implementation accepts (MAX_HEADER_SIZE).
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;

  // JSON nesting the header may use: root object, tensor entry, shape/offsets array (3); deeper text is
  // refused while parsing, before anything recursive (dump() in messages) could walk it.
  static constexpr int kMaxHeaderDepth = 3;

  // Tensor entries a header may hold. A ViT-B checkpoint has about 150 and the largest published
  // safetensors shards a few thousand; the 100 MB header limit alone would allow over a million, each
  // costing ~1 KB of parsed JSON. Counted while scanning, so a larger header is refused after reading only
  // this many entries (docs/reliability.md).
  static constexpr size_t kMaxTensors = 100'000;

  static Result<SafetensorsFile> open(const std::string& path);
  // The same checks on a file image already in memory (fuzzing, embedded data). The caller keeps
  // ownership of `bytes`, which must outlive the returned object; `name` stands for the path in messages.
  static Result<SafetensorsFile> open_memory(const uint8_t* bytes, size_t size, const std::string& name);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  // In file order of their data (ascending offset).
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(const std::string& name) const;
  // First byte of the tensor's data inside the mapping (not necessarily aligned for its dtype).
  const uint8_t* data(const TensorInfo& info) const { return data_ + info.offset; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  void release();
  // Validates the image [base, base + size) and fills tensors_, index_, metadata_ and data_.
  Status parse(const uint8_t* base, size_t size);

  std::string path_;
  void* map_ = nullptr;            // owned mapping of the whole file (nullptr after a move or from memory)
  size_t size_ = 0;
  const uint8_t* data_ = nullptr;  // start of the data section inside map_
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

// Scalar conversions (IEEE 754 binary16 / bfloat16 bit patterns). f32 -> f16 rounds to nearest even;
// overflow gives infinity, NaN stays NaN (quiet).
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);

// Convert info.numel elements from src (the tensor's raw little-endian bytes, any alignment) to dst.
void convert_to_f32(const TensorInfo& info, const uint8_t* src, float* dst);
void convert_to_f16(const TensorInfo& info, const uint8_t* src, uint16_t* dst);

struct NamedTensorView {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;  // product(shape) floats; the caller keeps ownership
};

// Writes the tensors as F32 with deterministic bytes: tensors sorted by name, data laid out in that
// order, header JSON with sorted keys padded with spaces to a multiple of 8 bytes. Writes PATH.tmp.<pid>
// and renames it over PATH, so PATH is never left half-written.
Status write_safetensors(const std::string& path, const std::vector<NamedTensorView>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace edgevit
