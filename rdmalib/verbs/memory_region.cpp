// MemoryRegion on verbs: ibv_reg_mr with the rights asked for (local write is
// always granted, receives and read/atomic results need it). Keys are the
// provider's (the rkey); the local descriptor is the ibv_mr itself, whose lkey
// the posts read.
#include "backend.hpp"

#include <cerrno>

#include <rdmalib/buffer.hpp>
#include <rdmalib/fabric.hpp>

namespace rdmalib {

namespace {

[[noreturn]] void registration_failed(const detail::FabricImpl &f, size_t bytes, int err) {
  std::string hint;
  if (err == ENOMEM || err == EPERM)
    hint = " (locked-memory limit too low? check `ulimit -l` / memlock in "
           "/etc/security/limits.conf)";
  vb::throw_errno(ErrorKind::Backend,
                  "rdmalib verbs: ibv_reg_mr of " + std::to_string(bytes) + " bytes on " +
                      f.device_name + hint,
                  err);
}

} // namespace

namespace detail {

MemoryRegionImpl *FabricImpl::register_memory(void *ptr, size_t bytes, uint32_t access, void *&desc,
                                              RemoteBuffer &remote) {
  const FabricImpl &f = *this;
  int flags = IBV_ACCESS_LOCAL_WRITE;
  if (access & AccessRemoteRead)
    flags |= IBV_ACCESS_REMOTE_READ;
  if (access & AccessRemoteWrite)
    flags |= IBV_ACCESS_REMOTE_WRITE;
  if ((access & AccessRemoteAtomic) && f.attr.atomic_cap != IBV_ATOMIC_NONE)
    flags |= IBV_ACCESS_REMOTE_ATOMIC;

  std::unique_ptr<MemoryRegionImpl> impl(new MemoryRegionImpl);
  impl->mr.reset(ibv_reg_mr(f.pd.get(), ptr, bytes, flags));
  if (!impl->mr)
    registration_failed(f, bytes, errno);
  uint32_t rkey = impl->mr->rkey;
  if (f.zero_based) {
    // Virtual addressing masked off: peers address the region by offset, so
    // it is registered a second time, zero-based (iova 0), for remote access.
    // Local posts keep using the first registration's lkey with virtual
    // addresses: the data path does not change.
    impl->remote_mr.reset(ibv_reg_mr_iova(f.pd.get(), ptr, bytes, 0, flags));
    if (!impl->remote_mr)
      registration_failed(f, bytes, errno);
    rkey = impl->remote_mr->rkey;
  }
  desc = impl->mr.get();
  remote.addr = f.zero_based ? 0 : reinterpret_cast<uint64_t>(ptr);
  remote.key = rkey;
  remote.size = bytes;
  return impl.release();
}

} // namespace detail

} // namespace rdmalib
