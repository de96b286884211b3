// Private types of the verbs backend (ibverbs + librdmacm). Nothing here is
// visible above rdmalib.
//
// Every verbs / rdmacm object is owned by a unique_ptr whose deleter releases
// it and logs (never throws) a failure. Objects that must go in a particular
// order (QP before CQ before completion channel, cm_id before its event
// channel) are members of one struct declared in reverse order of release.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <rdmalib/address.hpp>
#include <rdmalib/capabilities.hpp>
#include <rdmalib/connection.hpp>
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>
#include <rdmalib/operations.hpp>

#include "frontend/contract.hpp"

namespace rdmalib::vb {

// ---------------------------------------------------------------------------
// RAII deleters (verbs.cpp). Each logs a failure with the errno text.
struct EventChannelDeleter {
  void operator()(rdma_event_channel *p) const noexcept;
};
struct CmIdDeleter {
  void operator()(rdma_cm_id *p) const noexcept;
};
struct CompChannelDeleter {
  void operator()(ibv_comp_channel *p) const noexcept;
};
struct MrDeleter {
  void operator()(ibv_mr *p) const noexcept;
};
struct PdDeleter {
  void operator()(ibv_pd *p) const noexcept;
};
struct AddrInfoDeleter {
  void operator()(rdma_addrinfo *p) const noexcept;
};
struct DeviceListDeleter {
  void operator()(ibv_context **p) const noexcept;
};

using EventChannel = std::unique_ptr<rdma_event_channel, EventChannelDeleter>;
using CmId = std::unique_ptr<rdma_cm_id, CmIdDeleter>;
using CompChannel = std::unique_ptr<ibv_comp_channel, CompChannelDeleter>;
using Mr = std::unique_ptr<ibv_mr, MrDeleter>;
using Pd = std::unique_ptr<ibv_pd, PdDeleter>;
using AddrInfo = std::unique_ptr<rdma_addrinfo, AddrInfoDeleter>;
using DeviceList = std::unique_ptr<ibv_context *, DeviceListDeleter>;

/// A completion queue together with the events it has delivered but not yet
/// acknowledged: ibv_destroy_cq requires every event to be acknowledged, and
/// acknowledging in batches saves a mutex per wake-up.
class Cq {
public:
  Cq() noexcept = default;
  ~Cq() { reset(); }
  Cq(const Cq &) = delete;
  Cq &operator=(const Cq &) = delete;

  /// Create with `entries` CQEs bound to `channel` (may be null). Throws.
  void create(ibv_context *ctx, int entries, ibv_comp_channel *channel, const char *what);
  ibv_cq *get() const noexcept { return cq_; }
  /// Count one event returned by ibv_get_cq_event; acknowledges in batches.
  void event_received() noexcept;
  void reset() noexcept;

private:
  ibv_cq *cq_ = nullptr;
  unsigned unacked_ = 0;
};

// ---------------------------------------------------------------------------
// Helpers (verbs.cpp).

/// strerror text of an errno value.
std::string errno_text(int err);
/// Throw Error(kind) "<what>: <strerror> (errno N)".
[[noreturn]] void throw_errno(ErrorKind kind, const std::string &what, int err);
/// "host:port" of a socket address (best effort, "?" when unknown).
Address sockaddr_address(const sockaddr *sa);
/// Resolve `a` with rdma_getaddrinfo (passive = bind address). Throws
/// Error(Config/NotFound) naming the address.
AddrInfo resolve(const Address &a, bool passive);
/// Put a file descriptor into non-blocking mode. Throws.
void set_nonblocking(int fd, const char *what);
/// Name of an rdma_cm event plus its status text, for error messages.
std::string event_text(const rdma_cm_event &ev);

using detail::Deadline;

/// Wait for the next event on `ch` until `deadline`. Returns a copy of the
/// event (private data copied into `private_data`) after acknowledging it, or
/// false on timeout. Throws Error(Backend) on a failed read.
bool next_cm_event(rdma_event_channel *ch, const Deadline &deadline, rdma_cm_event &out,
                   std::vector<uint8_t> *private_data);

// ---------------------------------------------------------------------------
// Private data framing. On InfiniBand and RoCE the CM carries a fixed-size
// private data area and the receiver's rdma_cm_event reports that whole size
// (zero padded), not the length the sender gave. rdmalib therefore prefixes a
// 4-byte header with the real length. RC connect requests carry 56 bytes of
// user data (92 bytes minus rdma_cm's own header), replies 196: the limit is
// the smaller one minus the header.
constexpr uint16_t kPrivateMagic = 0x5244; // "RD"
constexpr size_t kPrivateHeader = 4;
constexpr size_t kCmRequestPrivate = 56;
constexpr size_t kMaxPrivateData = kCmRequestPrivate - kPrivateHeader;

/// Frame `len` bytes of user data; `out` must hold kPrivateHeader + len bytes.
void frame_private(const void *data, size_t len, uint8_t *out) noexcept;
/// Extract the user data from a received frame. Throws Error(Backend) when the
/// frame is not rdmalib's (a foreign client).
std::vector<uint8_t> unframe_private(const std::vector<uint8_t> &raw, const std::string &who);

/// wr_id of work requests whose completions rdmalib swallows (the unsignaled
/// write of an emulated write-with-immediate; it only completes on error).
constexpr uint64_t kInternalWrId = ~uint64_t(0);

/// One in-flight operation: maps a completion back to the caller's context,
/// the operation kind and (receives) the buffer, without allocation. The wr_id
/// of a work request is its slot index.
struct Slot {
  uint64_t user = 0;
  void *buf = nullptr;
  uint32_t next_free = 0;
  OpKind kind = OpKind::Send;
};

/// A fixed pool of slots with a free list.
struct SlotPool {
  std::vector<Slot> slots;
  uint32_t base = 0; // wr_id of slots[0]
  uint32_t free_head = UINT32_MAX;
  uint32_t in_use = 0;

