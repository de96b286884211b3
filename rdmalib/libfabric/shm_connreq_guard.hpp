// Quirks::connreq_names_vanished_peer: keeps shm's listener from mapping the
// region of a peer that is already gone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace rdmalib::lf {

/// Watches the shared-memory region of one shm endpoint (a listener's
/// handshake endpoint, or a connecting one) for queued "map my region" commands whose sender's
/// region no longer exists, and points them at a live endpoint of this
/// process (the sink) instead, so that the provider's next progress call does
/// not dereference the mapping it failed to make. Knows the region layout of
/// libfabric 1.17 only; anything else leaves the guard inactive.
class ShmConnreqGuard {
public:
  /// `region_name`: the watched endpoint's name (without "fi_shm://");
  /// `sink`: gives the raw name of a live shm endpoint of this process, whose
  /// region may receive the redirected commands' bookkeeping ("" when there
  /// is none); called when the first command needs redirecting.
  ShmConnreqGuard(const std::string &region_name, std::function<std::string()> sink);
  ~ShmConnreqGuard();
  ShmConnreqGuard(const ShmConnreqGuard &) = delete;
  ShmConnreqGuard &operator=(const ShmConnreqGuard &) = delete;

  /// True when the region was mapped and its layout recognised.
  bool active() const noexcept { return base_ != nullptr; }
  /// Why the guard is inactive (empty when active).
  const std::string &why_inactive() const noexcept { return why_; }
  /// Redirect every queued command from a vanished peer. Call right before
  /// each provider call that may progress the watched endpoint. Returns the
  /// number of commands redirected.
  size_t sweep() noexcept;

private:
  /// One scan under the region's lock; false when a command needs the sink
  /// and there is none yet.
  bool redirect_locked(size_t &redirected) noexcept;

  uint8_t *base_ = nullptr;
  size_t size_ = 0;
  std::function<std::string()> sink_source_;
  std::string sink_;
  std::string why_;
};

} // namespace rdmalib::lf
