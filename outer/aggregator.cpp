#include "outer/aggregator.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "outer/outer_optimizer.h"

namespace geoloco::outer {

Result<ChunkAggregator> ChunkAggregator::create(compression::ChunkLayout layout, std::vector<Participant> participants,
                                                std::uint64_t max_chunks_in_flight) {
  GEOLOCO_RETURN_IF(layout.total == 0 || layout.chunk == 0, Err::invalid_argument,
                    "aggregator: the tensor and its chunks must hold at least one value (total ", layout.total,
                    ", chunk ", layout.chunk, ")");
  GEOLOCO_RETURN_IF(participants.empty(), Err::invalid_argument, "aggregator: a round needs at least one participant");
  GEOLOCO_RETURN_IF(max_chunks_in_flight == 0, Err::invalid_argument,
                    "aggregator: max_chunks_in_flight must be at least 1");
  std::set<std::uint32_t> seen;
  for (const auto& p : participants) {
    GEOLOCO_RETURN_IF(!(std::isfinite(p.weight) && p.weight > 0.0), Err::invalid_argument, "aggregator: site ",
                      p.site, " has weight ", p.weight, "; weights must be finite and > 0");
    GEOLOCO_RETURN_IF(!seen.insert(p.site).second, Err::invalid_argument, "aggregator: site ", p.site,
                      " is listed twice");
  }
  return ChunkAggregator(layout, std::move(participants), max_chunks_in_flight);
}

ChunkAggregator::ChunkAggregator(compression::ChunkLayout layout, std::vector<Participant> participants,
                                 std::uint64_t max_chunks_in_flight)
    : layout_(layout), participants_(std::move(participants)), max_in_flight_(max_chunks_in_flight) {
  std::sort(participants_.begin(), participants_.end(), [](const auto& a, const auto& b) { return a.site < b.site; });
  double total = 0.0;
  for (const auto& p : participants_) total += p.weight;  // site order: the same sum everywhere
  for (const auto& p : participants_) shares_.push_back(p.weight / total);
  reduced_.assign(layout_.count(), 0);
  chunk_squares_.assign(layout_.count(), 0.0);
}

Result<std::size_t> ChunkAggregator::slot_of(std::uint32_t site, std::uint64_t chunk) const {
  GEOLOCO_RETURN_IF(chunk >= layout_.count(), Err::invalid_argument, "aggregator: chunk ", chunk,
                    " of a tensor with ", layout_.count(), " chunks");
  auto it = std::lower_bound(participants_.begin(), participants_.end(), site,
                             [](const Participant& p, std::uint32_t s) { return p.site < s; });
  GEOLOCO_RETURN_IF(it == participants_.end() || it->site != site, Err::invalid_argument, "aggregator: site ", site,
                    " is not a participant of this round");
  GEOLOCO_RETURN_IF(reduced_[chunk] != 0, Err::mismatch, "aggregator: chunk ", chunk,
                    " is already reduced; site ", site, "'s copy is a replay");
  const std::size_t slot = static_cast<std::size_t>(it - participants_.begin());
  auto pending = in_flight_.find(chunk);
  GEOLOCO_RETURN_IF(pending != in_flight_.end() && !pending->second.slots[slot].empty(), Err::mismatch,
                    "aggregator: chunk ", chunk, " from site ", site, " arrived twice");
  GEOLOCO_RETURN_IF(pending == in_flight_.end() && in_flight_.size() >= max_in_flight_, Err::too_large,
                    "aggregator: chunk ", chunk, " would be chunk ", in_flight_.size() + 1,
                    " in flight, over the bound of ", max_in_flight_);
  return slot;
}

Result<ChunkAggregator::Pending*> ChunkAggregator::pending_for(std::uint64_t chunk) {
  auto [it, inserted] = in_flight_.try_emplace(chunk);
  if (inserted) it->second.slots.resize(participants_.size());
  return &it->second;
}

Result<std::optional<std::span<const float>>> ChunkAggregator::add_payload(std::uint32_t site, std::uint64_t chunk,
                                                                           std::span<const std::byte> payload,
                                                                           compression::Pipeline& pipeline) {
  auto slot = slot_of(site, chunk);
  if (!slot.ok()) return slot.status();
  std::vector<float> values(layout_.length(chunk));
  GEOLOCO_TRY(pipeline.decode(payload, values));
  auto pending = pending_for(chunk);
  (*pending)->slots[*slot] = std::move(values);
  if (++(*pending)->arrived < participants_.size()) return std::optional<std::span<const float>>();
  return std::optional<std::span<const float>>(reduce(chunk, **pending));
}

Result<std::optional<std::span<const float>>> ChunkAggregator::add_decoded(std::uint32_t site, std::uint64_t chunk,
                                                                           std::span<const float> values) {
  auto slot = slot_of(site, chunk);
  if (!slot.ok()) return slot.status();
  GEOLOCO_RETURN_IF(values.size() != layout_.length(chunk), Err::invalid_argument, "aggregator: chunk ", chunk,
                    " has ", layout_.length(chunk), " values, site ", site, " gave ", values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    GEOLOCO_RETURN_IF(!std::isfinite(values[i]), Err::non_finite, "aggregator: site ", site, " chunk ", chunk,
                      " value ", i, " is ", values[i]);
  }
  auto pending = pending_for(chunk);
  (*pending)->slots[*slot].assign(values.begin(), values.end());
  if (++(*pending)->arrived < participants_.size()) return std::optional<std::span<const float>>();
  return std::optional<std::span<const float>>(reduce(chunk, **pending));
}

std::span<const float> ChunkAggregator::reduce(std::uint64_t chunk, Pending& pending) {
  const std::size_t n = layout_.length(chunk);
  out_.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (std::size_t k = 0; k < participants_.size(); ++k) sum += shares_[k] * pending.slots[k][i];
    out_[i] = static_cast<float>(sum);
  }
  chunk_squares_[chunk] = outer::squared_norm(out_);
  reduced_[chunk] = 1;
  ++reduced_count_;
  in_flight_.erase(chunk);  // frees the slots: memory follows the chunks in flight
  return out_;
}

double ChunkAggregator::squared_norm() const {
  double sum = 0.0;
  for (double s : chunk_squares_) sum += s;
  return sum;
}

}  // namespace geoloco::outer
