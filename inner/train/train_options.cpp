#include "inner/train/train_options.h"

#include <cmath>

#include "inner/data/fashion_mnist.h"
#include "inner/data/text.h"

namespace geoloco::inner {

Status TrainOptions::validate() const {
  GEOLOCO_RETURN_IF(model != "mlp" && model != "gpt", Err::invalid_argument, "model must be 'mlp' or 'gpt', got '",
                    model, "'");
  GEOLOCO_RETURN_IF(batch == 0, Err::invalid_argument, "batch must be >= 1");
  GEOLOCO_RETURN_IF(micro_batches == 0, Err::invalid_argument, "micro_batches must be >= 1");
  GEOLOCO_RETURN_IF(eval_batch == 0, Err::invalid_argument, "eval_batch must be >= 1");
  GEOLOCO_RETURN_IF(!(clip_norm >= 0.0 && std::isfinite(clip_norm)), Err::invalid_argument,
                    "clip_norm must be finite and >= 0, got ", clip_norm);
  GEOLOCO_RETURN_IF(data.site_shards == 0 || data.site_shard >= data.site_shards, Err::invalid_argument,
                    "data.site_shard (", data.site_shard, ") must be below data.site_shards (", data.site_shards, ")");
  GEOLOCO_RETURN_IF(!(data.heldout_fraction > 0.0 && data.heldout_fraction < 1.0), Err::invalid_argument,
                    "data.heldout_fraction must be in (0, 1), got ", data.heldout_fraction);
  GEOLOCO_TRY(schedule.validate());
  GEOLOCO_TRY(adamw.validate());
  return model == "mlp" ? mlp.validate() : gpt.validate();
}

Result<std::unique_ptr<Model>> make_model(const TrainOptions& options) {
  GEOLOCO_TRY(options.validate());
  if (options.model == "mlp") {
    auto m = Mlp::create(options.mlp);
    if (!m.ok()) return m.status();
    return std::unique_ptr<Model>(std::move(*m));
  }
  auto g = Gpt::create(options.gpt);
  if (!g.ok()) return g.status();
  return std::unique_ptr<Model>(std::move(*g));
}

Result<std::shared_ptr<const Dataset>> load_dataset(const TrainOptions& options) {
  GEOLOCO_TRY(options.validate());
  if (options.model == "mlp") {
    auto d = FashionMnist::load(options.data.fashion_mnist_dir, options.data.eval_limit, options.data.cache_dir);
    if (!d.ok()) return d.status();
    GEOLOCO_RETURN_IF((*d)->features() != options.mlp.inputs, Err::mismatch, options.data.fashion_mnist_dir,
                      ": images have ", (*d)->features(), " pixels, the mlp expects ", options.mlp.inputs, " inputs");
    return std::shared_ptr<const Dataset>(std::move(*d));
  }
  auto text = options.data.text_path.empty() ? run_bible() : read_text(options.data.text_path);
  if (!text.ok()) return text.status();
  auto d = TextDataset::create(std::move(*text), options.gpt.context, options.data.heldout_fraction,
                               options.data.eval_limit);
  if (!d.ok()) return d.status();
  return std::shared_ptr<const Dataset>(std::move(*d));
}

}  // namespace geoloco::inner
