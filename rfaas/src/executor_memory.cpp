// rfaas::executor: registered memory (rfaas::allocator): blocks registered
// with the fabric whose prefix holds the invocation header, so an input that
// starts at one is sent without a copy (see executor::impl::post).
#include "executor_impl.hpp"

#include <cstdlib>
#include <new>

namespace rfaas {

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
    r->region = rdmalib::MemoryRegion(impl_->fabric, base, total, rdmalib::AccessLocal);
  } catch (const rdmalib::Error &e) {
    rfaas::logger().error("allocator: {}", e.what());
    delete r;
    std::free(base);
    throw std::bad_alloc();
  }
  r->base = base;
  r->user_bytes = bytes;
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
