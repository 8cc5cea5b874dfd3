// stb_image and stb_image_resize, compiled into edgevit from Debian's libstb-dev headers (no copy of stb in
// this tree), with stb_image's allocations charged to the thread's StbDecodeBudget (stb_image_impl.h).
// Every block carries a 16-byte header holding its size, so realloc and free know what they release;
// 16 bytes also keep malloc's alignment. Compiled without warnings and, in sanitizer builds, without
// UBSan (third-party code with known implementation-defined shifts; runtime/CMakeLists.txt); ASan and
// the fuzzers' coverage still reach it.
#include "runtime/stb_image_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace edgevit {
namespace {

constexpr size_t kBlockHeader = 16;

struct BudgetState {
  bool active = false;
  size_t limit = 0;
  int64_t live = 0;      // stb bytes live on this thread (frees of blocks from before a budget included)
  int64_t base = 0;      // `live` when the budget started
  int64_t peak = 0;      // most live - base under the budget
  size_t refused = 0;    // first refused request: live - base it would have reached
};

thread_local BudgetState t_budget;

// Whether `more` bytes may be added to the live total; records a refusal.
bool admit(size_t more) {
  BudgetState& b = t_budget;
  if (!b.active) return true;
  const int64_t used = b.live - b.base;
  const uint64_t want = static_cast<uint64_t>(used > 0 ? used : 0) + more;
  if (more > b.limit || want > b.limit) {
    if (b.refused == 0) b.refused = static_cast<size_t>(std::min<uint64_t>(want, std::numeric_limits<size_t>::max()));
    return false;
  }
  return true;
}

void charge(int64_t delta) {
  BudgetState& b = t_budget;
  b.live += delta;
  if (b.active && b.live - b.base > b.peak) b.peak = b.live - b.base;
}

size_t block_size(void* p) {
  size_t n;
  std::memcpy(&n, static_cast<char*>(p) - kBlockHeader, sizeof n);
  return n;
}

}  // namespace

StbDecodeBudget::StbDecodeBudget(size_t limit_bytes) : limit_(limit_bytes) {
  BudgetState& b = t_budget;
  b.active = true;
  b.limit = limit_bytes;
  b.base = b.live;
  b.peak = 0;
  b.refused = 0;
}

StbDecodeBudget::~StbDecodeBudget() { t_budget.active = false; }

bool StbDecodeBudget::exceeded() const { return t_budget.refused != 0; }
size_t StbDecodeBudget::refused_bytes() const { return t_budget.refused; }
size_t StbDecodeBudget::peak_bytes() const { return static_cast<size_t>(t_budget.peak); }

}  // namespace edgevit

extern "C" {

void* edgevit_stbi_malloc(size_t size) {
  if (size > std::numeric_limits<size_t>::max() - edgevit::kBlockHeader || !edgevit::admit(size)) return nullptr;
  // Zeroed: stb_image 2.27 reads memory it never wrote when a JPEG scan names a Huffman table no DHT
  // defined (stbi__jpeg is malloc'd, its tables left as they were): with stale heap contents the slow
  // decode path indexed far outside the table (heap-use-after-free and SEGV under ASan, found by
  // fuzz_image on the 16-core host). Zeroed tables take the fast path, which stays inside the struct and
  // decodes deterministically.
  char* block = static_cast<char*>(std::calloc(1, size + edgevit::kBlockHeader));
  if (block == nullptr) return nullptr;
  std::memcpy(block, &size, sizeof size);
  edgevit::charge(static_cast<int64_t>(size));
  return block + edgevit::kBlockHeader;
}

void edgevit_stbi_free(void* p) {
  if (p == nullptr) return;
  edgevit::charge(-static_cast<int64_t>(edgevit::block_size(p)));
  std::free(static_cast<char*>(p) - edgevit::kBlockHeader);
}

// On failure the old block stays valid (stb frees it), as with realloc.
void* edgevit_stbi_realloc(void* p, size_t size) {
  if (p == nullptr) return edgevit_stbi_malloc(size);
  const size_t old = edgevit::block_size(p);
  if (size > std::numeric_limits<size_t>::max() - edgevit::kBlockHeader) return nullptr;
  if (size > old && !edgevit::admit(size - old)) return nullptr;
  char* block = static_cast<char*>(std::realloc(static_cast<char*>(p) - edgevit::kBlockHeader, size + edgevit::kBlockHeader));
  if (block == nullptr) return nullptr;
  std::memcpy(block, &size, sizeof size);
  if (size > old) std::memset(block + edgevit::kBlockHeader + old, 0, size - old);  // zeroed, as malloc'd
  edgevit::charge(static_cast<int64_t>(size) - static_cast<int64_t>(old));
  return block + edgevit::kBlockHeader;
}

}  // extern "C"

#define STBI_MALLOC(size) edgevit_stbi_malloc(size)
#define STBI_REALLOC(p, size) edgevit_stbi_realloc(p, size)
#define STBI_FREE(p) edgevit_stbi_free(p)
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_IMPLEMENTATION
// stb_image_resize 0.97 asserts that each output pixel's filter weights sum to 0.9..1.1 before it
// normalises them to exactly 1; the triangle filter misses that window at some ratios (12x521 -> 8x347,
// 12x100 -> 8x67: sums outside it, outputs correct and finite after the normalisation). Release builds
// compile the assert out; asserts-on builds (the sanitizer and fuzz builds) would abort on a valid image.
// Found by fuzz_image (docs/reliability.md, findings); tests/runtime/inputs_test covers the ratio.
#define STBIR_ASSERT(x) ((void)0)
#include <stb_image.h>
#include <stb_image_resize.h>
