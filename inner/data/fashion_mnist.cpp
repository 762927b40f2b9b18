#include "inner/data/fashion_mnist.h"

#include "inner/data/idx_cache.h"

namespace geoloco::inner {

namespace {
// Fashion-MNIST's pixel mean and standard deviation (on [0, 1]): inputs of
// unit scale let one learning rate suit every layer.
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;
}  // namespace

Result<ImageSet> load_image_set(const std::string& images_path, const std::string& labels_path, std::size_t classes,
                                const std::string& cache_dir, std::string* source) {
  auto cached = read_idx_gz_cached(images_path, 3, cache_dir);
  if (!cached.ok()) return cached.status();
  IdxArray* images = &cached->array;
  if (source) *source = std::move(cached->source);
  auto labels = read_idx_gz(labels_path, 1);  // 29 kB of gzip: not worth a cache
  if (!labels.ok()) return labels.status();
  GEOLOCO_RETURN_IF(images->dims[0] != labels->dims[0], Err::mismatch, images_path, " holds ", images->dims[0],
                    " images but ", labels_path, " holds ", labels->dims[0], " labels");
  for (std::size_t i = 0; i < labels->data.size(); ++i)
    GEOLOCO_RETURN_IF(labels->data[i] >= classes, Err::malformed, labels_path, ": label ", int{labels->data[i]},
                      " of item ", i, " is not below the ", classes, " classes");
  ImageSet set;
  set.count = images->dims[0];
  set.rows = images->dims[1];
  set.cols = images->dims[2];
  set.pixels = std::move(images->data);
  set.labels = std::move(labels->data);
  return set;
}

Result<std::unique_ptr<FashionMnist>> FashionMnist::load(const std::string& dir, std::size_t eval_limit,
                                                         const std::string& cache_dir) {
  std::string source;
  auto train =
      load_image_set(dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz", 10, cache_dir, &source);
  if (!train.ok()) return train.status();
  auto eval = load_image_set(dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz", 10, cache_dir);
  if (!eval.ok()) return eval.status();
  GEOLOCO_RETURN_IF(train->rows != eval->rows || train->cols != eval->cols, Err::mismatch, dir,
                    ": training images are ", train->rows, "x", train->cols, ", evaluation images ", eval->rows, "x",
                    eval->cols);
  if (eval_limit > 0 && eval_limit < eval->count) {
    const std::size_t pixels = eval->rows * eval->cols;
    eval->count = eval_limit;
    eval->pixels.resize(eval_limit * pixels);
    eval->labels.resize(eval_limit);
  }
  return std::make_unique<FashionMnist>(std::move(*train), std::move(*eval), cache_dir.empty() ? "" : source);
}

FashionMnist::FashionMnist(ImageSet train, ImageSet eval, std::string source)
    : train_(std::move(train)), eval_(std::move(eval)), source_(std::move(source)) {}

void FashionMnist::fill(const ImageSet& set, std::span<const std::size_t> items, Batch& batch) {
  const std::size_t f = set.rows * set.cols;
  batch.samples = items.size();
  batch.features.resize(items.size() * f);
  batch.targets.resize(items.size());
  batch.tokens.clear();
  for (std::size_t s = 0; s < items.size(); ++s) {
    const std::uint8_t* px = set.pixels.data() + items[s] * f;
    float* x = batch.features.data() + s * f;
    for (std::size_t j = 0; j < f; ++j) x[j] = (static_cast<float>(px[j]) / 255.0f - kMean) / kStd;
    batch.targets[s] = set.labels[items[s]];
  }
}

void FashionMnist::train_batch(std::span<const std::size_t> items, Batch& batch) const { fill(train_, items, batch); }
void FashionMnist::eval_batch(std::span<const std::size_t> items, Batch& batch) const { fill(eval_, items, batch); }

std::string FashionMnist::describe() const {
  return cat("fashion-mnist (", train_.count, " train, ", eval_.count, " eval, ", train_.rows, "x", train_.cols,
             source_.empty() ? "" : "; images " + source_, ")");
}

}  // namespace geoloco::inner
