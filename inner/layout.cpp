#include "inner/layout.h"

#include <set>

namespace geoloco::inner {

std::size_t ParamLayout::add(std::string name, std::vector<std::size_t> shape) {
  TensorSpec t{std::move(name), std::move(shape), total_};
  total_ += t.size();
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

const TensorSpec* ParamLayout::find(const std::string& name) const {
  for (const TensorSpec& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

Status ParamLayout::validate() const {
  GEOLOCO_RETURN_IF(tensors_.empty(), Err::invalid_argument, "parameter layout: no tensors");
  std::set<std::string> names;
  std::size_t next = 0;
  for (const TensorSpec& t : tensors_) {
    GEOLOCO_RETURN_IF(t.name.empty(), Err::invalid_argument, "parameter layout: a tensor has an empty name");
    GEOLOCO_RETURN_IF(!names.insert(t.name).second, Err::invalid_argument, "parameter layout: tensor name '", t.name,
                      "' appears twice");
    GEOLOCO_RETURN_IF(t.shape.empty(), Err::invalid_argument, "parameter layout: tensor '", t.name, "' has no shape");
    for (std::size_t d : t.shape)
      GEOLOCO_RETURN_IF(d == 0, Err::invalid_argument, "parameter layout: tensor '", t.name, "' has a zero dimension");
    GEOLOCO_RETURN_IF(t.offset != next, Err::invalid_argument, "parameter layout: tensor '", t.name, "' starts at ",
                      t.offset, ", expected ", next, " (tensors must be contiguous)");
    next += t.size();
  }
  GEOLOCO_RETURN_IF(next != total_, Err::invalid_argument, "parameter layout: total ", total_, " != sum of sizes ",
                    next);
  return {};
}

}  // namespace geoloco::inner
