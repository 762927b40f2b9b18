// Small in-memory datasets for tests that must not depend on the Debian
// data packages: random 4×4 "images" whose label is a function of the
// pixels (so there is something to learn), and a repetitive text.
#pragma once

#include <memory>
#include <string>

#include "inner/data/fashion_mnist.h"
#include "inner/data/text.h"
#include "inner/rng.h"

namespace geoloco::inner::testing {

inline ImageSet synthetic_images(std::size_t count, std::uint64_t seed) {
  ImageSet s;
  s.count = count, s.rows = 4, s.cols = 4;
  Rng rng(seed);
  for (std::size_t i = 0; i < count; ++i) {
    unsigned sum = 0;
    for (int j = 0; j < 16; ++j) {
      const auto px = static_cast<std::uint8_t>(rng.below(256));
      s.pixels.push_back(px);
      if (j < 4) sum += px;  // the label depends on the first row only
    }
    s.labels.push_back(static_cast<std::uint8_t>(sum * 10 / 1021));
  }
  return s;
}

inline std::shared_ptr<const Dataset> synthetic_image_dataset() {
  return std::make_shared<FashionMnist>(synthetic_images(512, 1), synthetic_images(128, 2));
}

inline std::shared_ptr<const Dataset> synthetic_text_dataset(std::size_t context) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning God created the heaven and the earth. ";
  auto d = TextDataset::create(std::move(text), context, 0.1, 16);
  return std::shared_ptr<const Dataset>(std::move(*d));
}

}  // namespace geoloco::inner::testing
