#include "runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/file_io.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so is every target");

namespace edgevit {
namespace {

using json = nlohmann::json;

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// safetensors dtypes that exist but edgevit does not read.
bool is_other_safetensors_dtype(const std::string& s) {
  static const char* const kOthers[] = {"F64", "I64", "I32", "I16", "I8",  "U64", "U32", "U16",
                                        "U8",  "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                        "F6_E3M2", "F4", "C64"};
  for (const char* o : kOthers)
    if (s == o) return true;
  return false;
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::kF32;
  else if (s == "F16") *out = DType::kF16;
  else if (s == "BF16") *out = DType::kBF16;
  else return false;
  return true;
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Parses one header entry (everything but offsets/contiguity, which need all entries).
Status parse_entry(const std::string& path, const std::string& name, const json& entry, TensorInfo* info,
                   uint64_t* begin, uint64_t* end) {
  auto fail = [&](const std::string& reason) {
    return checkpoint_error(path + ": tensor '" + name + "': " + reason);
  };
  if (!entry.is_object()) return fail("header entry is not a JSON object");
  for (auto it = entry.begin(); it != entry.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      return fail("unknown key '" + it.key() + "' (expected dtype, shape, data_offsets)");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) return fail(std::string("missing '") + key + "'");

  const json& dtype = entry["dtype"];
  if (!dtype.is_string()) return fail("'dtype' is not a string");
  const std::string dtype_str = dtype.get<std::string>();
  if (!parse_dtype(dtype_str, &info->dtype)) {
    if (is_other_safetensors_dtype(dtype_str))
      return fail("unsupported dtype '" + dtype_str + "' (edgevit reads F32, F16 and BF16)");
    return fail("unknown dtype '" + dtype_str + "'");
  }

  const json& shape = entry["shape"];
  if (!shape.is_array()) return fail("'shape' is not an array");
  uint64_t numel = 1;
  for (const json& d : shape) {
    if (!d.is_number_unsigned()) return fail("'shape' must hold non-negative integers, got " + d.dump());
    const uint64_t dim = d.get<uint64_t>();
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, dim, &numel))
      return fail("shape " + shape.dump() + " overflows 64-bit element count");
    info->shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t nbytes = 0;
  if (numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(info->dtype)), &nbytes))
    return fail("shape " + shape.dump() + " overflows 64-bit byte count");

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    return fail("'data_offsets' must be [begin, end] with non-negative integers, got " + offsets.dump());
  *begin = offsets[0].get<uint64_t>();
  *end = offsets[1].get<uint64_t>();
  if (*begin > *end) return fail("data_offsets " + offsets.dump() + " go backwards (begin > end)");
  if (*end - *begin != nbytes)
    return fail("shape " + shape_string(info->shape) + " x " + dtype_str + " is " + std::to_string(nbytes) +
                " bytes but data_offsets " + offsets.dump() + " span " + std::to_string(*end - *begin));
  info->name = name;
  info->numel = static_cast<int64_t>(numel);
  info->nbytes = static_cast<size_t>(nbytes);
  return Status::Ok();
}

// The header, parsed in one pass over its text, event by event (nlohmann's SAX interface), in time linear
// in its size and memory linear in its entry count: each root-level value (a tensor entry or __metadata__)
// is built as a small JSON value, checked by parse_entry, kept as a TensorInfo and dropped. nlohmann's
// callback parser (json::parse with a callback), used for this before, scanned the enclosing object for a
// discarded value each time a nested object closed, so a header of n entries cost O(n^2) (10k entries
// 0.9 s, 80k over 300 s; issue #22); the whole-header DOM cost ~1 KB per entry.
//
// Errors are reported with the precedence a whole-header parse gives them: invalid JSON anywhere, then
// nesting, the entry count, a duplicate key, a root that is not an object, then the first faulty entry in
// key order (std::map order, as the DOM iterated). Depth, the entry count and a syntax error stop the scan.
struct HeaderParser : nlohmann::json_sax<json> {
  explicit HeaderParser(const std::string& path) : path(path) {}

  const std::string& path;
  std::vector<TensorInfo> infos;  // file order
  std::vector<std::pair<uint64_t, uint64_t>> offsets;  // [begin, end) per info
  std::map<std::string, std::string> metadata;
  std::string syntax_error, duplicate;
  bool too_deep = false, too_many = false, root_not_object = false;
  std::string entry_error_key;  // the smallest key whose value failed its checks, and the failure
  Status entry_error;

  // Nesting and duplicate keys.
  std::vector<bool> is_object;                        // open containers, innermost last
  std::vector<std::unordered_set<std::string>> keys;  // per open object (reused: `objects` are live)
  size_t objects = 0;
  size_t entries = 0;  // root keys other than __metadata__
  std::string root_key;

