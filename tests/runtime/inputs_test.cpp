// Image inputs: preprocessing arithmetic, shorter-side resize + centre crop, hostile images rejected
// with input_error before any large allocation, and EXIF orientation parsed from hostile bytes.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>
#include <stb_image_write.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include "runtime/exif.h"
#include "runtime/inputs.h"
#include "tests/runtime/image_fixtures.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

void append_bytes(void* ctx, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(ctx);
  out->insert(out->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}

std::vector<uint8_t> png(int w, int h, int c, const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  stbi_write_png_to_func(append_bytes, &out, w, h, c, pixels.data(), w * c);
  return out;
}

ModelSpec rgb_spec(int img, int resize) {
  ModelSpec s;
  s.name = "test";
  s.arch.img_h = s.arch.img_w = img;
  s.arch.patch_size = 1;
  s.arch.in_chans = 3;
  s.preprocess.resize = resize;
  s.preprocess.mean = {0.5, 0.25, 0.125};
  s.preprocess.std = {0.5, 0.25, 2.0};
  return s;
}

TEST(Inputs, NormalisationIsExactPerChannel) {
  const ModelSpec s = rgb_spec(4, 4);
  std::vector<uint8_t> px(4 * 4 * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 5);
  const auto bytes = png(4, 4, 3, px);
  std::vector<float> x(3 * 16);
  ASSERT_TRUE(decode_image(bytes.data(), bytes.size(), "t.png", s, x.data()).ok());
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(x[c * 16 + i], static_cast<float>((px[i * 3 + c] / 255.0 - s.preprocess.mean[c]) / s.preprocess.std[c]));
}

TEST(Inputs, ShorterSideResizeThenCentreCrop) {
  // 40 x 20 image: left half black, right half white; resize shorter side 20 -> 10 gives 20 x 10, the
  // centre 8 x 8 crop spans columns 6..13: left 4 columns black, right 4 white.
  const ModelSpec s = rgb_spec(8, 10);
  std::vector<uint8_t> px(40 * 20 * 3);
  for (int y = 0; y < 20; ++y)
    for (int x = 0; x < 40; ++x)
      for (int c = 0; c < 3; ++c) px[(y * 40 + x) * 3 + c] = x < 20 ? 0 : 255;
  const auto bytes = png(40, 20, 3, px);
  std::vector<float> out(3 * 64);
  ASSERT_TRUE(decode_image(bytes.data(), bytes.size(), "halves.png", s, out.data()).ok());
  const float black = static_cast<float>((0.0 - 0.5) / 0.5), white = static_cast<float>((1.0 - 0.5) / 0.5);
  for (int y = 0; y < 8; ++y) {
    EXPECT_NEAR(out[y * 8 + 0], black, 1e-5);
    EXPECT_NEAR(out[y * 8 + 2], black, 1e-5);
    EXPECT_NEAR(out[y * 8 + 5], white, 1e-5);
    EXPECT_NEAR(out[y * 8 + 7], white, 1e-5);
  }
}

TEST(Inputs, DownsampleRatiosWhereStbFilterWeightsMissItsSanityWindowStillDecode) {
  // 12 x 100 -> 8 x 67 and 12 x 521 -> 8 x 347: stb_image_resize's triangle-filter weights for some output
  // rows sum outside 0.9..1.1 before it normalises them, and its STBIR_ASSERT aborted asserts-on builds
  // (found by fuzz_image). A uniform grey image must come out uniform and finite.
  const ModelSpec s = rgb_spec(8, 8);
  for (const auto& [w, h] : {std::pair{12, 100}, std::pair{12, 521}, std::pair{100, 12}}) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    const std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3, 102);
    const auto bytes = png(w, h, 3, px);
    std::vector<float> out(3 * 64);
    ASSERT_TRUE(decode_image(bytes.data(), bytes.size(), "strip.png", s, out.data()).ok());
    for (int c = 0; c < 3; ++c)
      for (int i = 0; i < 64; ++i)
        EXPECT_NEAR(out[c * 64 + i], (102 / 255.0 - s.preprocess.mean[c]) / s.preprocess.std[c], 1e-5);
  }
}

}  // namespace
}  // namespace edgevit

