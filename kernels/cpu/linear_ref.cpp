// linear_ref: the triple loop in double, then the epilogue in double.
#include <cmath>
#include <cstdint>

#include "kernels/cpu/kernels.h"

namespace edgevit {

void linear_ref(const float* x,     // (M, K)
                const float* w,     // (N, K)
                const float* bias,  // (N) or nullptr
                float* y,           // (M, N)
                int m, int n, int k, Epilogue ep) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double acc = bias != nullptr ? bias[j] : 0.0;
      for (int t = 0; t < k; ++t)
        acc += static_cast<double>(x[static_cast<int64_t>(i) * k + t]) * w[static_cast<int64_t>(j) * k + t];
      float& out = y[static_cast<int64_t>(i) * n + j];
      switch (ep) {
        case Epilogue::kNone: out = static_cast<float>(acc); break;
        case Epilogue::kGelu: out = static_cast<float>(0.5 * acc * std::erfc(-acc / std::sqrt(2.0))); break;  // = 1 + erf
        case Epilogue::kResidualAdd: out = static_cast<float>(out + acc); break;
        case Epilogue::kGeluTanh: {  // 0.5 acc (1 + tanh u) = acc / (1 + e^-2u), no cancellation (gelu_tanh_ref)
          const double u = std::sqrt(2.0 / 3.14159265358979323846) * (acc + 0.044715 * acc * acc * acc);
          out = static_cast<float>(acc / (1.0 + std::exp(-2.0 * u)));
          break;
        }
        case Epilogue::kQuickGelu: out = static_cast<float>(acc / (1.0 + std::exp(-1.702 * acc))); break;
        case Epilogue::kTanh: out = static_cast<float>(std::tanh(acc)); break;
      }
    }
  }
}

}  // namespace edgevit
