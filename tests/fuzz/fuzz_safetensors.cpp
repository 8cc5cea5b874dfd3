// libFuzzer target: the safetensors reader (header length, JSON header, offsets, contiguity) on arbitrary
// bytes, through SafetensorsFile::open_memory (the same checks as open() without the mmap). A file that
// opens must hold tensors whose bytes lie inside the input and convert without faults.
//
// Headers at scale (issue #22: parsing was quadratic in the entry count): an input that starts with 0xFE
// is not a file but a recipe. Byte 1 picks the entry count, 2^(byte % 18) (up to 131072, past
// SafetensorsFile::kMaxTensors); the rest is one entry's JSON value, repeated under the names "t0", "t1",
// ... with '@' replaced by 4*i and '$' by 4*i + 4, followed by a zeroed data section of 4 bytes per entry.
// libFuzzer's -timeout (10 s per input in tools/fuzz.sh) catches a super-linear path.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/safetensors.h"

namespace {

std::vector<uint8_t> header_at_scale(const uint8_t* data, size_t size) {
  const size_t count = size_t{1} << (data[1] % 18);
  const std::string entry(reinterpret_cast<const char*>(data + 2), size - 2);
  std::string header = "{";
  for (size_t i = 0; i < count; ++i) {
    header += (i ? ",\"t" : "\"t") + std::to_string(i) + "\":";
    for (char c : entry) {
      if (c == '@') header += std::to_string(4 * i);
      else if (c == '$') header += std::to_string(4 * i + 4);
      else header += c;
    }
  }
  header += "}";
  std::vector<uint8_t> file(8 + header.size() + 4 * count, 0);
  for (int i = 0; i < 8; ++i) file[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  std::copy(header.begin(), header.end(), file.begin() + 8);
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> recipe;
  if (size >= 2 && data[0] == 0xFE) {
    recipe = header_at_scale(data, size);
    data = recipe.data();
    size = recipe.size();
  }
  auto file = edgevit::SafetensorsFile::open_memory(data, size, "fuzz.safetensors");
  if (!file.ok()) return 0;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  for (const edgevit::TensorInfo& t : file->tensors()) {
    const uint8_t* p = file->data(t);
    // Invariants open_memory promises: every tensor lies inside the input, and find() sees it.
    if (p < data || p + t.nbytes > data + size) std::abort();
    if (t.nbytes != static_cast<size_t>(t.numel) * edgevit::dtype_size(t.dtype)) std::abort();
    if (file->find(t.name) != &t) std::abort();
    f32.resize(static_cast<size_t>(t.numel));
    f16.resize(static_cast<size_t>(t.numel));
    edgevit::convert_to_f32(t, p, f32.data());
    edgevit::convert_to_f16(t, p, f16.data());
  }
  return 0;
}