// runtime/stb_image_impl.cpp: stb_image's allocator (extern "C", not in a header: only stb calls it).
extern "C" void* edgevit_stbi_malloc(size_t size);
extern "C" void* edgevit_stbi_realloc(void* p, size_t size);
extern "C" void edgevit_stbi_free(void* p);

namespace edgevit {
namespace {

TEST(Inputs, StbAllocationsAreZeroedEvenOnADirtyHeap) {
  // stb_image 2.27 reads Huffman tables a hostile JPEG never defined; zeroed blocks make that read
  // harmless and deterministic (see runtime/stb_image_impl.cpp).
  for (int round = 0; round < 4; ++round) {
    auto* dirty = static_cast<unsigned char*>(edgevit_stbi_malloc(20000));
    ASSERT_NE(dirty, nullptr);
    std::memset(dirty, 0xa5, 20000);
    edgevit_stbi_free(dirty);
    auto* p = static_cast<unsigned char*>(edgevit_stbi_malloc(20000));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::count(p, p + 20000, 0), 20000);
    std::memset(p, 0x5a, 100);
    p = static_cast<unsigned char*>(edgevit_stbi_realloc(p, 40000));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(std::count(p, p + 100, 0x5a), 100);
    EXPECT_EQ(std::count(p + 100, p + 40000, 0), 39900);
    edgevit_stbi_free(p);
  }
}

TEST(Inputs, JpegScanNamingAnUndefinedHuffmanTableDecodesTheSameEveryTime) {
  // A fuzz_image finding (heap-use-after-free / SEGV in stbi__jpeg_huff_decode with stale heap contents):
  // whatever the heap held before, the outcome is the same and nothing is read out of bounds (ASan build).
  std::ifstream f(std::string(EDGEVIT_SOURCE_DIR) + "/tests/data/images/jpeg_undefined_huffman.jpg", std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(bytes.empty());
  const ModelSpec s = rgb_spec(8, 8);
  std::vector<float> first(3 * 64), out(3 * 64);
  const Status s0 = decode_image(bytes.data(), bytes.size(), "u.jpg", s, first.data());
  for (int round = 0; round < 8; ++round) {
    std::vector<std::vector<uint8_t>> junk;  // leave freed, dirty blocks of many sizes behind
    for (size_t n = 64; n < (1u << 20); n *= 2) junk.emplace_back(n, static_cast<uint8_t>(0x11 * round + 0x0f));
    junk.clear();
    auto* dirty = static_cast<unsigned char*>(edgevit_stbi_malloc(18000));
    std::memset(dirty, 0xff - round, 18000);
    edgevit_stbi_free(dirty);
    std::fill(out.begin(), out.end(), -7.f);
    const Status si = decode_image(bytes.data(), bytes.size(), "u.jpg", s, out.data());
    ASSERT_EQ(si.code(), s0.code()) << si.message();
    if (s0.ok()) {
      EXPECT_EQ(std::memcmp(out.data(), first.data(), out.size() * sizeof(float)), 0);
    }
  }
}

TEST(Inputs, GreyModelGetsLuminance) {
  ModelSpec s = rgb_spec(2, 2);
  s.arch.in_chans = 1;
  s.preprocess.mean = {0};
  s.preprocess.std = {1};
  const auto bytes = png(2, 2, 3, std::vector<uint8_t>(12, 200));
  std::vector<float> x(4);
  ASSERT_TRUE(decode_image(bytes.data(), bytes.size(), "g.png", s, x.data()).ok());
  for (float v : x) EXPECT_NEAR(v, 200 / 255.0, 1e-6);
}

TEST(Inputs, HostileImagesAreInputErrors) {
  const ModelSpec s = rgb_spec(8, 8);
  std::vector<float> x(3 * 64);
  const auto good = png(8, 8, 3, std::vector<uint8_t>(192, 7));
  struct Case {
    std::string name;
    std::vector<uint8_t> bytes;
    std::string fragment;
  };
  std::vector<Case> cases;
  cases.push_back({"empty.png", {}, "empty"});
  cases.push_back({"garbage.png", std::vector<uint8_t>(100, 0x41), "not a decodable image"});
  cases.push_back({"truncated.png", std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2), "truncated.png"});
  // A PPM header claiming 100000 x 100000 pixels: refused from the header, before decoding.
  const std::string huge = "P6\n100000 100000\n255\n";
  cases.push_back({"huge.ppm", std::vector<uint8_t>(huge.begin(), huge.end()), "exceeds the limits"});
  for (const Case& c : cases) {
    const Status st = decode_image(c.bytes.data(), c.bytes.size(), c.name, s, x.data());
    EXPECT_EQ(st.code(), StatusCode::kInputError) << c.name << ": " << st.to_string();
    EXPECT_NE(st.message().find(c.name), std::string::npos) << st.message();
    EXPECT_NE(st.message().find(c.fragment), std::string::npos) << st.message();
  }
  ModelSpec four = s;
  four.arch.in_chans = 4;
  EXPECT_EQ(decode_image(good.data(), good.size(), "four.png", four, x.data()).code(), StatusCode::kInputError);
}

#ifdef EDGEVIT_SANITIZER_BUILD
constexpr bool kSanitizerBuild = true;
#else
constexpr bool kSanitizerBuild = false;
#endif

int64_t status_kib(const char* key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::strlen(key)));
  return -1;
}

