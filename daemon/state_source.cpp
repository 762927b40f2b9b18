#include "daemon/state_source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/digest.h"
#include "daemon/state_sync.h"

namespace geoloco::daemon {

namespace {
Status errno_error(std::string_view what, const std::filesystem::path& path) {
  return GEOLOCO_ERROR(Err::io, what, " ", path.string(), ": ", std::strerror(errno));
}
}  // namespace

// ------------------------------------------------------------ the checkpoint

namespace {
FileIdentity identity_of(const struct stat& st) {
  return FileIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                      static_cast<std::uint64_t>(st.st_size),
                      std::int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec};
}
}  // namespace

std::optional<FileIdentity> FileIdentity::of(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return identity_of(st);
}

Result<std::shared_ptr<const MappedCheckpoint>> MappedCheckpoint::open(const std::filesystem::path& path,
                                                                       const std::string& config_hash,
                                                                       const std::optional<FileIdentity>& checked) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error("cannot open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return GEOLOCO_ERROR(Err::io, "cannot map ", path.string(), ": not a non-empty regular file");
  }
  const bool known = checked && *checked == identity_of(st);
  void* base = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
  const int mapped_errno = errno;
  ::close(fd);  // the mapping keeps the file
  if (base == MAP_FAILED) {
    errno = mapped_errno;
    return errno_error("cannot map", path);
  }
  std::shared_ptr<MappedCheckpoint> m(new MappedCheckpoint());
  m->base_ = base;
  m->size_ = static_cast<std::size_t>(st.st_size);
  auto view = outer::view_checkpoint(std::span(static_cast<const std::byte*>(base), m->size_), path.string());
  if (!view.ok()) return view.status();
  GEOLOCO_RETURN_IF(view->config_hash != config_hash, Err::mismatch, path.string(),
                    " is a checkpoint of another configuration of the job");
  if (!known) {
    const std::string digest = digest_hex(digest_f32(view->anchor));
    GEOLOCO_RETURN_IF(digest != view->anchor_digest, Err::mismatch, path.string(), ": the anchor has digest ", digest,
                      ", the file says ", view->anchor_digest, " (the file is corrupted)");
  }
  m->view_ = std::move(*view);
  return std::shared_ptr<const MappedCheckpoint>(std::move(m));
}

MappedCheckpoint::~MappedCheckpoint() {
  if (base_) ::munmap(base_, size_);
}

// ------------------------------------------------------------- the entries

Result<std::shared_ptr<const OpenDelta>> OpenDelta::open(const std::filesystem::path& path, const RoundDeltaHeader& h) {
  std::shared_ptr<OpenDelta> d(new OpenDelta());
  d->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (d->fd_ < 0) return errno_error("cannot open", path);
  struct stat st {};
  if (::fstat(d->fd_, &st) != 0) return errno_error("cannot stat", path);
  GEOLOCO_RETURN_IF(static_cast<std::uint64_t>(st.st_size) != h.bytes, Err::mismatch, path.string(), " has ",
                    st.st_size, " bytes, its header was read from one of ", h.bytes, " (it was replaced)");
  d->path_ = path;
  d->header_ = h;
  return std::shared_ptr<const OpenDelta>(std::move(d));
}

OpenDelta::~OpenDelta() {
  if (fd_ >= 0) ::close(fd_);
}

Status OpenDelta::read(std::uint64_t offset, std::span<std::byte> out) const {
  std::size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_error("cannot read", path_);
    GEOLOCO_RETURN_IF(n == 0, Err::io, "cannot read ", path_.string(), ": it ended early");
    done += static_cast<std::size_t>(n);
  }
  return {};
}

// -------------------------------------------------------------- the source

std::shared_ptr<const StateSource> StateSource::copy_of(const outer::OuterState& state) {
  std::shared_ptr<StateSource> s(new StateSource());
  auto copy = std::make_shared<outer::OuterState>();
  copy->round = state.round;
  copy->anchor = state.anchor;
  copy->momentum = state.momentum;
  s->anchor_ = copy->anchor;
  s->momentum_ = copy->momentum;
  s->copy_ = std::move(copy);
  s->base_round_ = state.round;
  s->base_digest_ = digest_hex(digest_f32(s->anchor_));
  s->momentum_digest_ = digest_hex(digest_f32(s->momentum_));
  s->values_ = state.anchor.size();
  s->layout_ = state.layout;
  return s;
}

std::shared_ptr<const StateSource> StateSource::of(std::shared_ptr<const MappedCheckpoint> checkpoint,
                                                   std::vector<std::shared_ptr<const OpenDelta>> deltas) {
  std::shared_ptr<StateSource> s(new StateSource());
  const auto& v = checkpoint->view();
  s->anchor_ = v.anchor;
  s->momentum_ = v.momentum;
  s->base_round_ = v.round;
  s->base_digest_ = v.anchor_digest;
  s->momentum_digest_ = v.momentum_digest;
  s->values_ = v.anchor.size();
  s->layout_ = v.layout;
  s->checkpoint_ = std::move(checkpoint);
  s->deltas_ = std::move(deltas);
  return s;
}

