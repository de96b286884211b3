// MemoryRegion, once for every backend: the backend registers, the front end
// keeps what the inline accessors of buffer.hpp hand out.
#include <rdmalib/buffer.hpp>
#include <rdmalib/fabric.hpp>

#include "backend.hpp"

namespace rdmalib {

MemoryRegion::MemoryRegion(Fabric &fabric, void *ptr, size_t bytes, uint32_t access) {
  if (!ptr || bytes == 0)
    throw Error(ErrorKind::Config, "rdmalib: cannot register " + std::to_string(bytes) +
                                       " bytes at " + (ptr ? "a valid address" : "a null address") +
                                       ": a region needs memory of at least one byte");
  RemoteBuffer remote;
  void *desc = nullptr;
  impl_ = detail::Internals::fabric(fabric).register_memory(ptr, bytes, access, desc, remote);
  ptr_ = ptr;
  bytes_ = bytes;
  desc_ = desc;
  remote_ = remote;
}

void MemoryRegion::reset() noexcept {
  delete impl_; // the backend's destructor deregisters, logging a failure
  impl_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
  desc_ = nullptr;
  remote_ = RemoteBuffer{};
}

MemoryRegion::~MemoryRegion() { reset(); }

MemoryRegion::MemoryRegion(MemoryRegion &&o) noexcept
    : impl_(o.impl_), ptr_(o.ptr_), bytes_(o.bytes_), desc_(o.desc_), remote_(o.remote_) {
  o.impl_ = nullptr;
  o.reset();
}

MemoryRegion &MemoryRegion::operator=(MemoryRegion &&o) noexcept {
  if (this != &o) {
    reset();
    impl_ = o.impl_;
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    desc_ = o.desc_;
    remote_ = o.remote_;
    o.impl_ = nullptr;
    o.reset();
  }
  return *this;
}

} // namespace rdmalib
