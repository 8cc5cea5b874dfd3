// im2col_patches_ref: one element at a time, straight from the definition.
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void im2col_patches_ref(const float* img,  // (B, C, img_h, img_w)
                        float* cols,       // (B * P, C * p * p), P = (img_h / p) * (img_w / p)
                        int batch, int chans, int img_h, int img_w, int patch) {
  const int grid_h = img_h / patch, grid_w = img_w / patch;
  const int64_t cols_per_row = static_cast<int64_t>(chans) * patch * patch;
  for (int b = 0; b < batch; ++b)
    for (int py = 0; py < grid_h; ++py)
      for (int px = 0; px < grid_w; ++px)
        for (int c = 0; c < chans; ++c)
          for (int ky = 0; ky < patch; ++ky)
            for (int kx = 0; kx < patch; ++kx) {
              const int64_t r = (static_cast<int64_t>(b) * grid_h + py) * grid_w + px;
              const int64_t col = (static_cast<int64_t>(c) * patch + ky) * patch + kx;
              const int64_t src = ((static_cast<int64_t>(b) * chans + c) * img_h + py * patch + ky) *
                                      img_w + px * patch + kx;
              cols[r * cols_per_row + col] = img[src];
            }
}

}  // namespace edgevit