// With EDGEVIT_DECODE_PEAK="<file> <in_chans> <img_size> <resize>" set, this test binary, re-executed by
// decode_peak_in_fresh_process, decodes the file before main() runs, in a heap nothing else has used, with
// glibc's mmap threshold fixed at 64 KiB (freed blocks are unmapped, not kept for reuse), prints the peak
// resident bytes the decode added (VmHWM after it, the high-water mark reset before it) and exits. A fork
// of the test process would reuse the free chunks its earlier decodes left, whose pages fault in again
// and count twice.
int decode_peak_child() {
  const char* request = std::getenv("EDGEVIT_DECODE_PEAK");
  if (request == nullptr) return 0;
  char file[4096];
  int chans = 0, img = 0, resize = 0;
  if (std::sscanf(request, "%4095s %d %d %d", file, &chans, &img, &resize) != 4) _exit(2);
  std::ifstream in(file, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ModelSpec spec = rgb_spec(img, resize);
  spec.arch.in_chans = chans;
  spec.preprocess.mean.resize(static_cast<size_t>(chans), 0.5);
  spec.preprocess.std.resize(static_cast<size_t>(chans), 0.5);
  std::vector<float> dst(static_cast<size_t>(chans) * img * img);
  ImageLimits lifted;
  lifted.max_decode_bytes = int64_t{1} << 40;
  mallopt(M_MMAP_THRESHOLD, 64 << 10);
  malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t start = status_kib("VmRSS:");
  const Status s = decode_image(bytes.data(), bytes.size(), file, spec, dst.data(), lifted);
  const int64_t peak = status_kib("VmHWM:");
  std::printf("%lld\n", s.ok() && start >= 0 && peak >= 0 ? static_cast<long long>((peak - start) * 1024) : -1LL);
  std::fflush(stdout);
  _exit(0);
}
const int kDecodePeakChild = decode_peak_child();

// Peak resident bytes decode_image adds for this image, measured in a fresh process; -1 on failure.
int64_t decode_peak_in_fresh_process(const std::vector<uint8_t>& bytes, const std::string& name, const ModelSpec& spec) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = '\0';
  const std::string path = testutil::temp_dir() + "decode_peak_" + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  const std::string cmd = "EDGEVIT_DECODE_PEAK='" + path + " " + std::to_string(spec.arch.in_chans) + " " +
                          std::to_string(spec.arch.img_h) + " " + std::to_string(spec.preprocess.resize) +
                          "' '" + exe + "'";
  FILE* child = popen(cmd.c_str(), "r");
  long long peak = -1;
  if (child != nullptr) {
    if (std::fscanf(child, "%lld", &peak) != 1) peak = -1;
    pclose(child);
  }
  std::remove(path.c_str());
  return peak;
}

