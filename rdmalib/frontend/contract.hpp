// The contract between rdmalib's front end and a backend.
//
// The public classes (Fabric, MemoryRegion, Connection, Listener,
// ConnectionRequest, Operations) are implemented once, in rdmalib/frontend/:
// argument checks, Status rules, deadlines and retries, move operations and
// accessors, the capability mask, describe(). A backend (rdmalib/libfabric/,
// rdmalib/verbs/; exactly one is compiled, chosen by RFAAS_NETWORK_BACKEND)
// fills the narrow set of operations below, in a header named backend.hpp on
// rdmalib's private include path. The front end includes that header, so the
// calls are direct and inline into the public calls: no virtual call, no
// allocation, no exception between the two on the data path.
//
// A backend defines these five types in rdmalib::detail, each `final`,
// deriving from the core below where there is one:
//
// struct FabricImpl final : FabricCore
//   void open();
//       Open config (FabricCore::config; FabricCore::mask is set and may steer
//       negotiation, e.g. not offering virtual addressing), fill `caps` with
//       what the provider / device offers and `provider`. Throws Error.
//   void finish();
//       Called after the front end applied the mask to `caps` (see
//       apply_mask): derive the backend's own flags from the final values.
//   std::string describe_details() const;
//       Backend part of Fabric::describe(): "domain=lo fabric=..." etc.
//   MemoryRegionImpl *register_memory(void *ptr, size_t bytes, uint32_t access,
//                                     void *&desc, RemoteBuffer &remote);
//       Register; throws Error naming the size and the likely cause.
//   static const char *backend_name() noexcept;
//   static std::string backend_version();
//   static std::vector<ProviderInfo> discover();
//   static std::vector<std::string> known_providers();
//   static std::string canonical_provider(const std::string &);
//   static void preload(const DeviceConfig &);
//   static Fabric::ConfinementNeeds confinement_needs(const DeviceConfig &);
//   static void isolate_tenants() noexcept;
//   static Fabric::ReclaimReport reclaim_stale(std::chrono::seconds);
//   bool prepare(const ConnectionOptions &, Fabric::Refill);
//       Fabric::prepare with the options' defaults applied: keep connection
//       endpoints for these depths opened ahead of need, where opening one is
//       slow; false (nothing done) elsewhere.
//   Fabric::PreparedEndpoints prepared() const;   what prepare() did so far
//   bool ready_links(std::vector<uint64_t> &tags); links of a shared endpoint
//       with receive completions waiting (LinkCore::tag); false elsewhere
//   bool names_own_endpoint(const Address &) const noexcept;
//       Fabric::names_own_endpoint: the address is an endpoint of this process
//       on a fabric of node-local named endpoints; false where unknown.
//
// struct MemoryRegionImpl final
//   Owns a registration; its destructor releases it (logging failures).
//
// struct ConnectionImpl final : LinkCore
//   explicit ConnectionImpl(FabricImpl &);
//   void connect(const Address &remote, const void *pd, size_t len, const Deadline &);
//       One attempt; on return the link is established and peer_private set.
//       Throws Error (Refused, Timeout, Backend...) naming the address.
//   void accept(RequestImpl &, const void *pd, size_t len, const Deadline &);
//       Complete a request; `remote` and `peer_private` are set by the front end.
//   void attach(MemoryRegionImpl &);   bind a region where the fabric needs it
//   void close() noexcept;             release the endpoint, telling the peer
//   --- data path, all noexcept, each returns:
//       Ok; Again when there is no room (no free slot, provider queue full:
//       the front end drives make_room() and tries again until the post
//       deadline, then returns Timeout); anything else with last_error set.
//       A post that returns anything but Ok has posted nothing and produces
//       no completion. Remote memory comes as (address, key): the front end
//       has checked the bounds and added the offset.
//   Status post_send(const LocalRef &, uint64_t ctx, bool inline_);
//   Status post_recv(const LocalRef *, const uint64_t *ctx, size_t n, size_t &done);
//       Posts in order; `done` = how many this call posted (also on Again).
//   Status post_write(const LocalRef &, uint64_t addr, uint64_t key, uint64_t ctx, bool inline_);
//   Status post_write_imm(const LocalRef &, uint64_t addr, uint64_t key, uint32_t imm,
//                         uint64_t ctx, bool inline_);   native remote CQ data
//   Status post_write_notify(const LocalRef &, uint64_t addr, uint64_t key, uint32_t imm,
//                            uint64_t ctx, bool inline_);
//       The emulation (caps.remote_cq_data false): the write, then a Notify
//       control message that the target must not see before the data (only
//       called when FabricCore::write_notify_ordered). One completion for
//       the caller.
//   Status post_read(const LocalRef &, uint64_t addr, uint64_t key, uint64_t ctx);
//   Status post_atomic(OpKind, const LocalRef &result, uint64_t addr, uint64_t key,
//                      uint64_t operand, uint64_t compare, uint64_t ctx);
//       FetchAdd (operand = addend) or CompareSwap (operand = swap).
//   size_t reap(Queue, Completion *out, size_t max);
//       Read and convert completions of the queue (drives manual progress).
//       A link sharing a completion queue with others (several links over
//       one endpoint) pushes theirs into their stashes.
//   size_t reap_plain(Queue, Completion *out, size_t max);
//       reap() for a link where needs_detour() is false: one read of the
//       queue and its conversion, nothing else (the busy poller's call).
//   bool needs_detour() const;
//       The backend's own state that reap_plain() does not handle (work
//       owed to the provider, a dead peer, a shared endpoint). Whenever it
//       becomes true, and whenever the backend stashes a completion, the
//       backend sets LinkCore::detour.
//   void make_room(Queue);
//       A post found no room: drive progress and move completions of the
//       queue (and of the other, where they share resources) into the
//       stashes, freeing what they held. May yield the CPU.
//   bool check_peer();
//       Look, without blocking, for the end of the link (connection-manager
//       events, a peer process known to be gone); sets peer_closed and
//       last_error and returns true once it has ended.
//   size_t block(Queue, Completion *out, size_t max, int slice_ms);
//       Only when caps.wait_fd: sleep up to slice_ms until a completion of
//       the queue arrives; returns the completions read (0 when none).
//   bool peer_gone();
//       Cheap: whether the peer is known gone in a way that makes entering
//       the provider unsafe (a dead peer's lock held for ever); then sets
//       peer_closed, and reap()/block()/make_room() no longer enter the
//       provider. Operations::wait calls it before each look, so it must
//       see a death before the next entry wherever it can do so cheaply.
//       False where the backend has no such case.
//   int wait_fd() noexcept;
//       Connection::wait_fd(): a descriptor readable when the link may have
//       a completion (either queue) or may have ended; -1 where none exists.
//   bool arm() noexcept;
//       Operations::arm(): after the caller's polls, true when sleeping on
//       wait_fd() is safe; false when something may already be pending.
//   bool answer_owed() const noexcept;
//       Connection::answer_pending(): an accepted link's handshake answer
//       that the provider has not taken yet (only its polls post it again).
//   int wait_slice_ms() const;
//       The longest single sleep in Operations::wait, so that check_peer()
//       runs often enough (events that do not wake the sleep).
//
// struct RequestImpl final : RequestCore
//   void reject() noexcept;            refuse (the client's connect: Refused)
//   Address remote_address() const;    best effort; may throw (the front end catches)
//
// struct ListenerImpl final : ListenerCore
//   explicit ListenerImpl(FabricImpl &);
//   void listen(const Address &bind);  sets `address` (real port)
//   RequestImpl *next(const Deadline &);   nullptr at the deadline
//   int fd() const noexcept;
//
// Reliable-datagram backends that multiplex several links over one endpoint
// keep this shape: a ConnectionImpl is a link (an address-vector entry and a
// link id), its posts name it, and reap()/block() hand completions that
// belong to other links to those links' stashes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <rdmalib/address.hpp>
#include <rdmalib/buffer.hpp>
#include <rdmalib/capabilities.hpp>
#include <rdmalib/connection.hpp>
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>
#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>
#include <rdmalib/operations.hpp>

