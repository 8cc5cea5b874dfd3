// EXIF orientation (stb_image ignores it): the tag read from a JPEG's first APP1 "Exif" segment or a PNG's
// eXIf chunk (before or after the image data, as PIL reads it once the image is loaded), and the transpose
// PIL's ImageOps.exif_transpose applies for it, so an upright photo reaches the model upright.
// The parser reads untrusted bytes: every offset is checked against the segment, and anything malformed
// (truncated segments, offsets past the end, unknown byte orders, values outside 1..8) means "no
// orientation" (1), never an error. Not read: XMP's tiff:Orientation (PIL reads it too; cameras write EXIF).
#pragma once

#include <cstddef>
#include <cstdint>

namespace edgevit {

// 1..8 (the EXIF Orientation tag 0x0112 of IFD0); 1 when absent, malformed or not a JPEG.
int jpeg_exif_orientation(const uint8_t* bytes, size_t size);

// 1..8 from a PNG's first eXIf chunk (a TIFF structure, with or without an "Exif\0\0" prefix); 1 when
// absent, malformed or not a PNG.
int png_exif_orientation(const uint8_t* bytes, size_t size);

// The orientation of an encoded image: JPEG or PNG, as above; 1 for other formats.
int image_exif_orientation(const uint8_t* bytes, size_t size);

// Orientations 5..8 swap width and height.
inline bool orientation_swaps_sides(int orientation) { return orientation >= 5 && orientation <= 8; }

// src (h, w, chans) -> dst, as exif_transpose: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90
// clockwise, 7 transverse, 8 rotate 90 counter-clockwise; dst is (w, h, chans) for 5..8, else (h, w, chans).
// Orientation 1 (or any other value) copies.
void apply_exif_orientation(const uint8_t* src, int w, int h, int chans, int orientation, uint8_t* dst);

}  // namespace edgevit
