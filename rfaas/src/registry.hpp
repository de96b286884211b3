// Internal: the registered blocks handed out by executor::allocate_registered.
//
// execute() asks "does the input start at one of our blocks?" on every call,
// so the lookup must take no lock and allocate nothing: a fixed open-addressing
// table of atomics keyed by the user pointer. Inserts and erases come from
// allocator calls on any thread; a block is never erased while an invocation
// uses it (the caller owns both; an invocation the caller gave up on lets go
// of its blocks at the timeout), so a lookup never sees a freed block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include <rdmalib/buffer.hpp>

namespace rfaas::detail {

/// One block: [base, base + kPrefix) is the prefix room, the user's bytes
/// follow. The end of the prefix holds the invocation's headers when the block
/// is sent as input without a copy, and the ResultHeader (its last 16 bytes,
/// right before the user's bytes) when a result is written into the block in
/// place: headers and data then travel with one write.
struct Registration {
  /// Room before the user's bytes, as much as an input slot's
  /// (proto::kSlotPrefix), which also keeps the user's data 64-byte aligned.
  static constexpr size_t kPrefix = 64;
  void *base = nullptr;
  size_t user_bytes = 0;
  /// Bytes registered from base (prefix, user bytes, rounding).
  size_t total = 0;
  /// Registered for local access and remote write (the executor's workers
  /// write results into it). Replaced by a fresh registration, with a new
  /// key, when an invocation whose result target it is gets abandoned; invalid
  /// when that re-registration failed (the block is then used like plain
  /// memory).
  rdmalib::MemoryRegion region;
  /// Invocations in flight that use the prefix (as input header room or as
  /// result target): another one must not overwrite it (the executor's owner
  /// thread only).
  uint32_t in_flight = 0;
};

class Registry {
public:
  static constexpr size_t kCapacity = 4096;

  Registry() {
    for (size_t i = 0; i < kCapacity; ++i) {
      keys_[i].store(kEmpty, std::memory_order_relaxed);
      values_[i].store(nullptr, std::memory_order_relaxed);
    }
  }

  /// False when the table is full.
  bool insert(const void *key, Registration *r) noexcept {
    uintptr_t k = reinterpret_cast<uintptr_t>(key);
    size_t i = hash(k);
    for (size_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
      uintptr_t cur = keys_[i].load(std::memory_order_acquire);
      if (cur != kEmpty && cur != kTombstone)
        continue;
      // Publish the value before the key becomes visible to lookups.
      if (keys_[i].compare_exchange_strong(cur, kBusy, std::memory_order_acq_rel)) {
        values_[i].store(r, std::memory_order_relaxed);
        keys_[i].store(k, std::memory_order_release);
        return true;
      }
    }
    return false;
  }

  Registration *find(const void *key) const noexcept {
    uintptr_t k = reinterpret_cast<uintptr_t>(key);
    if (k <= kBusy)
      return nullptr;
    size_t i = hash(k);
    for (size_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
      uintptr_t cur = keys_[i].load(std::memory_order_acquire);
      if (cur == k)
        return values_[i].load(std::memory_order_relaxed);
      if (cur == kEmpty)
        return nullptr;
    }
    return nullptr;
  }

  /// Remove `key`; returns its registration or nullptr.
  Registration *erase(const void *key) noexcept {
    uintptr_t k = reinterpret_cast<uintptr_t>(key);
    size_t i = hash(k);
    for (size_t n = 0; n < kCapacity; ++n, i = (i + 1) & (kCapacity - 1)) {
      uintptr_t cur = keys_[i].load(std::memory_order_acquire);
      if (cur == k) {
        Registration *r = values_[i].load(std::memory_order_relaxed);
        keys_[i].store(kTombstone, std::memory_order_release);
        return r;
      }
      if (cur == kEmpty)
        return nullptr;
    }
    return nullptr;
  }

private:
  static constexpr uintptr_t kEmpty = 0, kTombstone = 1, kBusy = 2;
  static size_t hash(uintptr_t k) noexcept {
    return static_cast<size_t>(((k >> 6) * 0x9E3779B97F4A7C15ull) >> 52) & (kCapacity - 1);
  }
  static_assert((kCapacity & (kCapacity - 1)) == 0, "power of two");

  std::atomic<uintptr_t> keys_[kCapacity];
  std::atomic<Registration *> values_[kCapacity];
};

} // namespace rfaas::detail