  void init(uint32_t count, uint32_t wr_base);
  Slot *take() noexcept {
    if (free_head == UINT32_MAX)
      return nullptr;
    Slot *s = &slots[free_head];
    free_head = s->next_free;
    ++in_use;
    return s;
  }
  void put(Slot *s) noexcept {
    s->next_free = free_head;
    free_head = static_cast<uint32_t>(s - slots.data());
    --in_use;
  }
  uint64_t wr_id(const Slot *s) const noexcept {
    return base + static_cast<uint64_t>(s - slots.data());
  }
  bool owns(uint64_t wr_id) const noexcept { return wr_id >= base && wr_id < base + slots.size(); }
  Slot &at(uint64_t wr_id) noexcept { return slots[wr_id - base]; }
};

} // namespace rdmalib::vb

namespace rdmalib::detail {

struct FabricImpl final : FabricCore {
  vb::DeviceList devices; // keeps librdmacm's contexts (ctx points into it)
  ibv_context *ctx = nullptr;
  vb::Pd pd;
  std::string device_name;
  std::string link_layer;
  uint8_t port = 1;
  ibv_device_attr attr{};
  uint8_t rd_atomic = 1;    // initiator depth / responder resources per QP
  bool emulate_imm = false; // write_imm = write + notification send
  bool zero_based = false;  // MRs registered with iova 0 (offsets)

  // ---- the front end's contract (frontend/contract.hpp)
  void open();
  void finish();
  std::string describe_details() const;
  MemoryRegionImpl *register_memory(void *ptr, size_t bytes, uint32_t access, void *&desc,
                                    RemoteBuffer &remote);
  static const char *backend_name() noexcept { return "verbs"; }
  static std::string backend_version();
  static std::vector<ProviderInfo> discover();
  static std::vector<std::string> known_providers();
  static std::string canonical_provider(const std::string &name_or_alias);
  static void preload(const DeviceConfig &config);
  static Fabric::ConfinementNeeds confinement_needs(const DeviceConfig &config);
  static void isolate_tenants() noexcept;
  static Fabric::ReclaimReport reclaim_stale(std::chrono::seconds min_age);
  // Opening a queue pair is cheap: Fabric::prepare has nothing to do.
  bool prepare(const ConnectionOptions &, Fabric::Refill) noexcept { return false; }
  Fabric::PreparedEndpoints prepared() const noexcept { return {}; }
  /// Every link has its own queues.
  static bool ready_links(std::vector<uint64_t> &) noexcept { return false; }
  // Queue pairs are reached by host:port through rdmacm, like IP providers:
  // nothing to tell from the address alone.
  bool names_own_endpoint(const Address &) const noexcept { return false; }
};

struct MemoryRegionImpl final {
  vb::Mr mr;        // local access (lkey) and, normally, remote access (rkey)
  vb::Mr remote_mr; // zero-based twin for remote access when virtual addressing is masked
};

struct RequestImpl;

struct ConnectionImpl final : LinkCore {
  explicit ConnectionImpl(FabricImpl &f) noexcept : fab(&f) {}
  ConnectionImpl(const ConnectionImpl &) = delete;
  ConnectionImpl &operator=(const ConnectionImpl &) = delete;

  FabricImpl *fab;

  // Release order is bottom-up: QP (destroy_qp in close()), CQs, completion
  // channels, control MR, cm_id, event channel.
  vb::EventChannel events;
  vb::CmId id;
  std::vector<uint8_t> ctl_mem; // notification send buffers (emulated imm)
  vb::Mr ctl_mr;
  vb::CompChannel send_channel, recv_channel;
  vb::Cq send_cq, recv_cq;
  ibv_qp *qp = nullptr;

  vb::SlotPool sq, rq;
  uint32_t recv_depth = 0;
  bool send_armed = false, recv_armed = false;

  bool local_closed = false;