  // The root-level value being built: `value`, its open containers, the key of the next member.
  json value;
  std::vector<json*> open;
  std::string member;

  bool deeper(size_t more) {
    if (is_object.size() + more > static_cast<size_t>(SafetensorsFile::kMaxHeaderDepth) + 1) too_deep = true;
    return !too_deep;
  }
  bool building() const { return is_object.size() >= 1 && is_object[0] && !root_not_object; }

  // Places `v` where the parser stands; returns it (for a container about to be filled), or null when
  // the value is not kept (outside the root object).
  json* place(json&& v) {
    if (!building()) return nullptr;
    if (open.empty()) {
      value = std::move(v);
      return &value;
    }
    json& parent = *open.back();
    if (parent.is_object()) {
      json& slot = parent[member];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  // A root-level value is complete: check it.
  void finish_root_value() {
    if (!entry_error_key.empty() && root_key >= entry_error_key) return;  // an earlier key already failed
    Status st;
    if (root_key == "__metadata__") {
      if (!value.is_object()) {
        st = checkpoint_error(path + ": __metadata__ is not a JSON object");
      } else {
        for (auto m = value.begin(); m != value.end() && st.ok(); ++m) {
          if (!m.value().is_string())
            st = checkpoint_error(path + ": __metadata__: value of '" + m.key() + "' is not a string");
          else
            metadata[m.key()] = m.value().get<std::string>();
        }
      }
    } else {
      TensorInfo info;
      uint64_t begin = 0, end = 0;
      st = parse_entry(path, root_key, value, &info, &begin, &end);
      if (st.ok()) {
        infos.push_back(std::move(info));
        offsets.emplace_back(begin, end);
      }
    }
    if (!st.ok()) {
      entry_error_key = root_key.empty() ? std::string(1, '\0') : root_key;
      entry_error = st;
    }
    value = json();
  }
  bool scalar(json&& v) {
    if (!deeper(0)) return false;
    if (is_object.empty()) {
      root_not_object = true;
      return true;
    }
    if (place(std::move(v)) != nullptr && open.empty()) finish_root_value();
    return true;
  }

  bool null() override { return scalar(json()); }
  bool boolean(bool b) override { return scalar(json(b)); }
  bool number_integer(number_integer_t n) override { return scalar(json(n)); }
  bool number_unsigned(number_unsigned_t n) override { return scalar(json(n)); }
  bool number_float(number_float_t f, const string_t&) override { return scalar(json(f)); }
  bool string(string_t& t) override { return scalar(json(std::move(t))); }
  bool binary(binary_t& b) override { return scalar(json::binary(std::move(b))); }
  bool start_container(json&& empty, bool object) {
    if (!deeper(1)) return false;
    if (is_object.empty() && !object) root_not_object = true;
    if (!is_object.empty()) {
      json* c = place(std::move(empty));
      if (c != nullptr) open.push_back(c);
    }
    is_object.push_back(object);
    if (object) {
      if (keys.size() <= objects) keys.emplace_back();
      keys[objects++].clear();
    }
    return true;
  }
  bool end_container(bool object) {
    is_object.pop_back();
    if (object) --objects;
    if (!open.empty()) {
      open.pop_back();
      if (open.empty()) finish_root_value();
    }
    return true;
  }
  bool start_object(std::size_t) override { return start_container(json::object(), true); }
  bool end_object() override { return end_container(true); }
  bool start_array(std::size_t) override { return start_container(json::array(), false); }
  bool end_array() override { return end_container(false); }
  bool key(string_t& k) override {
    if (!deeper(0)) return false;
    if (is_object.size() == 1) {
      root_key = k;
      if (k != "__metadata__" && ++entries > SafetensorsFile::kMaxTensors) {
        too_many = true;
        return false;
      }
    }
    if (!keys[objects - 1].insert(k).second && duplicate.empty())
      duplicate = is_object.size() == 1 ? "tensor '" + k + "': duplicate entry in the header"
                                        : "tensor '" + root_key + "': duplicate key '" + k + "'";
    member = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    syntax_error = e.what();
    return false;
  }
};

// The header parser's findings as a status, in its precedence order (HeaderParser's comment).
Status header_status(const std::string& path, const HeaderParser& header) {
  if (!header.syntax_error.empty())
    return checkpoint_error(path + ": header is not valid JSON: " + header.syntax_error);
  if (header.too_deep)
    return checkpoint_error(path + ": header nests JSON deeper than " +
                            std::to_string(SafetensorsFile::kMaxHeaderDepth) + " levels (object, tensor entry, shape)");
  if (header.too_many)
    return checkpoint_error(path + ": header has more than " + std::to_string(SafetensorsFile::kMaxTensors) +
                            " tensor entries (the limit; a ViT-B checkpoint has about 150)");
  if (!header.duplicate.empty()) return checkpoint_error(path + ": " + header.duplicate);
  if (header.root_not_object) return checkpoint_error(path + ": header is not a JSON object");
  return header.entry_error;
}

// One tensor's [begin, end) in the data section and its position in the header's infos.
struct Span {
  uint64_t begin, end;
  size_t index;
};

// The header's tensors in data order: by offset, ties broken by end, then by name.
std::vector<Span> sorted_spans(const HeaderParser& header) {
  const std::vector<TensorInfo>& infos = header.infos;
  std::vector<Span> spans;
  spans.reserve(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) spans.push_back({header.offsets[i].first, header.offsets[i].second, i});
  std::sort(spans.begin(), spans.end(), [&](const Span& a, const Span& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return infos[a.index].name < infos[b.index].name;
  });
  return spans;
}

// Checks that the sorted spans tile the data section [0, data_len) exactly: no tensor past its end, no
// hole, no overlap, no trailing bytes.
Status check_spans(const std::string& path, const std::vector<TensorInfo>& infos, const std::vector<Span>& spans,
                   uint64_t data_len) {
  const auto range = [](const Span& s) {
    return "data_offsets [" + std::to_string(s.begin) + "," + std::to_string(s.end) + "]";
  };
  // Offsets past the data section first: such a tensor sorts last, and the contiguity walk would blame
  // the hole it leaves on whichever tensor follows the gap (issue #22 item 9: a 2^63 offset named the
  // wrong tensor).
  for (const Span& s : spans)
    if (s.end > data_len)
      return checkpoint_error(path + ": tensor '" + infos[s.index].name + "': " + range(s) +
                              " extend beyond the data section (" + std::to_string(data_len) + " bytes)");
  uint64_t expected = 0;
  const std::string* previous = nullptr;
  for (const Span& s : spans) {
    const std::string& name = infos[s.index].name;
    const std::string where = path + ": tensor '" + name + "': " + range(s);
    if (s.begin > expected)
      return checkpoint_error(where + " leave a hole of " + std::to_string(s.begin - expected) +
                              " bytes before it (data so far ends at " + std::to_string(expected) + ")");
    if (s.begin < expected)
      return checkpoint_error(where + " overlap the previous tensor '" + (previous ? *previous : "") +
                              "' (which ends at " + std::to_string(expected) + ")");
    expected = s.end;
    previous = &name;
  }
  if (expected != data_len) {
    const std::string last = previous ? "after the last tensor '" + *previous + "'" : "in a file with no tensors";
    return checkpoint_error(path + ": " + std::to_string(data_len - expected) + " trailing bytes " + last);
  }
  return Status::Ok();
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

size_t dtype_size(DType d) { return d == DType::kF32 ? 4 : 2; }

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  EV_ASSIGN_OR_RETURN(const ReadOnlyFile source, ReadOnlyFile::open(path, "safetensors file"));
  const size_t size = static_cast<size_t>(source.size());
  if (size < 8)
    return checkpoint_error(path + ": file is " + std::to_string(size) +
                            " bytes, shorter than the 8-byte header length");
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, source.fd(), 0);
  const int map_errno = errno;
  if (map == MAP_FAILED) return io_error(path + ": mmap failed: " + std::strerror(map_errno));

  SafetensorsFile file;
  file.path_ = path;
  file.map_ = map;
  file.size_ = size;
  EV_RETURN_IF_ERROR(file.parse(static_cast<const uint8_t*>(map), size));
  return file;
}

Result<SafetensorsFile> SafetensorsFile::open_memory(const uint8_t* bytes, size_t size, const std::string& name) {
  SafetensorsFile file;
  file.path_ = name;
  file.size_ = size;
  EV_RETURN_IF_ERROR(file.parse(bytes, size));
  return file;
}

Status SafetensorsFile::parse(const uint8_t* base, size_t size) {
  const std::string& path = path_;
  if (size < 8)
    return checkpoint_error(path + ": file is " + std::to_string(size) +
                            " bytes, shorter than the 8-byte header length");

  const uint64_t header_len = read_le64(base);
  if (header_len > kMaxHeaderBytes)
    return checkpoint_error(path + ": header length " + std::to_string(header_len) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes) + "-byte limit");
  if (header_len > size - 8)
    return checkpoint_error(path + ": header length " + std::to_string(header_len) +
                            " runs past the end of the file (" + std::to_string(size) + " bytes)");