// image_decode_bytes is an upper bound on what decode_image really adds to a fresh process's peak resident
// memory, per format, bit depth, PNG colour type (palette, grey + tRNS, interlaced), for a downscale and for
// an image passed through unresampled; and it is not so loose that it refuses ordinary photos (a 4000x3000
// JPEG fits the default budget).
TEST(DecodeBudget, HeaderEstimateBoundsTheMeasuredPeak) {
  EDGEVIT_SKIP_IF_EMULATED();  // 39 decodes of up to 2048x2047x4 16-bit images, each in a fresh process
  const std::string dir = testutil::temp_dir();
  struct Image {
    std::string name;
    std::vector<uint8_t> bytes;
  };
  std::vector<Image> images;
  auto file_bytes = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const int w = 1600, h = 1200;
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 2654435761u) >> 13);
  images.push_back({"rgb8.png", png(w, h, 3, rgb)});
  std::vector<uint8_t> out;
  stbi_write_jpg_to_func(append_bytes, &out, w, h, 3, rgb.data(), 90);
  images.push_back({"rgb8.jpg", out});
  out.clear();
  stbi_write_bmp_to_func(append_bytes, &out, w, h, 3, rgb.data());
  images.push_back({"rgb8.bmp", out});
  out.clear();
  stbi_write_tga_to_func(append_bytes, &out, w, h, 3, rgb.data());
  images.push_back({"rgb8.tga", out});
  out.clear();
  const std::vector<float> hdr(rgb.begin(), rgb.end());
  stbi_write_hdr_to_func(append_bytes, &out, w, h, 3, hdr.data());
  images.push_back({"rgb32.hdr", out});
  struct ZeroPng {
    const char* name;
    int color, depth;
    bool interlaced, trns;
  };
  for (const ZeroPng& z : {ZeroPng{"rgba16.png", 6, 16, false, false}, ZeroPng{"grey16.png", 0, 16, false, false},
                           ZeroPng{"rgb16.png", 2, 16, false, false}, ZeroPng{"rgb16_trns.png", 2, 16, false, true},
                           ZeroPng{"grey8_trns_adam7.png", 0, 8, true, true},
                           ZeroPng{"rgba16_adam7.png", 6, 16, true, false},
                           ZeroPng{"palette_trns.png", 3, 8, false, true}, ZeroPng{"grey_alpha16.png", 4, 16, false, false}}) {
    const std::string path = dir + "/" + z.name;
    ASSERT_TRUE(testutil::write_zero_png(path, 2048, 2047, z.color, z.depth, z.interlaced, z.trns));
    images.push_back({z.name, file_bytes(path)});
    std::remove(path.c_str());
  }
  ModelSpec grey = rgb_spec(224, 224);
  grey.arch.in_chans = 1;
  grey.preprocess.mean = {0.5};
  grey.preprocess.std = {0.5};
  ModelSpec same = rgb_spec(1200, 1200);  // 1600x1200 -> 1600x1200: no resampling, crop only
  for (const ModelSpec& spec : {rgb_spec(224, 256), grey, same}) {
    std::vector<float> dst(static_cast<size_t>(spec.arch.in_chans) * spec.arch.img_h * spec.arch.img_w);
    ImageLimits lifted;
    lifted.max_decode_bytes = int64_t{1} << 40;
    for (const Image& img : images) {
      SCOPED_TRACE(img.name + " for " + std::to_string(spec.arch.in_chans) + "x" +
                   std::to_string(spec.arch.img_h));
      auto need = image_decode_bytes(img.bytes.data(), img.bytes.size(), img.name, spec);
      ASSERT_TRUE(need.ok()) << need.status().to_string();
      const int64_t peak = decode_peak_in_fresh_process(img.bytes, img.name, spec);
      ASSERT_GE(peak, 0) << "peak RSS measurement failed";
      // Under ASan, freed blocks sit in its quarantine and shadow memory grows with the heap: resident
      // memory no longer measures live allocations, so only the decodes and refusals are checked there.
      if (!kSanitizerBuild) {
        EXPECT_LE(peak, *need) << "measured " << peak << " bytes, estimated " << *need;
      }
      const Status decoded = decode_image(img.bytes.data(), img.bytes.size(), img.name, spec, dst.data(), lifted);
      EXPECT_TRUE(decoded.ok()) << decoded.to_string();
      std::printf("%-20s -> %dx%dx%d: peak %.1f MiB, estimate %.1f MiB\n", img.name.c_str(), spec.arch.in_chans,
                  spec.arch.img_h, spec.arch.img_w, peak / 1048576.0, *need / 1048576.0);
      // Over the budget by one byte: refused from the header, with the image's size in the message.
      ImageLimits tight;
      tight.max_decode_bytes = *need - 1;
      const Status refused = decode_image(img.bytes.data(), img.bytes.size(), img.name, spec, dst.data(), tight);
      EXPECT_EQ(refused.code(), StatusCode::kInputError) << refused.to_string();
      EXPECT_NE(refused.message().find("max_decode_bytes"), std::string::npos) << refused.message();
    }
  }
  std::vector<uint8_t> photo(size_t{4000} * 3000 * 3, 90);
  out.clear();
  stbi_write_jpg_to_func(append_bytes, &out, 4000, 3000, 3, photo.data(), 90);
  auto need = image_decode_bytes(out.data(), out.size(), "photo.jpg");
  ASSERT_TRUE(need.ok()) << need.status().to_string();
  EXPECT_LT(*need, ImageLimits().max_decode_bytes);
}

