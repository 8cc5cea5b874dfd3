#include "runtime/inputs.h"

#include <stb_image.h>
#include <stb_image_resize.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>

#include "runtime/safetensors.h"
#include "runtime/stb_image_impl.h"

namespace edgevit {

namespace {
// Largest intermediate (resized) image, in pixels: the same bound as ImageLimits::max_pixels.
constexpr int64_t kMaxResizedPixels = ImageLimits().max_pixels;

// Memory stb_image may hold at once while decoding one image (StbDecodeBudget). Its largest cases, per
// pixel: a progressive JPEG keeps 2-byte coefficients and 1-byte samples per component plus the output
// (~12 bytes for 3 components); a PNG holds the inflated rows and the image (2 x channels x bytes per
// sample), a GIF ~9 bytes. Hence 4 x 4 channels x bytes per sample (1, 2 for 16-bit, 4 for HDR) per pixel,
// plus twice the file (PNG concatenates its IDAT chunks into a growing buffer) and a fixed slack for
// decoder structs and JPEG's 16-pixel MCU padding. A valid image stays far below it; compressed data
// that inflates past what the header declares (a zlib bomb) is stopped at it.
constexpr size_t kDecodeSlackBytes = size_t{8} << 20;
size_t decode_budget(int w, int h, int bytes_per_sample, size_t file_bytes) {
  return size_t{4} * 4 * static_cast<size_t>(bytes_per_sample) * static_cast<size_t>(w) * static_cast<size_t>(h) +
         2 * file_bytes + kDecodeSlackBytes;
}

std::string decode_failure(const std::string& display, const StbDecodeBudget& budget, int w, int h) {
  if (budget.exceeded())
    return display + ": image decode needs more than " + std::to_string(budget.limit_bytes()) +
           " bytes, the budget for a " + std::to_string(w) + "x" + std::to_string(h) +
           " image (its compressed data expands past what the header declares)";
  return display + ": image data is corrupt or truncated: " +
         (stbi_failure_reason() ? stbi_failure_reason() : "decode failed");
}
}  // namespace

Status preprocess_pixels(const uint8_t* pixels, int width, int height, int chans, const std::string& display,
                         const ModelSpec& spec, float* dst) {
  const VitArch& a = spec.arch;
  const Preprocess& pp = spec.preprocess;
  if (chans != a.in_chans)
    return internal_error(display + ": decoded with " + std::to_string(chans) + " channels, model needs " +
                          std::to_string(a.in_chans));
  if (width < 1 || height < 1)
    return input_error(display + ": image " + std::to_string(width) + "x" + std::to_string(height) + " has no pixels");
  const int resize = pp.resize > 0 ? pp.resize : a.img_size;
  // Shorter side -> resize, aspect kept; never smaller than the crop. The longer side grows with the aspect
  // ratio: a 16384x1 strip would become 3670016x224 floats per channel, so the resized size is bounded
  // before anything is allocated.
  int64_t rw64, rh64;
  if (width <= height) {
    rw64 = resize;
    rh64 = std::llround(static_cast<double>(height) * resize / width);
  } else {
    rh64 = resize;
    rw64 = std::llround(static_cast<double>(width) * resize / height);
  }
  if (rw64 * rh64 > kMaxResizedPixels)
    return input_error(display + ": image " + std::to_string(width) + "x" + std::to_string(height) +
                       " would be resized to " + std::to_string(rw64) + "x" + std::to_string(rh64) +
                       ", more than the " + std::to_string(kMaxResizedPixels) +
                       "-pixel limit (aspect ratio too extreme)");
  const int rw = static_cast<int>(rw64), rh = static_cast<int>(rh64);
  if (rw < a.img_size || rh < a.img_size)
    return config_error(spec.source_path + ": preprocess.resize " + std::to_string(resize) +
                        " is smaller than img_size " + std::to_string(a.img_size));

  std::vector<float> resized;  // (rh, rw, C) in 0..255
  const float* src;
  if (rw == width && rh == height) {
    resized.assign(pixels, pixels + static_cast<size_t>(width) * height * chans);
  } else {
    std::vector<float> in(pixels, pixels + static_cast<size_t>(width) * height * chans);
    resized.resize(static_cast<size_t>(rw) * rh * chans);
    if (!stbir_resize_float_generic(in.data(), width, height, 0, resized.data(), rw, rh, 0, chans,
                                    STBIR_ALPHA_CHANNEL_NONE, 0, STBIR_EDGE_CLAMP, STBIR_FILTER_TRIANGLE,
                                    STBIR_COLORSPACE_LINEAR, nullptr))
      return input_error(display + ": resize from " + std::to_string(width) + "x" + std::to_string(height) + " failed");
  }
  src = resized.data();
  const int x0 = (rw - a.img_size) / 2, y0 = (rh - a.img_size) / 2;
  for (int c = 0; c < chans; ++c) {
    const double mean = pp.mean[c], sd = pp.std[c];
    float* plane = dst + static_cast<size_t>(c) * a.img_size * a.img_size;
    for (int y = 0; y < a.img_size; ++y)
      for (int x = 0; x < a.img_size; ++x) {
        const double p = src[(static_cast<size_t>(y + y0) * rw + (x + x0)) * chans + c];
        plane[y * a.img_size + x] = static_cast<float>((p / 255.0 - mean) / sd);
      }
  }
  return Status::Ok();
}

Status decode_image(const uint8_t* bytes, size_t size, const std::string& display, const ModelSpec& spec,
                    float* dst, const ImageLimits& limits) {
  if (size == 0) return input_error(display + ": empty file, not an image");
  if (static_cast<int64_t>(size) > limits.max_file_bytes)
    return input_error(display + ": " + std::to_string(size) + " bytes exceeds the image size limit of " +
                       std::to_string(limits.max_file_bytes));
  if (spec.arch.in_chans != 1 && spec.arch.in_chans != 3)
    return input_error(display + ": images can feed models with 1 or 3 input channels; model '" + spec.name +
                       "' has " + std::to_string(spec.arch.in_chans) + " (give a safetensors input instead)");
  if (size > static_cast<size_t>(INT32_MAX)) return input_error(display + ": too large");
  int w = 0, h = 0, c = 0;
  {
    StbDecodeBudget header_budget(decode_budget(0, 0, 1, size));  // header parsing: decoder structs only
    if (!stbi_info_from_memory(bytes, static_cast<int>(size), &w, &h, &c))
      return input_error(display + ": not a decodable image (PNG, JPEG, PPM, BMP or TGA expected): " +
                         (stbi_failure_reason() ? stbi_failure_reason() : "unknown format"));
  }
  if (w <= 0 || h <= 0 || w > limits.max_side || h > limits.max_side ||
      static_cast<int64_t>(w) * h > limits.max_pixels)
    return input_error(display + ": image " + std::to_string(w) + "x" + std::to_string(h) +
                       " exceeds the limits (side <= " + std::to_string(limits.max_side) + ", pixels <= " +
                       std::to_string(limits.max_pixels) + ")");
  const int want = spec.arch.in_chans;
  // stb_image 2.27 (Debian 12's libstb) converts the channels of a 16-bit PGM/PPM as if its samples were
  // 8-bit, then reads twice that buffer (heap overflow, found by fuzz_image; fixed upstream in 2.28). Such
  // files are decoded only when no channel conversion is needed.
  const bool netpbm = size >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '6');
  if (netpbm && c != want && stbi_is_16_bit_from_memory(bytes, static_cast<int>(size)))
    return input_error(display + ": 16-bit " + (c == 1 ? "PGM" : "PPM") + " with " + std::to_string(c) +
                       " channel(s) for a model with " + std::to_string(want) +
                       " is not supported (convert it to 8 bits or to the model's channel count)");
  const int bytes_per_sample = stbi_is_hdr_from_memory(bytes, static_cast<int>(size))       ? 4
                               : stbi_is_16_bit_from_memory(bytes, static_cast<int>(size)) ? 2
                                                                                           : 1;
  const int header_w = w, header_h = h;
  std::unique_ptr<stbi_uc, void (*)(void*)> pix(nullptr, stbi_image_free);
  {
    StbDecodeBudget budget(decode_budget(w, h, bytes_per_sample, size));
    pix.reset(stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &c, want));
    if (!pix) return input_error(decode_failure(display, budget, header_w, header_h));
  }
  return preprocess_pixels(pix.get(), w, h, want, display, spec, dst);
}

