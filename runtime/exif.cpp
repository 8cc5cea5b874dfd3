#include "runtime/exif.h"

#include <cstring>

namespace edgevit {

namespace {

constexpr uint16_t kOrientationTag = 0x0112;
constexpr int kMaxSegments = 4096;  // markers walked before giving up (a JPEG has a few dozen at most)

struct Tiff {
  const uint8_t* p;
  size_t size;
  bool big_endian;
  bool u16(size_t off, uint16_t* v) const {
    if (off > size || size - off < 2) return false;
    *v = big_endian ? static_cast<uint16_t>(p[off] << 8 | p[off + 1]) : static_cast<uint16_t>(p[off + 1] << 8 | p[off]);
    return true;
  }
  bool u32(size_t off, uint32_t* v) const {
    if (off > size || size - off < 4) return false;
    const uint8_t* b = p + off;
    *v = big_endian ? (uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3])
                    : (uint32_t{b[3]} << 24 | uint32_t{b[2]} << 16 | uint32_t{b[1]} << 8 | b[0]);
    return true;
  }
};

// The orientation in a TIFF structure (the Exif payload after "Exif\0\0"), or 1.
int tiff_orientation(const uint8_t* p, size_t size) {
  if (size < 8) return 1;
  Tiff t{p, size, false};
  if (p[0] == 'M' && p[1] == 'M') t.big_endian = true;
  else if (!(p[0] == 'I' && p[1] == 'I')) return 1;
  uint16_t magic;
  uint32_t ifd;
  if (!t.u16(2, &magic) || magic != 42 || !t.u32(4, &ifd)) return 1;
  uint16_t count;
  if (!t.u16(ifd, &count)) return 1;
  for (uint32_t i = 0; i < count; ++i) {
    const size_t entry = size_t{ifd} + 2 + size_t{i} * 12;
    uint16_t tag, type;
    if (!t.u16(entry, &tag) || !t.u16(entry + 2, &type)) return 1;
    if (tag != kOrientationTag) continue;
    uint32_t n, value = 0;
    if (!t.u32(entry + 4, &n) || n < 1) return 1;
    if (type == 3) {  // SHORT, stored in the entry's first two value bytes
      uint16_t v16;
      if (!t.u16(entry + 8, &v16)) return 1;
      value = v16;
    } else if (type == 4) {  // LONG
      if (!t.u32(entry + 8, &value)) return 1;
    } else {
      return 1;
    }
    return value >= 1 && value <= 8 ? static_cast<int>(value) : 1;
  }
  return 1;
}

}  // namespace

int jpeg_exif_orientation(const uint8_t* b, size_t size) {
  if (b == nullptr || size < 4 || b[0] != 0xFF || b[1] != 0xD8) return 1;
  size_t off = 2;
  for (int seg = 0; seg < kMaxSegments && off + 4 <= size; ++seg) {
    if (b[off] != 0xFF) return 1;
    const uint8_t marker = b[off + 1];
    if (marker == 0xFF) {  // fill byte
      ++off;
      continue;
    }
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // no length
      off += 2;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) return 1;  // scan data or end: no Exif before it
    const size_t len = size_t{b[off + 2]} << 8 | b[off + 3];
    if (len < 2 || len > size - off - 2) return 1;
    const uint8_t* payload = b + off + 4;
    const size_t payload_size = len - 2;
    if (marker == 0xE1 && payload_size >= 6 && std::memcmp(payload, "Exif\0\0", 6) == 0)
      return tiff_orientation(payload + 6, payload_size - 6);  // PIL reads the first Exif segment only
    off += 2 + len;
  }
  return 1;
}

int png_exif_orientation(const uint8_t* b, size_t size) {
  static const uint8_t kSignature[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (b == nullptr || size < 8 || std::memcmp(b, kSignature, 8) != 0) return 1;
  size_t off = 8;
  for (int chunk = 0; chunk < kMaxSegments && size - off >= 12; ++chunk) {
    const size_t len = size_t{b[off]} << 24 | size_t{b[off + 1]} << 16 | size_t{b[off + 2]} << 8 | b[off + 3];
    const uint8_t* type = b + off + 4;
    if (len > size - off - 12) return 1;  // the chunk (length, type, data, CRC) runs past the file
    const uint8_t* data = b + off + 8;
    if (std::memcmp(type, "IEND", 4) == 0) return 1;
    if (std::memcmp(type, "eXIf", 4) == 0) {  // PIL strips an optional "Exif\0\0" prefix
      if (len >= 6 && std::memcmp(data, "Exif\0\0", 6) == 0) return tiff_orientation(data + 6, len - 6);
      return tiff_orientation(data, len);
    }
    off += 12 + len;
  }
  return 1;
}

int image_exif_orientation(const uint8_t* bytes, size_t size) {
  const int jpeg = jpeg_exif_orientation(bytes, size);
  return jpeg != 1 ? jpeg : png_exif_orientation(bytes, size);
}

void apply_exif_orientation(const uint8_t* src, int w, int h, int chans, int orientation, uint8_t* dst) {
  const size_t c = static_cast<size_t>(chans);
  const bool swap = orientation_swaps_sides(orientation);
  const int out_w = swap ? h : w, out_h = swap ? w : h;
  for (int y = 0; y < out_h; ++y) {
    for (int x = 0; x < out_w; ++x) {
      int sx = x, sy = y;  // the source pixel of output (x, y)
      switch (orientation) {
        case 2: sx = w - 1 - x; break;                 // FLIP_LEFT_RIGHT
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;  // ROTATE_180
        case 4: sy = h - 1 - y; break;                 // FLIP_TOP_BOTTOM
        case 5: sx = y; sy = x; break;                 // TRANSPOSE
        case 6: sx = y; sy = h - 1 - x; break;         // ROTATE_270 (90 clockwise)
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;  // TRANSVERSE
        case 8: sx = w - 1 - y; sy = x; break;         // ROTATE_90 (counter-clockwise)
        default: break;
      }
      std::memcpy(dst + (static_cast<size_t>(y) * out_w + x) * c, src + (static_cast<size_t>(sy) * w + sx) * c, c);
    }
  }
}

}  // namespace edgevit