TEST(DecodeBudget, UnreadableHeaderIsAnInputErrorNamingTheImage) {
  const std::vector<uint8_t> junk(64, 0x41);
  auto need = image_decode_bytes(junk.data(), junk.size(), "junk.png");
  EXPECT_EQ(need.status().code(), StatusCode::kInputError);
  EXPECT_NE(need.status().message().find("junk.png"), std::string::npos) << need.status().message();
  EXPECT_EQ(image_decode_bytes(junk.data(), 0, "empty.png").status().code(), StatusCode::kInputError);
}

}  // namespace
}  // namespace edgevit

namespace edgevit {
namespace {

// SOI, an APP1 Exif segment whose IFD0 holds `entries` (tag, type, value) in `order` ("II" or "MM"),
// then EOI.
std::vector<uint8_t> exif_jpeg(const char* order, const std::vector<std::array<uint32_t, 3>>& entries) {
  const bool be = order[0] == 'M';
  std::vector<uint8_t> tiff = {static_cast<uint8_t>(order[0]), static_cast<uint8_t>(order[1])};
  auto put16 = [&](uint32_t v) {
    if (be) tiff.insert(tiff.end(), {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)});
    else tiff.insert(tiff.end(), {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8)});
  };
  auto put32 = [&](uint32_t v) {
    if (be) { put16(v >> 16); put16(v & 0xFFFF); } else { put16(v & 0xFFFF); put16(v >> 16); }
  };
  put16(42);
  put32(8);
  put16(static_cast<uint32_t>(entries.size()));
  for (const auto& [tag, type, value] : entries) {
    put16(tag);
    put16(type);
    put32(1);
    if (type == 3) { put16(value); put16(0); } else { put32(value); }
  }
  put32(0);
  std::vector<uint8_t> jpg = {0xFF, 0xD8, 0xFF, 0xE1};
  const size_t len = 2 + 6 + tiff.size();
  jpg.push_back(static_cast<uint8_t>(len >> 8));
  jpg.push_back(static_cast<uint8_t>(len));
  for (char ch : std::string("Exif\0\0", 6)) jpg.push_back(static_cast<uint8_t>(ch));
  jpg.insert(jpg.end(), tiff.begin(), tiff.end());
  jpg.insert(jpg.end(), {0xFF, 0xD9});
  return jpg;
}

