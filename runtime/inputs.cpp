#include "runtime/inputs.h"

#include <unistd.h>
#include <stb_image.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>

#include "base/file_io.h"
#include "kernels/cpu/kernels.h"
#include "runtime/exif.h"
#include "runtime/safetensors.h"
#include "runtime/stb_image_impl.h"

namespace edgevit {

namespace {
// Largest intermediate (resized) image, in pixels: the same bound as ImageLimits::max_pixels.
constexpr int64_t kMaxResizedPixels = ImageLimits().max_pixels;

// Decoder structs (stbi__jpeg, stbi__gif, Huffman and LZW tables), line buffers and the resizer's
// bookkeeping: allocations that do not grow with the image.
constexpr int64_t kDecodeSlackBytes = int64_t{1} << 20;

// The image's size after the resize (docs/config.md, "Preprocessing"): the shorter side to pp.resize and
// the longer one int(resize * long / short), as torchvision's _compute_resized_output_size and
// transformers' get_resize_output_image_size compute it (the product is exact, the division rounds once,
// the cast truncates), or exactly resize_w x resize_h, or as timm's ResizeKeepRatio.get_params (longest 0):
// ratio = min(h / resize_h, w / resize_w), each side round(side / ratio), Python's round (half to even).
void resized_size(int64_t w, int64_t h, const Preprocess& pp, int64_t* rw, int64_t* rh) {
  if (pp.resize_mode == ResizeMode::kExact) {
    *rw = pp.resize_w;
    *rh = pp.resize_h;
  } else if (pp.resize_mode == ResizeMode::kKeepRatio) {
    const double ratio = std::min(static_cast<double>(h) / pp.resize_h, static_cast<double>(w) / pp.resize_w);
    *rh = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) / ratio));  // FE_TONEAREST: half to even
    *rw = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / ratio));
  } else if (w <= h) {
    *rw = pp.resize;
    *rh = static_cast<int64_t>(static_cast<double>(pp.resize * h) / static_cast<double>(w));
  } else {
    *rh = pp.resize;
    *rw = static_cast<int64_t>(static_cast<double>(pp.resize * w) / static_cast<double>(h));
  }
}

// The centre crop's first row (or column) for a side of `side` pixels: torchvision's
// int(round((side - crop) / 2.0)), Python rounding half to even, or transformers' (side - crop) // 2.
int64_t crop_offset(int64_t side, int64_t crop, CropRounding r) {
  const int64_t d = side - crop;
  if (r == CropRounding::kFloor || d % 2 == 0) return d / 2;
  const int64_t k = d / 2;  // d / 2.0 is k + 0.5
  return k % 2 == 0 ? k : k + 1;
}

ResampleFilter filter_of(Interpolation i) {
  return i == Interpolation::kBicubic ? ResampleFilter::kBicubic : ResampleFilter::kBilinear;
}

// Pillow's Image.resize with NEAREST (ImagingScaleAffine): the source coordinate starts at half a step
// and advances by in/out per output pixel, in double, truncated.
void resize_nearest_u8(const uint8_t* src, int in_w, int in_h, int chans, uint8_t* dst, int out_w, int out_h,
                       int* xtab) {
  const double ax = static_cast<double>(in_w) / out_w, ay = static_cast<double>(in_h) / out_h;
  double xo = ax * 0.5;
  for (int x = 0; x < out_w; ++x, xo += ax) xtab[x] = std::min(static_cast<int>(xo), in_w - 1);
  double yo = ay * 0.5;
  for (int y = 0; y < out_h; ++y, yo += ay) {
    const uint8_t* row = src + static_cast<int64_t>(std::min(static_cast<int>(yo), in_h - 1)) * in_w * chans;
    uint8_t* out = dst + static_cast<int64_t>(y) * out_w * chans;
    for (int x = 0; x < out_w; ++x)
      std::memcpy(out + static_cast<int64_t>(x) * chans, row + static_cast<int64_t>(xtab[x]) * chans, chans);
  }
}

