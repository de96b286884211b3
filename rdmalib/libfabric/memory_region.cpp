// Memory registration for the libfabric backend.
#include "backend.hpp"

namespace rdmalib::detail {

MemoryRegionImpl *FabricImpl::register_memory(void *ptr, size_t bytes, uint32_t access, void *&desc,
                                              RemoteBuffer &remote) {
  auto impl = std::make_unique<MemoryRegionImpl>();
  impl->fabric = this;

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
    attr.requested_key = app_keys ? next_key() : 0;
    ret = fi_mr_regattr(domain.get(), &attr, 0, impl->mr.out());
    if (ret != -FI_ENOKEY)
      break;
  }
  if (ret)
    lf::throw_fi("fi_mr_regattr of " + std::to_string(bytes) + " bytes on " + provider +
                     " (check `ulimit -l` for the locked-memory limit)",
                 ret);
  // Endpoint-bound regions are enabled by Connection::attach once bound.
  impl->enabled = !mr_endpoint;

  desc = fi_mr_desc(impl->mr.get());
  remote.addr = virt_addr ? reinterpret_cast<uint64_t>(ptr) : 0;
  remote.key = fi_mr_key(impl->mr.get());
  remote.size = bytes;
  if (remote.key == FI_KEY_NOTAVAIL)
    throw Error(ErrorKind::Unsupported, "rdmalib: provider " + provider +
                                            " has no key for a region before it is bound"
                                            " to an endpoint; this provider needs a newer rdmalib");
  return impl.release();
}

} // namespace rdmalib::detail
