// Image resampling as Pillow's Image.resize does it on 8-bit images (the resize in timm's and Hugging Face's
// eval transforms), bit for bit with Pillow up to 12.x (Pillow 13.0 chooses the pass order itself and runs the
// vertical pass first for some shapes: up to a level apart there, more where bicubic overshoot clips): separable, horizontal pass then vertical, each output sample a filter
// window over the input scaled by max(1, in/out) (antialiasing when shrinking), window weights normalised
// to sum 1 in double, then rounded to 22-bit fixed point; sums start at half a unit and are clipped to
// 0..255 after an arithmetic shift. The horizontal pass only covers the rows the vertical one reads, and a
// pass whose axis keeps its size is skipped (no rounding there).
// Reference: resample_ref.cpp (the same windows in double, no fixed point: within one level).
// Goldens: tests/data/resample/pil_resize.safetensors (tools/make_resample_golden.py).
// Also resample_pos_embed_bicubic: torch's bicubic F.interpolate (antialias False or True) for position-embedding
// grids, in double (load time only); goldens: the pos_embed tables of tests/data/families/resize.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/kernels.h"

namespace edgevit {

namespace {

constexpr int kFixedBits = 32 - 8 - 2;  // 8 bits of result, 2 of headroom for negative lobes and overshoot

struct Window {
  int first;  // first input sample
  int count;  // samples in the window
};

// One axis: per output sample its window and `taps` fixed-point weights (zero past count).
int axis_taps(int in_size, int out_size, ResampleFilter f) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double support = resample_filter_support(f) * std::max(1.0, scale);
  return static_cast<int>(std::ceil(support)) * 2 + 1;
}

void axis_weights(int in_size, int out_size, ResampleFilter f, int taps, Window* windows, int32_t* weights,
                  double* tmp) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double stretch = std::max(1.0, scale);
  const double support = resample_filter_support(f) * stretch;
  for (int o = 0; o < out_size; ++o) {
    const double center = (o + 0.5) * scale;
    // Pillow's rounding of the window ends: truncation of x + 0.5 (x may be negative: toward zero).
    const int first = std::max(0, static_cast<int>(center - support + 0.5));
    const int last = std::min(in_size, static_cast<int>(center + support + 0.5));
    const int count = last - first;
    const double inv = 1.0 / stretch;  // multiplied, as Pillow does: dividing rounds differently
    double sum = 0;
    for (int t = 0; t < count; ++t) {
      tmp[t] = resample_filter(f, (t + first - center + 0.5) * inv);
      sum += tmp[t];
    }
    int32_t* w = weights + static_cast<int64_t>(o) * taps;
    for (int t = 0; t < taps; ++t) {
      const double v = t < count && sum != 0.0 ? tmp[t] / sum : (t < count ? tmp[t] : 0.0);
      const double scaled = v * (1 << kFixedBits);
      w[t] = static_cast<int32_t>(v < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    windows[o] = {first, count};
  }
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kFixedBits;
  return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

double resample_filter_support(ResampleFilter f) { return f == ResampleFilter::kBicubic ? 2.0 : 1.0; }

double resample_filter(ResampleFilter f, double x) {
  x = std::fabs(x);
  if (f == ResampleFilter::kBilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;  // Pillow's (and Keys') bicubic
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

size_t resize_u8_scratch_bytes(int in_w, int in_h, int out_w, int out_h, int chans, ResampleFilter f) {
  const int tx = axis_taps(in_w, out_w, f), ty = axis_taps(in_h, out_h, f);
  const size_t tables = (sizeof(Window) + 8) * static_cast<size_t>(out_w + out_h) +
                        sizeof(int32_t) * (static_cast<size_t>(out_w) * tx + static_cast<size_t>(out_h) * ty) +
                        sizeof(double) * static_cast<size_t>(std::max(tx, ty));
  return tables + static_cast<size_t>(out_w) * in_h * chans + 64;
}

void resize_u8(const uint8_t* src, int in_w, int in_h, int chans, uint8_t* dst, int out_w, int out_h,
               ResampleFilter f, void* scratch) {
  const int tx = axis_taps(in_w, out_w, f), ty = axis_taps(in_h, out_h, f);
  uint8_t* p = static_cast<uint8_t*>(scratch);
  const auto take = [&p](size_t bytes) {
    uint8_t* r = p;
    p += (bytes + 7) / 8 * 8;
    return r;
  };
  Window* wx = reinterpret_cast<Window*>(take(sizeof(Window) * out_w));
  Window* wy = reinterpret_cast<Window*>(take(sizeof(Window) * out_h));
  int32_t* kx = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(out_w) * tx));
  int32_t* ky = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * static_cast<size_t>(out_h) * ty));
  double* tmp = reinterpret_cast<double*>(take(sizeof(double) * std::max(tx, ty)));
  uint8_t* rows = take(static_cast<size_t>(out_w) * in_h * chans);  // horizontally resampled rows
  axis_weights(in_h, out_h, f, ty, wy, ky, tmp);

  const bool horizontal = out_w != in_w, vertical = out_h != in_h;
  const uint8_t* mid = src;  // (rows_used, out_w, C) after the horizontal pass
  int row0 = 0;
  if (horizontal) {
    axis_weights(in_w, out_w, f, tx, wx, kx, tmp);
    // Only the rows the vertical pass reads (all of them when it is skipped).
    row0 = vertical ? wy[0].first : 0;
    const int row1 = vertical ? wy[out_h - 1].first + wy[out_h - 1].count : in_h;
    for (int y = row0; y < row1; ++y) {
      const uint8_t* in = src + static_cast<int64_t>(y) * in_w * chans;
      uint8_t* out = rows + static_cast<int64_t>(y - row0) * out_w * chans;
      for (int x = 0; x < out_w; ++x) {
        const int32_t* k = kx + static_cast<int64_t>(x) * tx;
        for (int c = 0; c < chans; ++c) {
          int32_t acc = 1 << (kFixedBits - 1);
          for (int t = 0; t < wx[x].count; ++t) acc += in[(wx[x].first + t) * chans + c] * k[t];
          out[x * chans + c] = clip8(acc);
        }
      }
    }
    mid = rows;
  }
  const int mid_w = horizontal ? out_w : in_w;
  if (!vertical) {
    std::memcpy(dst, mid, static_cast<size_t>(mid_w) * out_h * chans);
    return;
  }
  for (int y = 0; y < out_h; ++y) {
    const int32_t* k = ky + static_cast<int64_t>(y) * ty;
    uint8_t* out = dst + static_cast<int64_t>(y) * mid_w * chans;
    for (int i = 0; i < mid_w * chans; ++i) {
      int32_t acc = 1 << (kFixedBits - 1);
      for (int t = 0; t < wy[y].count; ++t)
        acc += mid[static_cast<int64_t>(wy[y].first - row0 + t) * mid_w * chans + i] * k[t];
      out[i] = clip8(acc);
    }
  }
}

namespace {

// One output sample's taps along one axis: input indices and double weights.
struct AxisTaps {
  std::vector<int> idx;
  std::vector<double> w;
};

// torch's upsample_bicubic2d (antialias=False): source coordinate (dst + 0.5) * in / out - 0.5, not clamped;
// Keys cubic a = -0.75 at floor - 1 .. floor + 2, indices clamped at the border.
AxisTaps cubic_taps(int dst, int in_size, int out_size) {
  constexpr double a = -0.75;
  const auto near = [](double x) { return ((a + 2) * x - (a + 3)) * x * x + 1; };      // |x| <= 1
  const auto far = [](double x) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; };  // 1 < |x| < 2
  const double real = (dst + 0.5) * static_cast<double>(in_size) / out_size - 0.5;
  const double fl = std::floor(real), t = real - fl;
  AxisTaps taps;
  taps.w = {far(t + 1), near(t), near(1 - t), far(2 - t)};
  for (int k = 0; k < 4; ++k) taps.idx.push_back(std::min(std::max(static_cast<int>(fl) - 1 + k, 0), in_size - 1));
  return taps;
}

// torch's _upsample_bicubic2d_aa (antialias=True), Pillow's windows: centre (dst + 0.5) * scale, support
// 2 * max(1, scale), Keys cubic a = -0.5 at (j - centre + 0.5) / max(1, scale), window cut at the border and
// its weights normalised to sum 1.
AxisTaps cubic_aa_taps(int dst, int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(1.0, scale);
  const double support = resample_filter_support(ResampleFilter::kBicubic) * filterscale;
  const double center = (dst + 0.5) * scale;
  const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
  const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size);
  AxisTaps taps;
  double total = 0;
  for (int j = xmin; j < xmax; ++j) {
    const double w = resample_filter(ResampleFilter::kBicubic, (j - center + 0.5) / filterscale);
    taps.idx.push_back(j);
    taps.w.push_back(w);
    total += w;
  }
  if (total != 0)
    for (double& w : taps.w) w /= total;
  return taps;
}

}  // namespace

void resample_pos_embed_bicubic(const float* src, int in_h, int in_w, int embed, float* dst, int out_h, int out_w,
                                bool antialias) {
  const auto taps = antialias ? cubic_aa_taps : cubic_taps;
  std::vector<double> acc(static_cast<size_t>(embed));
  for (int y = 0; y < out_h; ++y) {
    const AxisTaps ay = taps(y, in_h, out_h);
    for (int x = 0; x < out_w; ++x) {
      const AxisTaps ax = taps(x, in_w, out_w);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t i = 0; i < ay.idx.size(); ++i)
        for (size_t j = 0; j < ax.idx.size(); ++j) {
          const double w = ay.w[i] * ax.w[j];
          const float* s = src + (static_cast<int64_t>(ay.idx[i]) * in_w + ax.idx[j]) * embed;
          for (int e = 0; e < embed; ++e) acc[static_cast<size_t>(e)] += w * s[e];
        }
      float* d = dst + (static_cast<int64_t>(y) * out_w + x) * embed;
      for (int e = 0; e < embed; ++e) d[e] = static_cast<float>(acc[static_cast<size_t>(e)]);
    }
  }
}

}  // namespace edgevit
