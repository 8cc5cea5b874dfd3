// libFuzzer target: the safetensors reader (header length, JSON header, offsets, contiguity) on arbitrary
// bytes, through SafetensorsFile::open_memory (the same checks as open() without the mmap). A file that
// opens must hold tensors whose bytes lie inside the input and convert without faults.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
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