  const char* header_begin = reinterpret_cast<const char*>(base + 8);
  HeaderParser header(path);
  json::sax_parse(header_begin, header_begin + header_len, &header);
  EV_RETURN_IF_ERROR(header_status(path, header));
  metadata_ = std::move(header.metadata);

  std::vector<TensorInfo>& infos = header.infos;
  const std::vector<Span> spans = sorted_spans(header);
  EV_RETURN_IF_ERROR(check_spans(path, infos, spans, size - 8 - header_len));

  data_ = base + 8 + header_len;
  tensors_.reserve(spans.size());
  for (const Span& s : spans) {
    infos[s.index].offset = static_cast<size_t>(s.begin);
    index_[infos[s.index].name] = tensors_.size();
    tensors_.push_back(std::move(infos[s.index]));
  }
  return Status::Ok();
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    map_ = other.map_;
    size_ = other.size_;
    data_ = other.data_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
    other.map_ = nullptr;
    other.size_ = 0;
    other.data_ = nullptr;
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { release(); }

void SafetensorsFile::release() {
  if (map_ != nullptr) ::munmap(map_, size_);
  map_ = nullptr;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- conversions ---------------------------------------------------------------------------------------

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in f32.
    float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &mag, sizeof bits);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

// Round-to-nearest-even f32 -> f16 (F. Giesen's float_to_half_fast3_rtne; relies on the FPU's default
// round-to-nearest-even mode for the subnormal case).
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t out;
  if (x >= 0x47800000u) {  // >= 65536 in magnitude, Inf or NaN
    out = x > 0x7f800000u ? static_cast<uint16_t>(0x7e00u | ((x >> 13) & 0x3ffu)) : 0x7c00u;
  } else if (x < 0x38800000u) {  // below the smallest f16 normal (2^-14): subnormal or zero
    float magnitude;
    std::memcpy(&magnitude, &x, sizeof magnitude);
    // Adding 0.5 puts the f16 subnormal's 10 bits at the bottom of the f32 mantissa, rounded by the FPU.
    const float shifted = magnitude + 0.5f;
    uint32_t s;
    std::memcpy(&s, &shifted, sizeof s);
    out = static_cast<uint16_t>(s - 0x3f000000u);
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu;  // rebias the exponent, round half down
    x += mant_odd;                                          // ... and half up when odd: ties to even
    out = static_cast<uint16_t>(x >> 13);                   // may carry into Inf: correct overflow
  }
  return static_cast<uint16_t>(out | (sign >> 16));
}

float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof out);
  return out;
}