#include "frontend/control.hpp"
#include "frontend/deadline.hpp"

#define RDMALIB_LIKELY(x) __builtin_expect(!!(x), 1)
#define RDMALIB_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace rdmalib::detail {

struct FabricImpl;
struct MemoryRegionImpl;
struct ConnectionImpl;
struct RequestImpl;
struct ListenerImpl;

/// What every backend's fabric holds for the front end.
struct FabricCore {
  DeviceConfig config;
  CapabilityMask mask;
  /// Filled by FabricImpl::open(), then masked by the front end.
  Capabilities caps;
  /// The provider really opened ("tcp", "tcp;ofi_rxm", "verbs").
  std::string provider;
  /// post_write_notify's notification reaches the target after the data of
  /// the write before it (send-after-write ordering, or a fence). Set by
  /// finish(); when false, write_imm on a fabric without remote CQ data is
  /// refused (Unsupported) rather than risk a notification that overtakes
  /// its data.
  bool write_notify_ordered = true;
};

/// Completions read while a post waited for room, or that belong to a link
/// other than the one that read them: poll() hands them out first, so that
/// nothing is lost. Sized when the link opens; it only grows (off the data
/// path's normal course) when a caller keeps posting to a full queue without
/// polling.
class CompletionStash {
public:
  void reserve(size_t n) { buf_.reserve(n); }
  // pop() clears the vector once it is drained: empty without the division
  // size() costs on every poll.
  bool empty() const noexcept { return buf_.empty(); }
  size_t size() const noexcept { return buf_.size() - head_; }

