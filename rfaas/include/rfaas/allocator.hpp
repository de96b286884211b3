// rfaas::allocator<T>: registered memory for standard containers.
//
//   rfaas::executor ex(dev);
//   std::vector<uint64_t, rfaas::allocator<uint64_t>> in(1024, rfaas::allocator<uint64_t>(ex));
//   ex.execute("sum_squares", in, out);   // payload written straight from `in`
//
// Memory comes from executor::allocate_registered(): registered with the
// executor's network once, at allocation, so invocations whose input starts at
// such a block need no copy. Containers that reallocate (push_back beyond the
// capacity) register the new block and release the old one, which costs a
// registration: reserve() first on hot paths.
//
// Thread-safety: allocate/deallocate are thread-safe. The executor must
// outlive every block (and must not be moved while blocks exist).
#pragma once

#include <cstddef>
#include <new>

#include <rfaas/executor.hpp>

namespace rfaas {

/// A standard allocator whose blocks are registered with an executor's network (the
/// file's opening comment has an example).
template <class T> class allocator {
public:
  /// Element type, as the standard allocator requirements ask.
  using value_type = T;
  static_assert(alignof(T) <= 64, "rfaas::allocator aligns to 64 bytes");

  /// Allocates from `ex`, which must outlive every block.
  explicit allocator(executor &ex) noexcept : ex_(&ex) {}
  /// Rebinding: the same executor, another element type.
  template <class U> allocator(const allocator<U> &o) noexcept : ex_(o.owner()) {}

  /// Throws std::bad_alloc (also on overflow or when registration fails).
  T *allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T))
      throw std::bad_alloc();
    return static_cast<T *>(ex_->allocate_registered(n * sizeof(T)));
  }
  /// Returns `p` to its executor; thread-safe.
  void deallocate(T *p, size_t) noexcept { ex_->free_registered(p); }

  /// The executor the blocks come from.
  executor *owner() const noexcept { return ex_; }

  /// Equal when both allocate from the same executor: a block of one may be freed by
  /// the other.
  template <class U> bool operator==(const allocator<U> &o) const noexcept {
    return ex_ == o.owner();
  }
  /// Negation of operator==.
  template <class U> bool operator!=(const allocator<U> &o) const noexcept {
    return ex_ != o.owner();
  }

private:
  executor *ex_;
};

} // namespace rfaas
