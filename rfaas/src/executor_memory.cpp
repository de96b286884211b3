// rfaas::executor: registered memory (rfaas::allocator): blocks registered
// with the fabric whose prefix holds the invocation header, so an input that
// starts at one is sent without a copy, and the result header, so that a
// result is written straight into an output that starts at one (see
// executor::impl::post and on_result).
#include "executor_impl.hpp"

#include <cstdlib>
#include <new>

namespace rfaas {

namespace {
/// Workers write results into the blocks (executor::impl::post names them as
/// result targets); keys are unpredictable and only ever shown to the
/// workers of this client's allocations.
constexpr uint32_t kRegisteredAccess = rdmalib::AccessRemoteWrite;
} // namespace

void executor::impl::revoke_target(detail::Registration &r) noexcept {
  // Closing the registration first: should the new one fail, the old key is
  // dead all the same and the block is used like plain memory from now on.
  r.region = rdmalib::MemoryRegion();
  try {
    r.region = rdmalib::MemoryRegion(fabric, r.base, r.total, kRegisteredAccess);
  } catch (const rdmalib::Error &e) {
    rfaas::logger().warn("allocator: re-registering a block after an abandoned invocation "
                         "failed, it is used without zero copy from now on: {}",
                         e.what());
  }
  ++counters.targets_revoked;
}

void *executor::allocate_registered(size_t bytes) {
  using detail::Registration;
  if (bytes > (size_t(1) << 40))
    throw std::bad_alloc();
  size_t total = (Registration::kPrefix + bytes + 4095) & ~size_t(4095);
  void *base = std::aligned_alloc(4096, total);
  if (!base)
    throw std::bad_alloc();
  auto *r = new (std::nothrow) Registration;
  if (!r) {
    std::free(base);
    throw std::bad_alloc();
  }
  try {
    r->region = rdmalib::MemoryRegion(impl_->fabric, base, total, kRegisteredAccess);
  } catch (const rdmalib::Error &e) {
    rfaas::logger().error("allocator: {}", e.what());
    delete r;
    std::free(base);
    throw std::bad_alloc();
  }
  r->base = base;
  r->user_bytes = bytes;
  r->total = total;
  void *user = static_cast<char *>(base) + Registration::kPrefix;
  if (!impl_->registry.insert(user, r)) {
    delete r;
    std::free(base);
    throw std::bad_alloc();
  }
  return user;
}

void executor::free_registered(void *p) noexcept {
  if (!p || !impl_)
    return;
  detail::Registration *r = impl_->registry.erase(p);
  if (!r)
    return;
  void *base = r->base;
  delete r; // deregisters before the memory goes
  std::free(base);
}

} // namespace rfaas
