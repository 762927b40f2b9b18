// Fashion-MNIST (Debian package dataset-fashion-mnist): 28×28 grey images of
// clothes in 10 classes, 60000 for training and 10000 ("t10k") for
// evaluation, as gzip'd IDX files. Pixels are kept as bytes (47 MB, not
// 188 MB of floats per worker process) and normalized per batch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "inner/data/dataset.h"

namespace geoloco::inner {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Images with their labels.
struct ImageSet {
  std::size_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  ///< count × rows × cols
  std::vector<std::uint8_t> labels;  ///< count, each < classes
};

/// Reads an image file (IDX rank 3) and a label file (IDX rank 1), through
/// the cache in `cache_dir` when it is not empty (idx_cache.h); `source`,
/// when given, receives where the images came from.
/// Errors: those of read_idx_gz(); mismatch when the counts differ;
/// malformed when a label is >= classes (each message names the file).
Result<ImageSet> load_image_set(const std::string& images_path, const std::string& labels_path,
                                std::size_t classes = 10, const std::string& cache_dir = {},
                                std::string* source = nullptr);

class FashionMnist final : public Dataset {
 public:
  /// Loads `{dir}/train-*` and `{dir}/t10k-*`; eval_limit > 0 keeps only the
  /// first eval_limit evaluation images. With a `cache_dir`, the files are
  /// decompressed once and read back from there at later starts.
  static Result<std::unique_ptr<FashionMnist>> load(const std::string& dir = kFashionMnistDir,
                                                    std::size_t eval_limit = 0, const std::string& cache_dir = {});
  /// From sets already in memory (tests).
  FashionMnist(ImageSet train, ImageSet eval, std::string source = {});

  std::size_t train_items() const override { return train_.count; }
  std::size_t eval_items() const override { return eval_.count; }
  void train_batch(std::span<const std::size_t> items, Batch& batch) const override;
  void eval_batch(std::span<const std::size_t> items, Batch& batch) const override;
  std::string describe() const override;
  bool epochs() const override { return true; }
  std::size_t features() const { return train_.rows * train_.cols; }

 private:
  static void fill(const ImageSet& set, std::span<const std::size_t> items, Batch& batch);
  ImageSet train_;
  ImageSet eval_;
  std::string source_;  ///< where the training images came from (the cache, or decompressed)
};

}  // namespace geoloco::inner