TEST(Exif, OrientationFromEitherByteOrder) {
  for (uint32_t o = 1; o <= 8; ++o) {
    const auto ii = exif_jpeg("II", {{0x010F, 2, 0}, {0x0112, 3, o}});
    const auto mm = exif_jpeg("MM", {{0x0112, 3, o}});
    EXPECT_EQ(jpeg_exif_orientation(ii.data(), ii.size()), static_cast<int>(o));
    EXPECT_EQ(jpeg_exif_orientation(mm.data(), mm.size()), static_cast<int>(o));
  }
  const auto as_long = exif_jpeg("II", {{0x0112, 4, 6}});
  EXPECT_EQ(jpeg_exif_orientation(as_long.data(), as_long.size()), 6);
}

TEST(Exif, MalformedMeansUpright) {
  const auto nine = exif_jpeg("II", {{0x0112, 3, 9}});
  EXPECT_EQ(jpeg_exif_orientation(nine.data(), nine.size()), 1);
  const auto ascii = exif_jpeg("II", {{0x0112, 2, 6}});
  EXPECT_EQ(jpeg_exif_orientation(ascii.data(), ascii.size()), 1);
  const auto bad_order = exif_jpeg("XX", {{0x0112, 3, 6}});
  EXPECT_EQ(jpeg_exif_orientation(bad_order.data(), bad_order.size()), 1);
  auto far_ifd = exif_jpeg("II", {{0x0112, 3, 6}});
  far_ifd[6 + 6 + 4] = 0xFF;  // IFD0 offset past the segment
  EXPECT_EQ(jpeg_exif_orientation(far_ifd.data(), far_ifd.size()), 1);
  auto many = exif_jpeg("II", {{0x0112, 3, 6}});
  many[6 + 6 + 8] = 0xFF;  // entry count past the segment (the real entry is first: still found)
  many[6 + 6 + 9] = 0xFF;
  EXPECT_EQ(jpeg_exif_orientation(many.data(), many.size()), 6);
  auto long_segment = exif_jpeg("II", {{0x0112, 3, 6}});
  long_segment[4] = 0xFF;  // segment length past the file
  EXPECT_EQ(jpeg_exif_orientation(long_segment.data(), long_segment.size()), 1);
  EXPECT_EQ(jpeg_exif_orientation(nullptr, 0), 1);
  // Every prefix and every single-byte corruption: no crash (ASan builds check the reads), a value in 1..8.
  const auto good = exif_jpeg("MM", {{0x0100, 4, 7}, {0x0112, 3, 8}});
  for (size_t n = 0; n <= good.size(); ++n) {
    const std::vector<uint8_t> prefix(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    const int o = jpeg_exif_orientation(prefix.data(), prefix.size());
    EXPECT_TRUE(o >= 1 && o <= 8);
  }
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t v : {0x00, 0x01, 0x7F, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] = v;
      const int o = jpeg_exif_orientation(bad.data(), bad.size());
      EXPECT_TRUE(o >= 1 && o <= 8);
    }
}

// A PNG signature, then `chunks` (type, data) each with a length and a (zero) CRC, as the PNG reader sees
// them: eXIf's data is the TIFF structure of exif_jpeg's APP1 segment.
std::vector<uint8_t> png_with(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& chunks) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  for (const auto& [type, data] : chunks) {
    const uint32_t n = static_cast<uint32_t>(data.size());
    png.insert(png.end(), {static_cast<uint8_t>(n >> 24), static_cast<uint8_t>(n >> 16), static_cast<uint8_t>(n >> 8),
                           static_cast<uint8_t>(n)});
    png.insert(png.end(), type.begin(), type.end());
    png.insert(png.end(), data.begin(), data.end());
    png.insert(png.end(), {0, 0, 0, 0});
  }
  return png;
}

std::vector<uint8_t> tiff_of(const std::vector<uint8_t>& jpeg) {  // exif_jpeg's TIFF: after SOI, APP1, length, "Exif\0\0"
  return std::vector<uint8_t>(jpeg.begin() + 12, jpeg.end() - 2);
}