void convert_to_f32(const TensorInfo& info, const uint8_t* src, float* dst) {
  const size_t n = static_cast<size_t>(info.numel);
  switch (info.dtype) {
    case DType::kF32: std::memcpy(dst, src, n * sizeof(float)); break;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
      break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
      break;
  }
}

void convert_to_f16(const TensorInfo& info, const uint8_t* src, uint16_t* dst) {
  const size_t n = static_cast<size_t>(info.numel);
  switch (info.dtype) {
    case DType::kF32:
      for (size_t i = 0; i < n; ++i) {
        float v;
        std::memcpy(&v, src + 4 * i, sizeof v);
        dst[i] = f32_to_f16(v);
      }
      break;
    case DType::kF16: std::memcpy(dst, src, n * sizeof(uint16_t)); break;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(bf16_to_f32(load_u16(src + 2 * i)));
      break;
  }
}

// ---- writer --------------------------------------------------------------------------------------------

Status write_safetensors(const std::string& path, const std::vector<NamedTensorView>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<const NamedTensorView*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const NamedTensorView* a, const NamedTensorView* b) { return a->name < b->name; });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const NamedTensorView& t = *sorted[i];
    const std::string where = path + ": tensor '" + t.name + "': ";
    if (t.name.empty() || t.name == "__metadata__") return invalid_argument(where + "invalid tensor name");
    if (i > 0 && sorted[i - 1]->name == t.name) return invalid_argument(where + "given twice");
    uint64_t numel = 1;
    for (int64_t d : t.shape)
      if (d < 0 || __builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
        return invalid_argument(where + "invalid shape " + shape_string(t.shape));
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, uint64_t{4}, &nbytes)) return invalid_argument(where + "too large");
    if (nbytes > 0 && t.data == nullptr) return invalid_argument(where + "data is null");
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return io_error(tmp + ": cannot create: " + std::strerror(errno));
  uint8_t len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  bool ok = std::fwrite(len_bytes, 1, 8, f) == 8 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (size_t i = 0; ok && i < sorted.size(); ++i)
    ok = sizes[i] == 0 || std::fwrite(sorted[i]->data, 1, sizes[i], f) == sizes[i];
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  const int write_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    return io_error(tmp + ": write failed: " + std::strerror(write_errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    return io_error(path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
  }
  return Status::Ok();
}

}  // namespace edgevit
