#include "inner/layout.h"

namespace geoloco::inner {

std::size_t ParamLayout::add(std::string name, std::vector<std::uint64_t> shape) {
  TensorDesc t{std::move(name), std::move(shape), total_};
  total_ += t.size();
  tensors_.push_back(std::move(t));
  return tensors_.back().offset;
}

Status ParamLayout::validate() const {
  for (const auto& t : tensors_)
    GEOLOCO_RETURN_IF(t.shape.empty(), Err::invalid_argument, "parameter layout: tensor '", t.name, "' has no shape");
  if (Status s = check_layout(tensors_); !s.ok()) return Status(s.code(), cat("parameter layout: ", s.message()));
  return {};
}

}  // namespace geoloco::inner
