// Registered memory: what local operations read from / write into, and what
// remote peers are allowed to access.
//
// A MemoryRegion registers memory somebody else owns (for rfaas::allocator and
// user vectors); a Buffer<T> owns page-aligned, zeroed memory plus its
// registration. Both yield LocalRef slices for posts and a RemoteBuffer that
// is sent to peers so they can write, read or update the memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include <rdmalib/errors.hpp>

namespace rdmalib {

class Fabric;

namespace detail {
struct MemoryRegionImpl;
struct Internals;
} // namespace detail

/// Access rights of a registration, combined with |. Local access is always
/// granted.
enum Access : uint32_t {
  AccessLocal = 0,
  AccessRemoteRead = 1u << 0,
  AccessRemoteWrite = 1u << 1,
  AccessRemoteAtomic = 1u << 2,
  AccessAll = AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic,
};

/// What a peer needs to access a region: plain data, safe to copy into messages
/// (the wire protocol stores it as three little-endian 64-bit fields).
///
/// `addr` is the base the backend expects in remote operations: the region's
/// virtual address when Capabilities::virtual_addressing, otherwise 0 (remote
/// accesses are then offsets). Callers always address remote memory as
/// (RemoteBuffer, offset) and never compute on `addr` themselves.
struct RemoteBuffer {
  /// Base for remote operations: a virtual address or 0 (see above).
  uint64_t addr = 0;
  /// The region's remote key (rkey / fi_mr_key).
  uint64_t key = 0;
  /// Bytes a peer may access from `addr` on.
  uint64_t size = 0;
};
static_assert(sizeof(RemoteBuffer) == 24, "RemoteBuffer is a wire type");
static_assert(std::is_trivially_copyable<RemoteBuffer>::value, "RemoteBuffer is a wire type");

/// A slice of registered local memory, passed to posts. Cheap to copy; does not
/// own anything. `desc` is the backend's local descriptor (lkey / fi_mr_desc).
struct LocalRef {
  /// First byte of the slice.
  void *ptr = nullptr;
  /// Bytes in the slice.
  size_t len = 0;
  /// The backend's local descriptor; may be null where the provider needs none.
  void *desc = nullptr;
};

/// A registration of memory owned elsewhere. Move-only; deregisters on
/// destruction (failures are logged, never thrown). The memory must outlive the
/// region, and the region must outlive every operation that uses it.
///
/// Thread-safety: construction and destruction may run concurrently with other
/// registrations on the same Fabric; accessors are const and thread-safe.
class MemoryRegion {
public:
  MemoryRegion() noexcept = default;
  /// Register `bytes` at `ptr` with `access` rights. Keys follow the fabric's
  /// policy: provider keys where the provider chooses them, otherwise keys drawn
  /// by rdmalib that are unique within the process and unpredictable.
  /// Throws Error(Backend) with the backend's text on failure (e.g. memlock limit).
  MemoryRegion(Fabric &fabric, void *ptr, size_t bytes, uint32_t access = AccessAll);
  ~MemoryRegion();
  /// Takes over the registration; `o` is left invalid.
  MemoryRegion(MemoryRegion &&o) noexcept;
  /// Deregisters the current region, then takes over `o`'s.
  MemoryRegion &operator=(MemoryRegion &&o) noexcept;
  MemoryRegion(const MemoryRegion &) = delete;
  MemoryRegion &operator=(const MemoryRegion &) = delete;

  /// False for a default-constructed or moved-from region.
  bool valid() const noexcept { return impl_ != nullptr; }
  /// The registered memory (owned by the caller).
  void *data() const noexcept { return ptr_; }
  /// Registered length in bytes.
  size_t bytes() const noexcept { return bytes_; }
  /// Local descriptor for posts (may be null where the provider needs none).
  void *desc() const noexcept { return desc_; }
  /// The key peers use to access this region.
  uint64_t key() const noexcept { return remote_.key; }
  /// The whole region, for a peer.
  const RemoteBuffer &remote() const noexcept { return remote_; }
  /// A slice [offset, offset+len) for local posts; no bounds check beyond debug.
  LocalRef local(size_t offset, size_t len) const noexcept {
    return LocalRef{static_cast<char *>(ptr_) + offset, len, desc_};
  }
  /// The whole region as a LocalRef.
  LocalRef local() const noexcept { return LocalRef{ptr_, bytes_, desc_}; }

private:
  friend struct detail::Internals;
  void reset() noexcept;
  detail::MemoryRegionImpl *impl_ = nullptr;
  void *ptr_ = nullptr;
  size_t bytes_ = 0;
  void *desc_ = nullptr;
  RemoteBuffer remote_{};
};

/// Owned, page-aligned, zero-initialised memory for `count` objects of T, plus
/// its registration. Move-only. T must be trivially copyable: bytes cross the
/// network unchanged.
template <class T> class Buffer {
  static_assert(std::is_trivially_copyable<T>::value, "Buffer<T> needs a trivially copyable T");

public:
  /// Page alignment: registration pins whole pages, and no other object shares them.
  static constexpr size_t alignment = 4096;

  Buffer() noexcept = default;
  /// Allocate and register. Throws Error on allocation or registration failure.
  Buffer(Fabric &fabric, size_t count, uint32_t access = AccessAll) : count_(count) {
    size_t bytes = count * sizeof(T);
    size_t rounded = ((bytes ? bytes : 1) + alignment - 1) / alignment * alignment;
    void *p = std::aligned_alloc(alignment, rounded);
    if (!p)
      throw Error(ErrorKind::Backend,
                  "rdmalib: cannot allocate a buffer of " + std::to_string(bytes) + " bytes");
    mem_.reset(p);
    std::memset(p, 0, rounded);
    region_ = MemoryRegion(fabric, p, bytes ? bytes : 1, access);
  }

  /// The elements; null for a default-constructed buffer.
  T *data() noexcept { return static_cast<T *>(mem_.get()); }
  /// The elements, read-only.
  const T *data() const noexcept { return static_cast<const T *>(mem_.get()); }
  /// Element `i`, unchecked.
  T &operator[](size_t i) noexcept { return data()[i]; }
  /// Element `i`, unchecked, read-only.
  const T &operator[](size_t i) const noexcept { return data()[i]; }
  /// Number of T elements.
  size_t size() const noexcept { return count_; }
  /// size() in bytes (without the padding to the alignment).
  size_t bytes() const noexcept { return count_ * sizeof(T); }

  /// Slice of `count` elements starting at element `first`, for posts.
  LocalRef local(size_t first, size_t count) const noexcept {
    return region_.local(first * sizeof(T), count * sizeof(T));
  }
  /// The whole buffer as a LocalRef.
  LocalRef local() const noexcept { return region_.local(0, bytes()); }
  /// The first `bytes` bytes (for sends whose length is not a multiple of T).
  LocalRef local_bytes(size_t offset, size_t bytes) const noexcept {
    return region_.local(offset, bytes);
  }
  /// What a peer needs to write to or read from this buffer.
  const RemoteBuffer &remote() const noexcept { return region_.remote(); }
  /// The registration, for offsets and keys of a part of the buffer.
  const MemoryRegion &region() const noexcept { return region_; }

private:
  struct Free {
    void operator()(void *p) const noexcept { std::free(p); }
  };
  // Declared before region_ so the registration is released first.
  std::unique_ptr<void, Free> mem_;
  MemoryRegion region_;
  size_t count_ = 0;
};

} // namespace rdmalib
