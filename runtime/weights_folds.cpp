// Derived tensors (WeightSource::Derived): checkpoint tensors folded at load into what the graph runs
// (LayerScale into projections, DeiT's two heads into one, HF DINOv2's register layout, the MAP head's latent
// query, position embeddings resampled to the model's grid).
#include "kernels/cpu/kernels.h"
#include "runtime/weights.h"
#include "runtime/weights_util.h"

namespace edgevit {

using namespace weights_detail;

namespace {

// dst (the derived tensor's n elements) from its sources, read in full (src, with their shapes).
// A template so that it reads WeightSource's private Derived and FoldKind through deduction.
template <class Derived>
void apply_fold(const Derived& d, const std::vector<std::vector<float>>& src,
                const std::vector<const std::vector<int64_t>*>& shapes, size_t n, float* dst) {
  using K = decltype(d.kind);
  switch (d.kind) {
    case K::kScaleRows: {
      const size_t rows = static_cast<size_t>((*shapes[0])[0]), inner = n / rows;
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < inner; ++j) dst[r * inner + j] = src[0][r * inner + j] * src[1][r];
      break;
    }
    case K::kHalfConcatCols: {
      const size_t rows = static_cast<size_t>(d.shape[0]), half = static_cast<size_t>(d.shape[1]) / 2;
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < half; ++j) {
          dst[r * 2 * half + j] = src[0][r * half + j] * 0.5f;
          dst[r * 2 * half + half + j] = src[1][r * half + j] * 0.5f;
        }
      break;
    }
    case K::kHalfSum:
      for (size_t i = 0; i < n; ++i) dst[i] = (src[0][i] + src[1][i]) * 0.5f;
      break;
    case K::kAddFirstRow:
      for (size_t i = 0; i < n; ++i) dst[i] = src[0][i] + src[1][i];
      break;
    case K::kRowSlice: {
      const size_t inner = n / static_cast<size_t>(d.shape[0]);
      for (size_t i = 0; i < n; ++i) dst[i] = src[0][static_cast<size_t>(d.begin) * inner + i];
      break;
    }
    case K::kColSlice: {
      const size_t rows = static_cast<size_t>(d.shape[0]), width = static_cast<size_t>(d.shape[1]);
      const size_t src_width = src[0].size() / rows;
      for (size_t r = 0; r < rows; ++r)
        for (size_t j = 0; j < width; ++j) dst[r * width + j] = src[0][r * src_width + static_cast<size_t>(d.begin) + j];
      break;
    }
    case K::kMapQkvWeight: {
      const size_t q = n / 3;
      for (size_t i = 0; i < q; ++i) dst[i] = 0.f;
      for (size_t i = 0; i < n - q; ++i) dst[q + i] = src[0][i];
      break;
    }
    case K::kMapQkvBias: {  // q = latent (E) W_q^T + b_q, in double
      const size_t e = n / 3;
      for (size_t r = 0; r < e; ++r) {
        double acc = src[2][r];
        for (size_t j = 0; j < e; ++j) acc += static_cast<double>(src[0][j]) * src[1][r * e + j];
        dst[r] = static_cast<float>(acc);
      }
      for (size_t i = 0; i < 2 * e; ++i) dst[e + i] = src[3][i];
      break;
    }
    case K::kResampleGrid: {
      const size_t e = static_cast<size_t>(d.shape[2]), prefix = static_cast<size_t>(d.begin) * e;
      for (size_t i = 0; i < prefix; ++i) dst[i] = src[0][i];
      resample_pos_embed_bicubic(src[0].data() + prefix, static_cast<int>(d.grid[0]), static_cast<int>(d.grid[1]),
                                 static_cast<int>(e), dst + prefix, static_cast<int>(d.grid[2]),
                                 static_cast<int>(d.grid[3]), d.antialias);
      break;
    }
    case K::kDropFirstRow: {
      const size_t e = static_cast<size_t>(d.shape[2]);
      for (size_t i = 0; i < n; ++i) dst[i] = src[0][e + i];
      break;
    }
  }
}

}  // namespace

Status WeightSource::read_derived_f32(const std::string& name, const Derived& d, float* dst, size_t count) const {
  int64_t numel = 1;
  for (int64_t x : d.shape) numel *= x;
  if (static_cast<int64_t>(count) != numel)
    return invalid_argument(file_.path() + ": tensor '" + name + "' " + shape_string(d.shape) + " has " +
                            std::to_string(numel) + " elements, destination holds " + std::to_string(count));
  std::vector<std::vector<float>> src(d.sources.size());
  std::vector<const std::vector<int64_t>*> shapes(d.sources.size());
  for (size_t i = 0; i < d.sources.size(); ++i) {
    const bool self = d.sources[i] == name;  // a fold of the checkpoint tensor of the same name (LayerScale)
    auto it = tensors_.find(d.sources[i]);
    shapes[i] = self ? (it == tensors_.end() ? nullptr : &it->second.shape) : find_shape(d.sources[i]);
    if (shapes[i] == nullptr)
      return not_found(file_.path() + ": tensor '" + d.sources[i] + "' is not in the checkpoint");
    int64_t count_i = 1;
    for (int64_t x : *shapes[i]) count_i *= x;
    src[i].resize(static_cast<size_t>(count_i));
    if (self) {
      read_parts_f32(it->second, src[i].data());
    } else {
      EV_RETURN_IF_ERROR(read_f32(d.sources[i], src[i].data(), src[i].size()));
    }
  }
  apply_fold(d, src, shapes, static_cast<size_t>(numel), dst);
  return Status::Ok();
}

}  // namespace edgevit