  size_t pop(Completion *out, size_t max) noexcept {
    size_t n = 0;
    while (n < max && head_ < buf_.size())
      out[n++] = buf_[head_++];
    if (head_ == buf_.size()) {
      buf_.clear(); // keeps the capacity
      head_ = 0;
    }
    return n;
  }

  /// False when the stash would have to grow and memory ran out.
  bool push(const Completion &c) noexcept {
    if (buf_.size() == buf_.capacity() && head_ > 0) {
      buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(head_));
      head_ = 0;
    }
    try {
      buf_.push_back(c);
    } catch (...) {
      return false;
    }
    return true;
  }

private:
  std::vector<Completion> buf_;
  size_t head_ = 0;
};

/// What every backend's connection (a link to one peer) holds for the front end.
struct LinkCore {
  Fabric *fabric_handle = nullptr;
  /// Connection::set_tag (read by Fabric::ready_links on another thread).
  std::atomic<uint64_t> tag{0};
  ConnectionOptions options;
  /// The peer's listener (client side) or origin (server side).
  Address remote;
  std::vector<uint8_t> peer_private;
  /// Established and not closed locally.
  bool open = false;
  /// The peer's end was observed (goodbye, disconnect event, a failed
  /// receive that ends the link, a peer process gone).
  bool peer_closed = false;
  /// The end was reported once as a PeerClosed completion on the Recv queue.
  bool peer_close_reported = false;
  /// The provider has a progress thread (Progress::Thread): an empty poll
  /// yields the CPU to it. Kept here, beside the other flags an empty poll
  /// reads, not behind the fabric pointer.
  bool idle_yields = false;
  /// Empty polls since the last check_peer().
  uint32_t empty_polls = 0;
  /// Whether poll() must take its full path (stashes, check_peer_before_poll,
  /// the backend's reap()) rather than the backend's reap_plain(): raised by
  /// whoever creates such state (a completion stashed, the backend's own,
  /// see needs_detour()), cleared only by the full path once it finds none.
  /// A busy poller thus tests one byte instead of each condition; a stale
  /// true costs one full poll, a missing one would lose completions, hence
  /// raised at every source and true until the first poll.
  bool detour = true;
  /// ConnectionOptions::check_peer_before_poll: when poll() may look again.
  std::chrono::steady_clock::time_point next_poll_check{};
  CompletionStash tx_stash, rx_stash;
  char last_error[256] = {0};

  bool usable() const noexcept { return open && !peer_closed; }
  CompletionStash &stash(Queue q) noexcept { return q == Queue::Send ? tx_stash : rx_stash; }

  void set_error(const char *fmt, ...) noexcept __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
  }
};

/// What every backend's connection request holds for the front end.
struct RequestCore {
  /// The Fabric of the listener it came from.
  Fabric *fabric_handle = nullptr;
  /// What the client sent with its request.
  std::vector<uint8_t> private_data;
  /// accept() or reject() ran (the destructor rejects otherwise).
  bool answered = false;
};

/// What every backend's listener holds for the front end.
struct ListenerCore {
  Fabric *fabric_handle = nullptr;
  /// Where clients connect (real port, never 0).
  Address address;
};

/// The front end's and the backends' way into the public classes' private
/// parts (their backend objects), which the public headers do not expose.
struct Internals {
  static FabricImpl &fabric(const Fabric &f) noexcept { return *f.impl_; }
  static MemoryRegionImpl *region(const MemoryRegion &m) noexcept { return m.impl_; }
  static ConnectionImpl *link(const Connection &c) noexcept { return c.impl_.get(); }
  /// Closes and frees a link (Connection's own deleter).
  using LinkDeleter = Connection::Deleter;
};

/// Apply the mask to what the backend negotiated, the same way for every
/// backend, and derive what follows from the result (the emulated
/// write-with-immediate consumes a receive of a notification's size).
void apply_mask(Capabilities &caps, CapabilityMask mask) noexcept;

} // namespace rdmalib::detail
