// Memory registration for the libfabric backend.
#include <rdmalib/buffer.hpp>
#include <rdmalib/fabric.hpp>

#include "internal.hpp"

namespace rdmalib {

MemoryRegion::MemoryRegion(Fabric &fabric, void *ptr, size_t bytes, uint32_t access) {
  detail::FabricImpl &f = *fabric.impl();
  auto impl = std::make_unique<detail::MemoryRegionImpl>();
  impl->fabric = &f;

  uint64_t flags = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
  if (access & AccessRemoteRead)
    flags |= FI_REMOTE_READ;
  if (access & AccessRemoteWrite)
    flags |= FI_REMOTE_WRITE;
  if (access & AccessRemoteAtomic)
    flags |= FI_REMOTE_READ | FI_REMOTE_WRITE;

  iovec iov{ptr, bytes};
  fi_mr_attr attr{};
  attr.mr_iov = &iov;
  attr.iov_count = 1;
  attr.access = flags;
  attr.iface = FI_HMEM_SYSTEM;

  // With application-chosen keys a collision inside the domain is reported as
  // -FI_ENOKEY; draw again a few times before giving up.
  int ret = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    attr.requested_key = f.app_keys ? f.next_key() : 0;
    ret = fi_mr_regattr(f.domain.get(), &attr, 0, impl->mr.out());
    if (ret != -FI_ENOKEY)
      break;
  }
  if (ret)
    lf::throw_fi("fi_mr_regattr of " + std::to_string(bytes) + " bytes on " + f.provider +
                     " (check `ulimit -l` for the locked-memory limit)",
                 ret);
  // Endpoint-bound regions are enabled by Connection::attach once bound.
  impl->enabled = !f.mr_endpoint;

  impl_ = impl.release();
  ptr_ = ptr;
  bytes_ = bytes;
  desc_ = fi_mr_desc(impl_->mr.get());
  remote_.addr = f.virt_addr ? reinterpret_cast<uint64_t>(ptr) : 0;
  remote_.key = fi_mr_key(impl_->mr.get());
  remote_.size = bytes;
  if (remote_.key == FI_KEY_NOTAVAIL)
    throw Error(ErrorKind::Unsupported, "rdmalib: provider " + f.provider +
                                            " has no key for a region before it is bound"
                                            " to an endpoint; this provider needs a newer rdmalib");
}

void MemoryRegion::reset() noexcept {
  delete impl_;
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
  o.ptr_ = nullptr;
  o.bytes_ = 0;
  o.desc_ = nullptr;
  o.remote_ = RemoteBuffer{};
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
    o.ptr_ = nullptr;
    o.bytes_ = 0;
    o.desc_ = nullptr;
    o.remote_ = RemoteBuffer{};
  }
  return *this;
}

} // namespace rdmalib
