#include "inner/cpu/embedding.h"

namespace geoloco::inner::cpu {

void embedding_forward(float* out, const std::int32_t* tokens, const float* wte, const float* wpe, std::size_t batch,
                       std::size_t t, std::size_t c) {
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < t; ++i) {
      const float* te = wte + static_cast<std::size_t>(tokens[b * t + i]) * c;
      const float* pe = wpe + i * c;
      float* y = out + (b * t + i) * c;
      for (std::size_t j = 0; j < c; ++j) y[j] = te[j] + pe[j];
    }
}

void embedding_backward(float* d_wte, float* d_wpe, const float* d_out, const std::int32_t* tokens, std::size_t batch,
                        std::size_t t, std::size_t c) {
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t i = 0; i < t; ++i) {
      const float* dy = d_out + (b * t + i) * c;
      float* dte = d_wte + static_cast<std::size_t>(tokens[b * t + i]) * c;
      float* dpe = d_wpe + i * c;
      for (std::size_t j = 0; j < c; ++j) {
        dte[j] += dy[j];
        dpe[j] += dy[j];
      }
    }
}

}  // namespace geoloco::inner::cpu
