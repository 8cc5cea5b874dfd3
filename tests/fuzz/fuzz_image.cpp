// libFuzzer target: image decoding and preprocessing (stb_image behind decode_image's limits) for the
// embedded digits model (8x8, 1 channel) and a 3-channel 32x32 model. The limits are the defaults scaled
// down (2048 per side, 4 Mi pixels, a 64 MiB decode budget): the checks are the same code, and inputs that
// claim 64 Mi pixels would spend each run allocating hundreds of megabytes. A decoded image must produce
// finite values, and its header must give a decode cost (image_decode_bytes) within the budget it passed.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "runtime/inputs.h"
#include "runtime/model_spec.h"

namespace {

edgevit::ModelSpec make_spec(int img_size, int chans) {
  edgevit::ModelSpec s;
  s.name = "fuzz";
  s.arch.img_h = s.arch.img_w = img_size;
  s.arch.patch_size = 2;
  s.arch.in_chans = chans;
  s.preprocess.resize = img_size;
  s.preprocess.mean.assign(static_cast<size_t>(chans), 0.5);
  s.preprocess.std.assign(static_cast<size_t>(chans), 0.5);
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const edgevit::ImageLimits kLimits{edgevit::ImageLimits().max_file_bytes, 2048, int64_t{4} << 20,
                                            int64_t{64} << 20};
  static const edgevit::ModelSpec kSpecs[] = {make_spec(8, 1), make_spec(32, 3)};
  for (const edgevit::ModelSpec& spec : kSpecs) {
    const size_t n = static_cast<size_t>(spec.arch.in_chans) * spec.arch.img_h * spec.arch.img_w;
    std::vector<float> dst(n);
    if (!edgevit::decode_image(data, size, "fuzz.img", spec, dst.data(), kLimits).ok()) continue;
    for (float v : dst)
      if (!std::isfinite(v)) std::abort();
    const auto need = edgevit::image_decode_bytes(data, size, "fuzz.img", spec);
    if (!need.ok() || *need <= 0 || *need > kLimits.max_decode_bytes) std::abort();
  }
  return 0;
}
