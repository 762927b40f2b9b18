// memfd-backed shared parameters (shared_segment.h).
#include "inner/protocol/shared_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "inner/protocol/layout.h"

namespace geoloco::inner::protocol {
namespace {

Result<float*> map_fd(int fd, std::uint64_t values) {
  void* p = ::mmap(nullptr, values * sizeof(float), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  GEOLOCO_RETURN_IF(p == MAP_FAILED, Err::io, "cannot map ", values * sizeof(float),
                    " bytes of shared memory: ", std::strerror(errno));
  return static_cast<float*>(p);
}

}  // namespace

SharedSegment::SharedSegment(SharedSegment&& o) noexcept
    : fd_(std::move(o.fd_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

SharedSegment& SharedSegment::operator=(SharedSegment&& o) noexcept {
  if (this != &o) {
    unmap();
    fd_ = std::move(o.fd_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

SharedSegment::~SharedSegment() { unmap(); }

void SharedSegment::unmap() {
  if (data_) ::munmap(data_, size_ * sizeof(float));
  data_ = nullptr;
  size_ = 0;
}

Result<SharedSegment> SharedSegment::create(const std::string& name, std::uint64_t values) {
  GEOLOCO_RETURN_IF(values == 0, Err::invalid_argument, "a shared segment needs at least one value");
  GEOLOCO_RETURN_IF(values > kMaxValues, Err::invalid_argument, values, " values are over the limit of ", kMaxValues);
  SharedSegment s;
  s.fd_.reset(::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING));
  GEOLOCO_RETURN_IF(!s.fd_.valid(), Err::io, "memfd_create: ", std::strerror(errno));
  GEOLOCO_RETURN_IF(::ftruncate(s.fd_.get(), static_cast<off_t>(values * sizeof(float))) != 0, Err::io,
                    "cannot size shared memory to ", values * sizeof(float), " bytes: ", std::strerror(errno));
  // Sealed size: a trainer that truncates its copy of the descriptor would
  // otherwise make every daemon access past the new end raise SIGBUS.
  GEOLOCO_RETURN_IF(::fcntl(s.fd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0, Err::io,
                    "cannot seal shared memory: ", std::strerror(errno));
  auto p = map_fd(s.fd_.get(), values);
  if (!p.ok()) return p.status();
  s.data_ = *p;
  s.size_ = values;
  return s;
}

Result<SharedSegment> SharedSegment::map(UniqueFd fd, std::uint64_t values) {
  GEOLOCO_RETURN_IF(values == 0 || values > kMaxValues, Err::invalid_argument, "cannot map ", values, " values");
  struct stat st {};
  GEOLOCO_RETURN_IF(::fstat(fd.get(), &st) != 0, Err::io, "fstat of the shared memory: ", std::strerror(errno));
  GEOLOCO_RETURN_IF(static_cast<std::uint64_t>(st.st_size) != values * sizeof(float), Err::mismatch,
                    "the shared memory holds ", st.st_size, " bytes, WELCOME announced ", values * sizeof(float));
  SharedSegment s;
  auto p = map_fd(fd.get(), values);
  if (!p.ok()) return p.status();
  s.fd_ = std::move(fd);
  s.data_ = *p;
  s.size_ = values;
  return s;
}

}  // namespace geoloco::inner::protocol
