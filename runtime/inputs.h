// Model inputs from files: images (PNG/JPEG/PPM/BMP/TGA via stb_image) and safetensors tensors.
// Image preprocessing (ModelSpec::preprocess, docs/config.md "Preprocessing"), timm's eval transform and
// Hugging Face's PIL image processors step for step: decode to the model's channel count (1 = grey,
// 3 = RGB), apply a JPEG's EXIF orientation (runtime/exif.h), resize as Pillow's Image.resize does on
// 8-bit images (kernels/cpu/resample.cpp; the shorter side to preprocess.resize, or exactly
// resize_w x resize_h, or keeping the aspect ratio to cover resize_w x resize_h as timm's ResizeKeepRatio;
// bilinear, bicubic or nearest), centre-crop img_h x img_w (torchvision's or
// transformers' offset rounding), then x = (float)((p * rescale - mean[c]) / std[c]) in double. A side
// the resize keeps is not resampled.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model_spec.h"
#include "base/status.h"

namespace edgevit {

struct ImageLimits {
  int64_t max_file_bytes = 64 << 20;
  int max_side = 16384;
  int64_t max_pixels = 64 << 20;
  // Peak bytes one decode_image call may allocate (image_decode_bytes): stb_image's buffers at the file's
  // real bit depth, the 8-bit pixels, their EXIF-oriented copy, the 8-bit resized image and the resizer's
  // work space. The default admits an 8-bit RGB photo of 17 Mpixels (4800x3600) and more for a 3-channel model; a
  // 16-bit RGBA 8192x8191 PNG (1.07 GB to decode) is refused before decoding (docs/reliability.md).
  int64_t max_decode_bytes = int64_t{256} << 20;
};

// The peak bytes decode_image allocates for this encoded image, from its header alone (nothing is
// decoded): stb_image's working buffers for the format (a PNG's compressed and inflated data and its
// image at the file's bit depth, a JPEG's component planes and coefficients) and the preprocessing
// buffers. This form assumes a model with 3 input channels, img_size 224 and a bilinear resize of the
// shorter side to 256 (the ImageNet ViTs); the form with the ModelSpec is exact for that model and is the one decode_image checks.
// kInputError (naming `display`) if the header cannot be read.
Result<int64_t> image_decode_bytes(const uint8_t* bytes, size_t size, const std::string& display);
Result<int64_t> image_decode_bytes(const uint8_t* bytes, size_t size, const std::string& display,
                                   const ModelSpec& spec);

// Decodes an encoded image from memory into dst (C, img_h, img_w). `display` names the source in
// errors ("cat.png"). kInputError for undecodable, oversized or unsupported images, and for images whose
// decode would need more than limits.max_decode_bytes (checked from the header, before decoding).
Status decode_image(const uint8_t* bytes, size_t size, const std::string& display, const ModelSpec& spec,
                    float* dst, const ImageLimits& limits = {});
Status load_image_file(const std::string& path, const ModelSpec& spec, float* dst,
                       const ImageLimits& limits = {});

// Raw pixels (H, W, C) uint8 -> dst (C, img_h, img_w), same preprocessing as decode_image;
// `orientation` is the EXIF orientation (1..8) the pixels are stored in (runtime/exif.h).
Status preprocess_pixels(const uint8_t* pixels, int width, int height, int chans, const std::string& display,
                         const ModelSpec& spec, float* dst, int orientation = 1);

// Largest input file load_input_file reads, and largest float32 batch it builds from a safetensors input
// (256 MiB: 445 ViT-B images of 3x224x224). Checked before anything is allocated.
inline constexpr int64_t kMaxInputBytes = int64_t{256} << 20;

struct InputBatch {
  int count = 0;             // N
  std::vector<float> data;   // (N, C, H, W)
};

// An image file (one image) or a safetensors file whose tensor `input` is [N, C, H, W] (F32/F16/BF16;
// other tensors ignored). Chosen by content: safetensors if it starts like one, else an image. Regular
// files only (base/file_io.h), at most kMaxInputBytes. Every problem with the file's contents, a
// malformed safetensors header included, is kInputError naming the file (and the tensor).
Result<InputBatch> load_input_file(const std::string& path, const ModelSpec& spec);

}  // namespace edgevit