  // ---- the front end's contract (frontend/contract.hpp): setup
  void connect(const Address &to, const void *private_data, size_t private_len, const Deadline &dl);
  void accept(RequestImpl &request, const void *private_data, size_t private_len,
              const Deadline &dl);
  /// Verbs regions belong to the protection domain, not to a QP.
  void attach(MemoryRegionImpl &) {}

  // --- setup (connection.cpp)
  /// CQs, channels, slot pools and the RC QP on `id` (already resolved).
  void create_resources();
  /// Throws Error(Backend) unless id->verbs is the fabric's device.
  void check_device(const char *side) const;
  /// Release the QP and queues; disconnect first if still connected.
  void close() noexcept;
  ~ConnectionImpl() { close(); }

  // ---- the front end's contract: data path (data_path.hpp, operations.cpp)
  Status post_send(const LocalRef &src, uint64_t ctx, bool inline_) noexcept;
  Status post_recv(const LocalRef *dst, const uint64_t *ctx, size_t n, size_t &done) noexcept;
  Status post_write(const LocalRef &src, uint64_t addr, uint64_t key, uint64_t ctx,
                    bool inline_) noexcept;
  Status post_write_imm(const LocalRef &src, uint64_t addr, uint64_t key, uint32_t imm,
                        uint64_t ctx, bool inline_) noexcept;
  Status post_write_notify(const LocalRef &src, uint64_t addr, uint64_t key, uint32_t imm,
                           uint64_t ctx, bool inline_) noexcept;
  Status post_read(const LocalRef &dst, uint64_t addr, uint64_t key, uint64_t ctx) noexcept;
  Status post_atomic(OpKind kind, const LocalRef &result, uint64_t addr, uint64_t key,
                     uint64_t operand, uint64_t compare, uint64_t ctx) noexcept;
  size_t reap(Queue q, Completion *out, size_t max) noexcept { return reap_plain(q, out, max); }
  size_t reap_plain(Queue q, Completion *out, size_t max) noexcept;
  /// Nothing is ever owed to the device or deferred: only stashed
  /// completions (make_room) send poll() the long way.
  bool needs_detour() const noexcept { return false; }
  void make_room(Queue q) noexcept;
  bool check_peer() noexcept { return check_cm_events(); }
  /// RC: entering the device is always safe.
  bool peer_gone() noexcept { return false; }
  size_t block(Queue q, Completion *out, size_t max, int slice_ms) noexcept;
  /// The sleep also wakes on the connection manager's events.
  int wait_slice_ms() const noexcept { return 1000; }
  /// Connection::wait_fd(): an epoll descriptor over both completion
  /// channels and the connection's event channel (-2 until built).
  int wait_epoll = -2;
  int wait_fd() noexcept;
  bool arm() noexcept;
  /// The connection manager completes accept(): no answer is ever left owed.
  bool answer_owed() const noexcept { return false; }
  /// Takes the channel's pending events (non-blocking) and acknowledges
  /// them; the queue must be armed again afterwards.
  void drain_channel(Queue q) noexcept;

  // --- data path helpers (data_path.hpp, operations.cpp)
  vb::Slot *take_send_slot(uint64_t ctx, OpKind kind) noexcept;
  uint32_t inline_flag(bool inline_) const noexcept;
  /// ibv_post_send of `wr` (and what is chained to it) for `slot`.
  Status post_one(ibv_send_wr &wr, vb::Slot *slot) noexcept;
  Status post_send_failed(ibv_send_wr &wr, ibv_send_wr *bad, vb::Slot *slot, int ret) noexcept;
  Status post_recv_failed(int ret) noexcept;
  size_t convert(Queue q, const ibv_wc *wc, size_t n, Completion *out) noexcept;
  /// A failed work completion of `s` into `o`.
  void failed(Queue q, const ibv_wc &w, const vb::Slot &s, Completion &o) noexcept;
  /// The unsignaled write of an emulated write_imm completed (it failed).
  void internal_failed(const ibv_wc &w) noexcept;
  /// Read pending rdma_cm events without blocking; true if the peer closed.
  bool check_cm_events() noexcept;
  void on_peer_closed() noexcept;
};

struct RequestImpl final : RequestCore {
  FabricImpl *fab = nullptr;
  vb::EventChannel events; // the request's own channel (migrated from the listener's)
  vb::CmId id;
  uint8_t peer_initiator_depth = 0;
  uint8_t peer_responder_resources = 0;
  /// Rejects a request that was neither accepted nor rejected.
  ~RequestImpl();

  // ---- the front end's contract (frontend/contract.hpp)
  void reject() noexcept;
  Address remote_address() const;
};

struct ListenerImpl final : ListenerCore {
  explicit ListenerImpl(FabricImpl &f) noexcept : fab(&f) {}
  FabricImpl *fab;
  vb::EventChannel events;
  vb::CmId id;

  // ---- the front end's contract (frontend/contract.hpp)
  void listen(const Address &bind);
  RequestImpl *next(const Deadline &dl);
  int fd() const noexcept { return events ? events->fd : -1; }
};

} // namespace rdmalib::detail

#include "data_path.hpp"