TEST(Exif, PngChunkBeforeOrAfterTheImageData) {
  const std::vector<uint8_t> ihdr(13, 1), idat(5, 2);
  for (uint32_t o = 1; o <= 8; ++o) {
    const auto tiff = tiff_of(exif_jpeg(o % 2 ? "II" : "MM", {{0x0112, 3, o}}));
    const auto head = png_with({{"IHDR", ihdr}, {"eXIf", tiff}, {"IDAT", idat}, {"IEND", {}}});
    const auto tail = png_with({{"IHDR", ihdr}, {"IDAT", idat}, {"eXIf", tiff}, {"IEND", {}}});
    EXPECT_EQ(png_exif_orientation(head.data(), head.size()), static_cast<int>(o));
    EXPECT_EQ(png_exif_orientation(tail.data(), tail.size()), static_cast<int>(o));
    EXPECT_EQ(image_exif_orientation(tail.data(), tail.size()), static_cast<int>(o));
    std::vector<uint8_t> prefixed = {'E', 'x', 'i', 'f', 0, 0};
    prefixed.insert(prefixed.end(), tiff.begin(), tiff.end());
    const auto with_prefix = png_with({{"IHDR", ihdr}, {"eXIf", prefixed}, {"IDAT", idat}, {"IEND", {}}});
    EXPECT_EQ(png_exif_orientation(with_prefix.data(), with_prefix.size()), static_cast<int>(o));
  }
  const auto jpeg6 = exif_jpeg("II", {{0x0112, 3, 6}});
  EXPECT_EQ(image_exif_orientation(jpeg6.data(), jpeg6.size()), 6);
  EXPECT_EQ(png_exif_orientation(jpeg6.data(), jpeg6.size()), 1);  // not a PNG
}

TEST(Exif, PngMalformedMeansUpright) {
  const auto tiff = tiff_of(exif_jpeg("MM", {{0x0100, 4, 7}, {0x0112, 3, 8}}));
  const std::vector<uint8_t> ihdr(13, 1), idat(5, 2);
  const auto after_end = png_with({{"IHDR", ihdr}, {"IDAT", idat}, {"IEND", {}}, {"eXIf", tiff}});
  EXPECT_EQ(png_exif_orientation(after_end.data(), after_end.size()), 1);  // past IEND: not read
  auto long_chunk = png_with({{"IHDR", ihdr}, {"eXIf", tiff}, {"IEND", {}}});
  long_chunk[8] = 0x7F;  // IHDR's length past the file
  EXPECT_EQ(png_exif_orientation(long_chunk.data(), long_chunk.size()), 1);
  EXPECT_EQ(png_exif_orientation(nullptr, 0), 1);
  // Every prefix and every single-byte corruption: no crash (ASan builds check the reads), a value in 1..8.
  const auto good = png_with({{"IHDR", ihdr}, {"eXIf", tiff}, {"IDAT", idat}, {"IEND", {}}});
  ASSERT_EQ(png_exif_orientation(good.data(), good.size()), 8);
  for (size_t n = 0; n <= good.size(); ++n) {
    const int o = png_exif_orientation(good.data(), n);
    EXPECT_TRUE(o >= 1 && o <= 8);
  }
  for (size_t i = 0; i < good.size(); ++i)
    for (uint8_t v : {0x00, 0x01, 0x7F, 0xFF}) {
      std::vector<uint8_t> bad = good;
      bad[i] = v;
      const int o = png_exif_orientation(bad.data(), bad.size());
      EXPECT_TRUE(o >= 1 && o <= 8);
    }
}

TEST(Exif, TransposeAsPil) {
  // 3 x 2 image (w 3, h 2): a b c / d e f, one channel.
  const std::vector<uint8_t> src = {'a', 'b', 'c', 'd', 'e', 'f'};
  const std::map<int, std::string> want = {{1, "abcdef"}, {2, "cbafed"}, {3, "fedcba"}, {4, "defabc"},
                                           {5, "adbecf"}, {6, "daebfc"}, {7, "fcebda"}, {8, "cfbead"}};
  for (const auto& [o, w] : want) {
    std::vector<uint8_t> dst(6);
    apply_exif_orientation(src.data(), 3, 2, 1, o, dst.data());
    EXPECT_EQ(std::string(dst.begin(), dst.end()), w) << "orientation " << o;
  }
}

}  // namespace
}  // namespace edgevit
