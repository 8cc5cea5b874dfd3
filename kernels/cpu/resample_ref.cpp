// Reference for resize_u8: the same separable windows (resample_filter, scaled by max(1, in/out)) as dense
// weight matrices, sums in double, each pass rounded to 8 bits (no fixed-point weights). It differs from
// Pillow's arithmetic (resize_u8) by at most one level per sample.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace edgevit {

namespace {

// Weights of every input sample for every output sample of one axis (dense: out x in).
std::vector<double> dense_weights(int in_size, int out_size, ResampleFilter f) {
  std::vector<double> w(static_cast<size_t>(in_size) * out_size, 0.0);
  const double scale = static_cast<double>(in_size) / out_size, stretch = std::max(1.0, scale);
  const double support = resample_filter_support(f) * stretch;
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    const int first = std::max(0, static_cast<int>(center - support + 0.5));
    const int last = std::min(in_size, static_cast<int>(center + support + 0.5));
    double sum = 0;
    for (int i = first; i < last; ++i) sum += resample_filter(f, (i - center + 0.5) / stretch);
    for (int i = first; i < last; ++i)
      w[static_cast<size_t>(o) * in_size + i] = resample_filter(f, (i - center + 0.5) / stretch) / (sum != 0 ? sum : 1);
  }
  return w;
}

}  // namespace

static uint8_t round8(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 0L, 255L)); }

void resize_u8_ref(const uint8_t* src, int in_w, int in_h, int chans, uint8_t* dst, int out_w, int out_h,
                   ResampleFilter f) {
  // Horizontal pass, then vertical, each stored as 8 bits (Pillow keeps its intermediate image in 8 bits,
  // so a filter's overshoot is clipped between the passes); a pass whose axis keeps its size is skipped.
  std::vector<uint8_t> mid(src, src + static_cast<size_t>(in_w) * in_h * chans);
  int mid_w = in_w;
  if (out_w != in_w) {
    const std::vector<double> wx = dense_weights(in_w, out_w, f);
    std::vector<uint8_t> h(static_cast<size_t>(out_w) * in_h * chans);
    for (int y = 0; y < in_h; ++y)
      for (int x = 0; x < out_w; ++x)
        for (int c = 0; c < chans; ++c) {
          double acc = 0;
          for (int i = 0; i < in_w; ++i)
            acc += wx[static_cast<size_t>(x) * in_w + i] * src[(static_cast<size_t>(y) * in_w + i) * chans + c];
          h[(static_cast<size_t>(y) * out_w + x) * chans + c] = round8(acc);
        }
    mid.swap(h);
    mid_w = out_w;
  }
  if (out_h == in_h) {
    std::copy(mid.begin(), mid.end(), dst);
    return;
  }
  const std::vector<double> wy = dense_weights(in_h, out_h, f);
  for (int y = 0; y < out_h; ++y)
    for (int x = 0; x < mid_w * chans; ++x) {
      double acc = 0;
      for (int i = 0; i < in_h; ++i) acc += wy[static_cast<size_t>(y) * in_h + i] * mid[static_cast<size_t>(i) * mid_w * chans + x];
      dst[static_cast<size_t>(y) * mid_w * chans + x] = round8(acc);
    }
}

}  // namespace edgevit
