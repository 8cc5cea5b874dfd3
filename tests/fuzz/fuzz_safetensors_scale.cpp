// libFuzzer target: safetensors headers at scale (issue #22: parsing was quadratic in the entry count,
// 10k entries 0.9 s, 80k over 300 s). An input is a recipe, not a file: byte 0 picks the entry count,
// 2^(byte % 15) up to 16384, or SafetensorsFile::kMaxTensors + 1 for bytes from 0xF0 (refused after the
// scan); the rest is one entry's JSON value, repeated under the names "t0", "t1", ... with '@' replaced by
// 4*i and '$' by 4*i + 4, followed by a zeroed data section of 4 bytes per entry. Linear parsing takes
// ~0.4 s for 16384 entries under ASan + UBSan, a quadratic one minutes: libFuzzer's -timeout (10 s per input
// in tools/fuzz.sh) reports it. A separate target so that fuzz_safetensors keeps its pace (~4000 small
// inputs a second; these take 30 ms to 1 s each). A header that opens must satisfy fuzz_safetensors'
// invariants.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t count =
      data[0] >= 0xF0 ? edgevit::SafetensorsFile::kMaxTensors + 1 : size_t{1} << (data[0] % 15);
  const std::string entry(reinterpret_cast<const char*>(data + 1), size - 1);
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

  auto opened = edgevit::SafetensorsFile::open_memory(file.data(), file.size(), "fuzz_scale.safetensors");
  if (!opened.ok()) return 0;
  if (opened->tensors().size() > edgevit::SafetensorsFile::kMaxTensors) std::abort();
  for (const edgevit::TensorInfo& t : opened->tensors()) {
    const uint8_t* p = opened->data(t);
    if (p < file.data() || p + t.nbytes > file.data() + file.size()) std::abort();
    if (opened->find(t.name) != &t) std::abort();
  }
  return 0;
}