// Work space of the resize from in to out (bytes): resize_u8's tables and intermediate rows, or the
// nearest resize's column table.
int64_t resize_work_bytes(int64_t in_w, int64_t in_h, int64_t out_w, int64_t out_h, int chans, Interpolation i) {
  if (i == Interpolation::kNearest) return out_w * static_cast<int64_t>(sizeof(int));
  return static_cast<int64_t>(resize_u8_scratch_bytes(static_cast<int>(in_w), static_cast<int>(in_h),
                                                      static_cast<int>(out_w), static_cast<int>(out_h), chans,
                                                      filter_of(i)));
}

// What an image header says about its decode.
struct ImageHeader {
  int w = 0, h = 0, c = 0;     // stbi_info: c is the channel count stb reports for the file
  int bits = 8;                // bits per sample of the decoded file: 8, 16, or 32 for HDR
  int64_t stb_bytes = 0;       // peak bytes stb_image allocates to decode it at `want` channels
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// stb_image 2.27's PNG path (stbi__parse_png_file, stbi__do_png): the concatenated IDAT chunks (grown by
// doubling), the inflated scanlines (stb's guess, doubled once for interlaced files), the image at the
// file's depth (a second copy while de-interlacing), the palette expansion, the channel conversion and the
// 16-to-8-bit conversion. Phases overlap as stb frees its buffers; the peak is the largest.
bool png_stb_bytes(const uint8_t* b, size_t size, int want, int64_t* out) {
  size_t off = 8;
  while (off + 8 <= size) {  // IHDR is the first chunk, or the second after Apple's CgBI
    const uint32_t len = be32(b + off);
    if (std::memcmp(b + off + 4, "IHDR", 4) == 0) {
      if (len < 13 || off + 8 + 13 > size) return false;
      const uint8_t* ihdr = b + off + 8;
      const int64_t w = be32(ihdr), h = be32(ihdr + 4);
      const int depth = ihdr[8], color = ihdr[9], interlaced = ihdr[12];
      const int img_n = color == 0 ? 1 : color == 2 ? 3 : color == 3 ? 1 : color == 4 ? 2 : 4;
      const int64_t bps = depth == 16 ? 2 : 1;
      const int64_t px = w * h;
      const int64_t raw_guess = (w * depth + 7) / 8 * h * img_n + h;
      const int64_t expanded = interlaced ? 2 * raw_guess : raw_guess;
      const int64_t idata = 2 * static_cast<int64_t>(size) + 4096;
      const int64_t out_n = color == 3 ? 1 : std::min(img_n + 1, 4);  // tRNS adds an alpha channel
      const int64_t image = px * out_n * bps * (interlaced ? 2 : 1);
      const int64_t palette = color == 3 ? px * std::max(want, 4) : 0;
      const int64_t converted = px * std::max<int64_t>(out_n, color == 3 ? 4 : 0) * bps + px * want * bps;
      const int64_t to_8bit = bps == 2 ? px * want * 3 : 0;
      *out = std::max({idata + expanded, expanded + image + palette, converted, to_8bit});
      return true;
    }
    if (off > 64) return false;
    off += 12 + static_cast<size_t>(len);
  }
  return false;
}

// stb_image 2.27's JPEG path (stbi__decode_jpeg_image, load_jpeg_image): one plane per component padded
// to whole MCUs (at most 32 pixels per side), 2-byte coefficients as well for a progressive file, per
// component line buffers, and the output at `want` channels. Components and the SOF type come from the
// frame header; without one, the worst case (4 progressive components) is assumed.
int64_t jpeg_stb_bytes(const uint8_t* b, size_t size, int64_t w, int64_t h, int want) {
  int64_t comps = 4;
  bool progressive = true;
  size_t off = 2;
  while (off + 4 <= size && b[off] == 0xFF) {
    const uint8_t marker = b[off + 1];
    if (marker == 0xFF) { ++off; continue; }
    const size_t len = (size_t{b[off + 2]} << 8) | b[off + 3];
    if (marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC) {
      if (off + 10 <= size) {
        comps = std::clamp<int64_t>(b[off + 9], 1, 4);  // stb refuses more than 4
        progressive = marker == 0xC2 || marker == 0xC6 || marker == 0xCA || marker == 0xCE;
      }
      break;
    }
    off += 2 + len;
  }
  const int64_t plane = (w + 32) * (h + 32);
  return comps * plane * (progressive ? 3 : 1) + comps * (w + 4) + w * h * want;
}

// Every stb_image path, for formats without a model of their own (BMP, TGA, GIF, PSD, PIC, PNM, HDR): 16
// bytes per pixel at 8 bits covers a GIF's frame, background and history plus the conversion, a TGA's
// load and conversion, an HDR's floats plus its 8-bit copy at 4 bytes per sample.
int64_t other_stb_bytes(size_t size, int64_t w, int64_t h, int bits) {
  return 4 * 4 * (bits / 8) * w * h + 2 * static_cast<int64_t>(size);
}

// The resized image's size, refused before anything is allocated when the aspect ratio makes it huge: a
// 16384x1 strip would become 3670016x224 floats per channel.
Status check_resized_size(const std::string& display, int width, int height, const Preprocess& pp, int64_t* rw,
                          int64_t* rh) {
  resized_size(width, height, pp, rw, rh);
  if (*rw * *rh > kMaxResizedPixels)
    return input_error(display + ": image " + std::to_string(width) + "x" + std::to_string(height) +
                       " would be resized to " + std::to_string(*rw) + "x" + std::to_string(*rh) +
                       ", more than the " + std::to_string(kMaxResizedPixels) +
                       "-pixel limit (aspect ratio too extreme)");
  return Status::Ok();
}

Result<ImageHeader> read_image_header(const uint8_t* bytes, size_t size, const std::string& display, int want) {
  if (size == 0) return input_error(display + ": empty file, not an image");
  if (size > static_cast<size_t>(INT32_MAX)) return input_error(display + ": too large");
  ImageHeader hd;
  {
    // header parsing: decoder structs only
    StbDecodeBudget header_budget(static_cast<size_t>(2 * static_cast<int64_t>(size) + kDecodeSlackBytes));
    if (!stbi_info_from_memory(bytes, static_cast<int>(size), &hd.w, &hd.h, &hd.c))
      return input_error(display + ": not a decodable image (PNG, JPEG, PPM, BMP or TGA expected): " +
                         (stbi_failure_reason() ? stbi_failure_reason() : "unknown format"));
  }
  if (hd.w <= 0 || hd.h <= 0)
    return input_error(display + ": image " + std::to_string(hd.w) + "x" + std::to_string(hd.h) + " has no pixels");
  // Sides up to 2^20 keep every cost below in int64 (w * h * 64 < 2^47); anything wider is far past any
  // budget and max_side, and costs "too much" without multiplying (fuzz_image found the overflow: a
  // GIF header claiming 1 x 2^31 pixels inside a BMP).
  if (hd.w > (1 << 20) || hd.h > (1 << 20)) {
    hd.bits = 8;
    hd.stb_bytes = std::numeric_limits<int64_t>::max() / 4;
    return hd;
  }
  hd.bits = stbi_is_hdr_from_memory(bytes, static_cast<int>(size))       ? 32
            : stbi_is_16_bit_from_memory(bytes, static_cast<int>(size)) ? 16
                                                                        : 8;
  const bool is_png = size >= 8 && std::memcmp(bytes, "\x89PNG\r\n\x1a\n", 8) == 0;
  const bool is_jpeg = size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
  if (!(is_png && png_stb_bytes(bytes, size, want, &hd.stb_bytes)))
    hd.stb_bytes = is_jpeg ? jpeg_stb_bytes(bytes, size, hd.w, hd.h, want) : other_stb_bytes(size, hd.w, hd.h, hd.bits);
  hd.stb_bytes += kDecodeSlackBytes;
  return hd;
}

// Peak bytes of decode_image for this header: stb_image's decode, then preprocess_pixels (the 8-bit
// pixels stay alive while their EXIF-oriented copy, the resized image and the resizer's work space are).
int64_t decode_bytes(const ImageHeader& hd, int want, const Preprocess& pp, int orientation) {
  if (hd.w > (1 << 20) || hd.h > (1 << 20)) return hd.stb_bytes;  // "too much" (read_image_header)
  const int64_t px = int64_t{hd.w} * hd.h;
  const bool swap = orientation_swaps_sides(orientation);
  const int64_t w = swap ? hd.h : hd.w, h = swap ? hd.w : hd.h;
  int64_t rw, rh;
  resized_size(w, h, pp, &rw, &rh);
  int64_t pre = px * want + kDecodeSlackBytes;
  if (orientation != 1) pre += px * want;
  if (rw != w || rh != h) pre += rw * rh * want + resize_work_bytes(w, h, rw, rh, want, pp.interpolation);
  return std::max(hd.stb_bytes, pre);
}

std::string human_bytes(int64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(n) / (1 << 20));
  return std::to_string(n) + " bytes (" + buf + ")";
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

Result<int64_t> image_decode_bytes(const uint8_t* bytes, size_t size, const std::string& display,
                                   const ModelSpec& spec) {
  const int want = spec.arch.in_chans;
  EV_ASSIGN_OR_RETURN(ImageHeader hd, read_image_header(bytes, size, display, want));
  return decode_bytes(hd, want, spec.preprocess, image_exif_orientation(bytes, size));
}

Result<int64_t> image_decode_bytes(const uint8_t* bytes, size_t size, const std::string& display) {
  ModelSpec imagenet;
  imagenet.arch.in_chans = 3;
  imagenet.arch.img_h = imagenet.arch.img_w = 224;
  imagenet.preprocess.resize = imagenet.preprocess.resize_h = imagenet.preprocess.resize_w = 256;
  return image_decode_bytes(bytes, size, display, imagenet);
}

Status preprocess_pixels(const uint8_t* pixels, int width, int height, int chans, const std::string& display,
                         const ModelSpec& spec, float* dst, int orientation) {
  const VitArch& a = spec.arch;
  const Preprocess& pp = spec.preprocess;
  if (chans != a.in_chans)
    return internal_error(display + ": decoded with " + std::to_string(chans) + " channels, model needs " +
                          std::to_string(a.in_chans));
  if (width < 1 || height < 1)
    return input_error(display + ": image " + std::to_string(width) + "x" + std::to_string(height) + " has no pixels");
  const size_t px_bytes = static_cast<size_t>(width) * height * chans;
  std::vector<uint8_t> oriented;  // (h, w, C) upright
  if (orientation >= 2 && orientation <= 8) {
    oriented.resize(px_bytes);
    apply_exif_orientation(pixels, width, height, chans, orientation, oriented.data());
    if (orientation_swaps_sides(orientation)) std::swap(width, height);
    pixels = oriented.data();
  }
  int64_t rw64, rh64;
  EV_RETURN_IF_ERROR(check_resized_size(display, width, height, pp, &rw64, &rh64));
  const int rw = static_cast<int>(rw64), rh = static_cast<int>(rh64);
  if (rw < a.img_w || rh < a.img_h)
    return config_error(spec.source_path + ": preprocess resizes to " + std::to_string(rw) + "x" +
                        std::to_string(rh) + ", smaller than the input " + std::to_string(a.img_w) + "x" +
                        std::to_string(a.img_h) + " (width x height)");

  std::vector<uint8_t> resized;  // (rh, rw, C), Pillow's 8-bit resize
  const uint8_t* src = pixels;
  if (rw != width || rh != height) {
    resized.resize(static_cast<size_t>(rw) * rh * chans);
    if (pp.interpolation == Interpolation::kNearest) {
      std::vector<int> xtab(static_cast<size_t>(rw));
      resize_nearest_u8(pixels, width, height, chans, resized.data(), rw, rh, xtab.data());
    } else {
      const ResampleFilter f = filter_of(pp.interpolation);
      std::vector<uint64_t> scratch((resize_u8_scratch_bytes(width, height, rw, rh, chans, f) + 7) / 8);
      resize_u8(pixels, width, height, chans, resized.data(), rw, rh, f, scratch.data());
    }
    src = resized.data();
  }
  const int64_t x0 = crop_offset(rw, a.img_w, pp.crop_rounding), y0 = crop_offset(rh, a.img_h, pp.crop_rounding);
  for (int c = 0; c < chans; ++c) {
    const double mean = pp.mean[c], sd = pp.std[c];
    float* plane = dst + static_cast<size_t>(c) * a.img_h * a.img_w;
    for (int y = 0; y < a.img_h; ++y)
      for (int x = 0; x < a.img_w; ++x) {
        const double p = src[(static_cast<size_t>(y + y0) * rw + (x + x0)) * chans + c];
        // ToTensor divides by 255; other factors multiply, as transformers' rescale does.
        const double v = pp.rescale == 1.0 / 255 ? p / 255.0 : p * pp.rescale;
        plane[y * a.img_w + x] = static_cast<float>((v - mean) / sd);
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
  const int want = spec.arch.in_chans;
  EV_ASSIGN_OR_RETURN(const ImageHeader hd, read_image_header(bytes, size, display, want));
  int w = hd.w, h = hd.h, c = hd.c;
  if (w > limits.max_side || h > limits.max_side || static_cast<int64_t>(w) * h > limits.max_pixels)
    return input_error(display + ": image " + std::to_string(w) + "x" + std::to_string(h) +
                       " exceeds the limits (side <= " + std::to_string(limits.max_side) + ", pixels <= " +
                       std::to_string(limits.max_pixels) + ")");
  const int orientation = image_exif_orientation(bytes, size);
  int64_t rw, rh;
  if (orientation_swaps_sides(orientation))
    EV_RETURN_IF_ERROR(check_resized_size(display, h, w, spec.preprocess, &rw, &rh));
  else
    EV_RETURN_IF_ERROR(check_resized_size(display, w, h, spec.preprocess, &rw, &rh));
  const int64_t need = decode_bytes(hd, want, spec.preprocess, orientation);
  if (need > limits.max_decode_bytes)
    return input_error(display + ": decoding this " + std::to_string(w) + "x" + std::to_string(h) + " " +
                       std::to_string(hd.bits) + "-bit " + std::to_string(c) + "-channel image needs " +
                       human_bytes(need) + ", more than the decode budget of " +
                       human_bytes(limits.max_decode_bytes) + " (ImageLimits::max_decode_bytes)");
  // stb_image 2.27 (Debian 12's libstb) converts the channels of a 16-bit PGM/PPM as if its samples were
  // 8-bit, then reads twice that buffer (heap overflow, found by fuzz_image; fixed upstream in 2.28). Such
  // files are decoded only when no channel conversion is needed.
  const bool netpbm = size >= 2 && bytes[0] == 'P' && (bytes[1] == '5' || bytes[1] == '6');
  if (netpbm && c != want && hd.bits == 16)
    return input_error(display + ": 16-bit " + (c == 1 ? "PGM" : "PPM") + " with " + std::to_string(c) +
                       " channel(s) for a model with " + std::to_string(want) +
                       " is not supported (convert it to 8 bits or to the model's channel count)");
  // stb_image 2.27 converts 16-bit and HDR samples to 8 bits only after decoding at full depth (no format
  // has a reduced-depth decode), which hd.stb_bytes counts. Its allocations are held to that figure while
  // it runs: compressed data that inflates past what the header declares (a zlib bomb) is refused.
  std::unique_ptr<stbi_uc, void (*)(void*)> pix(nullptr, stbi_image_free);
  {
    StbDecodeBudget budget(static_cast<size_t>(hd.stb_bytes));
    pix.reset(stbi_load_from_memory(bytes, static_cast<int>(size), &w, &h, &c, want));
    if (!pix) return input_error(decode_failure(display, budget, hd.w, hd.h));
  }
  return preprocess_pixels(pix.get(), w, h, want, display, spec, dst, orientation);
}

Status load_image_file(const std::string& path, const ModelSpec& spec, float* dst, const ImageLimits& limits) {
  EV_ASSIGN_OR_RETURN(const std::string bytes,
                      read_regular_file(path, "image file", limits.max_file_bytes, StatusCode::kInputError));
  return decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, spec, dst, limits);
}

Result<InputBatch> load_input_file(const std::string& path, const ModelSpec& spec) {
  const VitArch& a = spec.arch;
  EV_ASSIGN_OR_RETURN(const ReadOnlyFile file, ReadOnlyFile::open(path, "input file"));
  if (file.size() > kMaxInputBytes)
    return input_error(path + ": input file is " + std::to_string(file.size()) + " bytes, more than the " +
                       std::to_string(kMaxInputBytes) + "-byte limit for inputs (kMaxInputBytes)");
  uint8_t head[16] = {};
  ssize_t got;
  do got = ::pread(file.fd(), head, sizeof head, 0);
  while (got < 0 && errno == EINTR);
  if (got < 0) return io_error(path + ": reading the input file failed: " + std::strerror(errno));
  // safetensors: 8-byte little-endian header length that fits the file, then a JSON object.
  if (got >= 10) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
    if (n > 0 && n <= static_cast<uint64_t>(file.size()) - 8 && head[8] == '{') {
      // Mapped, not read: the float batch is the only copy made. A malformed input file is an input
      // error (exit 5), not a checkpoint error: same message, which names the file and the tensor.
      auto opened = SafetensorsFile::open(path);
      if (!opened.ok())
        return opened.status().code() == StatusCode::kCheckpointError ? input_error(opened.status().message())
                                                                      : opened.status();
      const SafetensorsFile& st = *opened;
      const TensorInfo* t = st.find("input");
      if (t == nullptr) return input_error(path + ": safetensors file has no tensor named 'input'");
      const auto& s = t->shape;
      if (s.size() != 4 || s[1] != a.in_chans || s[2] != a.img_h || s[3] != a.img_w || s[0] < 1)
        return input_error(path + ": tensor 'input' has shape " + [&] {
                 std::string r = "[";
                 for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
                 return r + "]";
               }() + ", model '" + spec.name + "' needs [N," + std::to_string(a.in_chans) + "," +
               std::to_string(a.img_h) + "," + std::to_string(a.img_w) + "]");
      // The float batch is bounded too (an F16 file doubles in size), before it is allocated.
      if (t->numel > kMaxInputBytes / static_cast<int64_t>(sizeof(float)))
        return input_error(path + ": tensor 'input' " + std::to_string(t->numel) + " elements would take " +
                           std::to_string(t->numel * static_cast<int64_t>(sizeof(float))) +
                           " bytes as float32, more than the " + std::to_string(kMaxInputBytes) +
                           "-byte limit for inputs (kMaxInputBytes)");
      InputBatch batch;
      batch.count = static_cast<int>(s[0]);
      try {
        batch.data.resize(static_cast<size_t>(t->numel));
      } catch (const std::bad_alloc&) {
        return input_error(path + ": tensor 'input': cannot allocate " +
                           std::to_string(t->numel * static_cast<int64_t>(sizeof(float))) + " bytes");
      }
      convert_to_f32(*t, st.data(*t), batch.data.data());
      return batch;
    }
  }
  const ImageLimits limits;
  EV_ASSIGN_OR_RETURN(const std::string bytes, file.read_all(limits.max_file_bytes, StatusCode::kInputError));
  InputBatch batch;
  batch.count = 1;
  batch.data.resize(static_cast<size_t>(int64_t{a.in_chans} * a.img_h * a.img_w));
  EV_RETURN_IF_ERROR(decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, spec,
                                  batch.data.data(), limits));
  return batch;
}

}  // namespace edgevit