namespace {

Result<std::vector<uint8_t>> read_file(const std::string& path, int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return not_found(path + ": cannot open input file");
  const std::streamoff size = in.tellg();
  if (size < 0) return io_error(path + ": cannot determine file size");
  if (size > max_bytes)
    return input_error(path + ": " + std::to_string(size) + " bytes exceeds the input size limit of " +
                       std::to_string(max_bytes));
  std::vector<uint8_t> buf(static_cast<size_t>(size));
  in.seekg(0);
  if (size > 0 && !in.read(reinterpret_cast<char*>(buf.data()), size)) return io_error(path + ": read failed");
  return buf;
}

}  // namespace

Status load_image_file(const std::string& path, const ModelSpec& spec, float* dst, const ImageLimits& limits) {
  EV_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, read_file(path, limits.max_file_bytes));
  return decode_image(bytes.data(), bytes.size(), path, spec, dst, limits);
}

Result<InputBatch> load_input_file(const std::string& path, const ModelSpec& spec) {
  const VitArch& a = spec.arch;
  const int64_t per_image = int64_t{a.in_chans} * a.img_size * a.img_size;
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) return not_found(path + ": cannot open input file");
    std::vector<uint8_t> head(16);
    probe.read(reinterpret_cast<char*>(head.data()), 16);
    head.resize(static_cast<size_t>(probe.gcount()));
    probe.seekg(0, std::ios::end);
    const int64_t size = probe.tellg();
    const std::vector<uint8_t>& sniff = head;
    // safetensors: 8-byte little-endian header length that fits the file, then a JSON object.
    if (sniff.size() >= 10) {
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | sniff[i];
      if (n > 0 && static_cast<int64_t>(n) <= size - 8 && sniff[8] == '{') {
        EV_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::open(path));
        const TensorInfo* t = file.find("input");
        if (t == nullptr) return input_error(path + ": safetensors file has no tensor named 'input'");
        const auto& s = t->shape;
        if (s.size() != 4 || s[1] != a.in_chans || s[2] != a.img_size || s[3] != a.img_size || s[0] < 1)
          return input_error(path + ": tensor 'input' has shape " + [&] {
                   std::string r = "[";
                   for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
                   return r + "]";
                 }() + ", model '" + spec.name + "' needs [N," + std::to_string(a.in_chans) + "," +
                 std::to_string(a.img_size) + "," + std::to_string(a.img_size) + "]");
        InputBatch batch;
        batch.count = static_cast<int>(s[0]);
        batch.data.resize(static_cast<size_t>(t->numel));
        convert_to_f32(*t, file.data(*t), batch.data.data());
        return batch;
      }
    }
  }
  InputBatch batch;
  batch.count = 1;
  batch.data.resize(static_cast<size_t>(per_image));
  EV_RETURN_IF_ERROR(load_image_file(path, spec, batch.data.data()));
  return batch;
}

}  // namespace edgevit
