// resize_u8 against Pillow's Image.resize (tests/data/resample/pil_resize.safetensors, written by
// tools/make_resample_golden.py with Pillow): every golden case equal bit for bit, both filters, grey and
// RGB, shrinking (antialiased), enlarging, one axis only and the identity; and against resize_u8_ref (the
// same windows in double) within one level, on sizes the goldens do not hold.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "runtime/safetensors.h"
#include "tests/testutil/testutil.h"

namespace edgevit {
namespace {

struct Image8 {
  int w = 0, h = 0, c = 0;
  std::vector<uint8_t> px;
};

Image8 read_image(const SafetensorsFile& f, const TensorInfo& t) {
  Image8 im;
  im.h = static_cast<int>(t.shape[0]);
  im.w = static_cast<int>(t.shape[1]);
  im.c = static_cast<int>(t.shape[2]);
  std::vector<float> v(static_cast<size_t>(t.numel));
  convert_to_f32(t, f.data(t), v.data());
  for (float x : v) im.px.push_back(static_cast<uint8_t>(x));
  return im;
}

std::vector<uint8_t> resize(const Image8& src, int w, int h, ResampleFilter f) {
  std::vector<uint8_t> scratch(resize_u8_scratch_bytes(src.w, src.h, w, h, src.c, f));
  std::vector<uint8_t> out(static_cast<size_t>(w) * h * src.c, 0xAB);
  resize_u8(src.px.data(), src.w, src.h, src.c, out.data(), w, h, f, scratch.data());
  return out;
}

TEST(Resample, EqualsPillowBitForBit) {
  auto f = SafetensorsFile::open(testutil::source_path("tests/data/resample/pil_resize.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  std::map<std::string, Image8> sources;
  for (const TensorInfo& t : f->tensors())
    if (t.name.rfind("src.", 0) == 0) sources[t.name.substr(4)] = read_image(*f, t);
  int cases = 0;
  for (const TensorInfo& t : f->tensors()) {
    if (t.name.rfind("out.", 0) != 0) continue;
    // out.<source>.<W>x<H>.<filter>
    const std::string rest = t.name.substr(4);
    const size_t d1 = rest.find('.'), d2 = rest.find('.', d1 + 1);
    const std::string src = rest.substr(0, d1), size = rest.substr(d1 + 1, d2 - d1 - 1), filter = rest.substr(d2 + 1);
    int w = 0, h = 0;
    ASSERT_EQ(std::sscanf(size.c_str(), "%dx%d", &w, &h), 2) << t.name;
    ASSERT_TRUE(sources.count(src)) << t.name;
    const ResampleFilter rf = filter == "bicubic" ? ResampleFilter::kBicubic : ResampleFilter::kBilinear;
    const Image8 want = read_image(*f, t);
    const std::vector<uint8_t> got = resize(sources[src], w, h, rf);
    int diff = 0, first = -1;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i] != want.px[i]) {
        if (first < 0) first = static_cast<int>(i);
        ++diff;
      }
    EXPECT_EQ(diff, 0) << t.name << ": " << diff << " samples differ, first at " << first << " (got "
                       << (first >= 0 ? int(got[first]) : 0) << ", Pillow " << (first >= 0 ? int(want.px[first]) : 0) << ")";
    ++cases;
  }
  EXPECT_EQ(cases, 48) << "4 sources x 6 sizes x 2 filters";
}

TEST(Resample, WithinOneLevelOfTheDoubleReference) {
  for (const int c : {1, 3, 4}) {
    Image8 src;
    src.w = 53, src.h = 41, src.c = c;
    const std::vector<float> r = testutil::random_floats(static_cast<size_t>(src.w) * src.h * c, 77 + c, 0.f, 255.f);
    for (float v : r) src.px.push_back(static_cast<uint8_t>(v));
    for (const auto& [w, h] : std::vector<std::pair<int, int>>{{224, 224}, {7, 9}, {53, 20}, {26, 41}, {53, 41}}) {
      for (ResampleFilter f : {ResampleFilter::kBilinear, ResampleFilter::kBicubic}) {
        const std::vector<uint8_t> got = resize(src, w, h, f);
        std::vector<uint8_t> ref(got.size());
        resize_u8_ref(src.px.data(), src.w, src.h, c, ref.data(), w, h, f);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_LE(std::abs(int(got[i]) - int(ref[i])), 1) << w << "x" << h << " c" << c << " sample " << i;
        if (w == src.w && h == src.h) {
          EXPECT_EQ(got, src.px) << "the identity copies";
        }
      }
    }
  }
}

}  // namespace
}  // namespace edgevit