std::shared_ptr<const StateSource> StateSource::from_held(std::uint64_t base_round, std::string base_digest,
                                                          std::uint64_t values, Layout layout,
                                                          std::vector<std::shared_ptr<const OpenDelta>> deltas) {
  std::shared_ptr<StateSource> s(new StateSource());
  s->base_round_ = base_round;
  s->base_digest_ = std::move(base_digest);
  s->values_ = values;
  s->layout_ = std::move(layout);
  s->from_held_ = true;
  s->deltas_ = std::move(deltas);
  return s;
}

std::uint64_t StateSource::round() const { return deltas_.empty() ? base_round_ : deltas_.back()->header().round; }

std::string StateSource::digest() const { return deltas_.empty() ? base_digest_ : deltas_.back()->header().digest; }

StateOfferMessage StateSource::offer(const std::string& job, std::uint64_t chunk_values) const {
  StateOfferMessage o;
  o.job = job;
  o.round = round();
  o.anchor_digest = digest();
  o.momentum_digest = from_held_ ? std::string() : momentum_digest_;
  o.layout = layout_;
  if (!deltas_.empty() || from_held_) {
    o.base_round = base_round_;
    o.base_digest = base_digest_;
    o.from_held = from_held_;
    for (const auto& d : deltas_) {
      const auto& h = d->header();
      o.deltas.push_back({h.round, h.bytes, h.hash, h.digest});
    }
  }
  return sized_offer(std::move(o), values_, chunk_values);
}

Result<std::span<const std::byte>> StateSource::frame(const StateOfferMessage& offer, std::uint64_t i,
                                                      Buffer& scratch) const {
  const OfferFrames frames = offer_frames(offer);
  const auto place = frames.place(i, offer);
  GEOLOCO_RETURN_IF(!place, Err::invalid_argument, "frame ", i, " of ", frames.total, " asked");
  if (place->entry < 0) {
    const auto& tensor = place->tensor == 0 ? anchor_ : momentum_;
    return std::as_bytes(tensor).subspan(place->begin, place->size);
  }
  scratch.resize(place->size);
  GEOLOCO_TRY(deltas_[static_cast<std::size_t>(place->entry)]->read(place->begin, scratch));
  return std::span<const std::byte>(scratch);
}

std::uint64_t StateSource::bytes() const {
  std::uint64_t total = from_held_ ? 0 : 2 * values_ * sizeof(float);
  for (const auto& d : deltas_) total += d->header().bytes;
  return total;
}

// ---------------------------------------------------------------- the plan

SourcePlan plan_state_source(const RoundAt& held, const std::optional<RoundAt>& asker,
                             const std::optional<RoundAt>& checkpoint,
                             const std::map<std::uint64_t, JournaledCommit>& commits,
                             const std::map<std::uint64_t, RoundDeltaHeader>& log, std::uint64_t values) {
  const std::uint64_t state_bytes = 2 * values * sizeof(float);
  // The committed entries of rounds from + 1 .. held, with their bytes; none
  // when one is missing or is not the committed outcome.
  auto chain = [&](std::uint64_t from) -> std::optional<std::pair<std::vector<std::uint64_t>, std::uint64_t>> {
    std::vector<std::uint64_t> rounds;
    std::uint64_t bytes = 0;
    if (held.round - from > kMaxOfferedDeltas) return std::nullopt;  // more than an offer may carry
    for (std::uint64_t r = from + 1; r <= held.round; ++r) {
      const auto c = commits.find(r);
      const auto e = log.find(r);
      if (c == commits.end() || e == log.end() || e->second.digest != c->second.digest) return std::nullopt;
      rounds.push_back(r);
      bytes += e->second.bytes;
    }
    return std::make_pair(std::move(rounds), bytes);
  };
  // Whether `at` is a committed state of this job (round 0: the start).
  auto committed = [&](const RoundAt& at) {
    if (at.round == held.round) return at.digest == held.digest;
    const auto c = commits.find(at.round);
    return at.round == 0 ? true : c != commits.end() && c->second.digest == at.digest;
  };
  SourcePlan best;
  best.kind = SourcePlan::checkpoint_now;
  best.base = held.round;
  best.bytes = state_bytes;
  // The checkpoint on disk, when its entries add at most a quarter to the
  // state's bytes: on a slow link more would cost longer than writing a
  // checkpoint of the held round now.
  if (checkpoint && checkpoint->round <= held.round && committed(*checkpoint))
    if (auto c = chain(checkpoint->round); c && c->second <= state_bytes / 4)
      best = {SourcePlan::checkpoint_and_deltas, checkpoint->round, std::move(c->first), state_bytes + c->second};
  // An asker that holds the held round itself (a site restarted on its
  // checkpoint of the committed round) is sent nothing: zero entries.
  if (asker && asker->round <= held.round && asker->round != 0 && committed(*asker))
    if (auto c = chain(asker->round); c && c->second < best.bytes)
      best = {SourcePlan::deltas_from_held, asker->round, std::move(c->first), c->second};
  return best;
}

}  // namespace geoloco::daemon
