// Private types of the libfabric backend. Nothing here is visible above rdmalib.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <rdmalib/address.hpp>
#include <rdmalib/capabilities.hpp>
#include <rdmalib/connection.hpp>
#include <rdmalib/device.hpp>
#include <rdmalib/errors.hpp>
#include <rdmalib/fabric.hpp>
#include <rdmalib/operations.hpp>

#include "frontend/contract.hpp"
#include "provider_table.hpp"
#include "shm_connreq_guard.hpp"
#include "shm_stale_names.hpp"

namespace rdmalib::detail {
struct ConnectionImpl;
}

namespace rdmalib::lf {

constexpr uint32_t kApiVersion = FI_VERSION(1, 9);

/// Text for a negative libfabric return code.
std::string fi_error_text(int ret);
/// Throw Error(Backend) "<what>: <fi_strerror> (<code>)".
[[noreturn]] void throw_fi(const std::string &what, int ret);

/// Owns one libfabric object; fi_close on destruction, logging (never
/// throwing) a failure. Works for every fid_* type through its embedded fid.
template <class T> class Fid {
public:
  Fid() noexcept = default;
  explicit Fid(T *p) noexcept : p_(p) {}
  ~Fid() { reset(); }
  Fid(Fid &&o) noexcept : p_(o.p_) { o.p_ = nullptr; }
  Fid &operator=(Fid &&o) noexcept {
    if (this != &o) {
      reset();
      p_ = o.p_;
      o.p_ = nullptr;
    }
    return *this;
  }
  Fid(const Fid &) = delete;
  Fid &operator=(const Fid &) = delete;

  T *get() const noexcept { return p_; }
  T *operator->() const noexcept { return p_; }
  T **out() noexcept {
    reset();
    return &p_;
  }
  explicit operator bool() const noexcept { return p_ != nullptr; }
  void reset() noexcept;
  /// Hold `p` without owning it (an object of the fabric's shared link
  /// endpoint); drop() forgets it without closing.
  void borrow(T *p) noexcept {
    reset();
    p_ = p;
  }
  void drop() noexcept { p_ = nullptr; }

private:
  T *p_ = nullptr;
};

void close_fid(fid *f) noexcept;

template <class T> void Fid<T>::reset() noexcept {
  if (p_) {
    close_fid(&p_->fid);
    p_ = nullptr;
  }
}

/// Owns an fi_info list.
struct InfoPtr {
  fi_info *p = nullptr;
  InfoPtr() = default;
  explicit InfoPtr(fi_info *i) : p(i) {}
  ~InfoPtr() {
    if (p)
      fi_freeinfo(p);
  }
  InfoPtr(InfoPtr &&o) noexcept : p(o.p) { o.p = nullptr; }
  InfoPtr &operator=(InfoPtr &&o) noexcept {
    if (this != &o) {
      if (p)
        fi_freeinfo(p);
      p = o.p;
      o.p = nullptr;
    }
    return *this;
  }
  InfoPtr(const InfoPtr &) = delete;
  fi_info *operator->() const { return p; }
  fi_info *get() const { return p; }
};

using detail::Deadline;

// ---------------------------------------------------------------------------
// RDM handshake, sent to the listener's endpoint and answered from the new
// per-connection endpoint.
constexpr uint32_t kHandshakeMagic = 0x4b534852; // "RHSK"
// 4: links of a shared endpoint receive from its wildcard pool, tagged with
// the link id, and announce messages over the pool's size (control type
// Large); a version-3 peer posts per-link receives and would never match.
// 5: on a shared endpoint the client confirms the answer (HsConfirm) once it
// has inserted the server's address, and the server sends nothing on the
// link before that (ConnectionImpl::awaiting_confirm, hold); a version-4
// client never confirms. Goodbyes carry the nonce (ConnectionImpl::goodbye),
// which a version-5 peer without it ignores.
constexpr uint16_t kHandshakeVersion = 5;
enum HandshakeType : uint16_t { HsHello = 1, HsAccept = 2, HsReject = 3, HsConfirm = 4 };
constexpr size_t kMaxRawAddress = 128;
constexpr size_t kMaxPrivateData = 256;
struct HandshakeMessage {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint64_t nonce;       // client's connection attempt id, echoed back
  uint32_t address_len; // raw fi_getname bytes of the sender's endpoint
  uint32_t private_len;
  // The sender's process and pid namespace (Quirks::dead_peer_can_hang_progress).
  uint32_t pid;
  // The sender's link id over its fabric's shared endpoint; 0 when the
  // sender's endpoint is the connection's own (Capabilities::shared_endpoint).
  uint32_t link;
  uint64_t pid_namespace;
  uint8_t address[kMaxRawAddress];
  uint8_t private_data[kMaxPrivateData];
};

/// This process's id and pid namespace (inode of /proc/self/ns/pid, 0 if unknown).
void self_process(uint32_t &pid, uint64_t &pid_namespace);
/// True when process `pid` (same pid namespace) no longer runs: gone or a zombie.
bool process_gone(uint32_t pid);
/// How long one look at a peer's pidfd stands for it (Quirks::
/// dead_peer_can_hang_progress). A killed process's pidfd turns readable
/// only once its exit is done: 0.5 to 4.4 ms after the SIGKILL for processes
/// of 0 to 64 MiB on this project's quiet 2-core host, up to 10 ms loaded.
/// Entries into the provider go on meanwhile however often one looks, so
/// 10 us more add little to that window, and a busy poller is spared a
/// poll(2) per provider call (docs/BACKEND-BUGS.md has the counts).
inline constexpr std::chrono::microseconds kPidfdLookLasts{10};
/// A pidfd for process `pid` (pidfd_open), or -1 where the kernel has none.
/// Shared by every link to the same live process, so that a manager serving
/// many links of one client holds one descriptor for them; give it back with
/// release_pidfd().
int acquire_pidfd(uint32_t pid) noexcept;
void release_pidfd(int pidfd) noexcept;
/// True when the process of `pidfd` has ended (also while it is a zombie).
bool pidfd_exited(int pidfd) noexcept;

// ---------------------------------------------------------------------------
// Per-operation context. Every post carries a pointer to one of these as its
// op_context: the first member doubles as the fi_context2 scratch space some
// providers require (FI_CONTEXT / FI_CONTEXT2 mode), and the rest maps the
// completion back to the caller's context and operation kind without any
// allocation.
struct OpSlot {
  fi_context2 fictx;
  uint64_t user = 0;
  void *buf = nullptr; // receives: where the message lands (control messages are read there)
  size_t cap = 0;      // receives: bytes the caller posted (longer messages are truncated)
  OpKind kind = OpKind::Send;
  bool internal = false;  // completion is rdmalib's own; do not report it
  bool rx = false;        // a slot of the receive pool
  bool pool = false;      // a receive of the shared endpoint's pool (SharedRdm::pool)
  bool confirm = false;   // the receive of the peer's HsConfirm (ConnectionImpl::expect_confirm)
  uint32_t next_free = 0; // free list, or a link's queue of posted receives
  uint32_t link = 0;      // the owning link's id on a shared endpoint
  void *desc = nullptr;   // pooled receives: the caller's descriptor (a large message's receive)
};

// ---------------------------------------------------------------------------
// Tags on a shared endpoint (Capabilities::shared_endpoint). Links do not
// post their receives to the provider: the endpoint keeps one pool of
// wildcard receives (kPoolTag set, the rest ignored), and rdmalib hands each
// message to its link by the tag's low 32 bits (the link id), copying it
// into the link's oldest posted receive. RxM searches its posted tagged
// receives linearly for every message: with a receive per link posted, a
// process of 10,000 links spent most of its time there, and every link's
// receives counted against the endpoint's receive queue.
//
// A message longer than kPoolMessage goes as two: a control message
// (ControlType::Large, through the pool) announces its length and sequence
// number, and the data follows with kLargeTag | seq << 32 | link, which only
// the receive rdmalib then posts into the caller's buffer matches (the
// provider keeps it as unexpected until then).
constexpr uint64_t kPoolTag = 1ULL << 63;
constexpr uint64_t kLargeTag = 1ULL << 62;
constexpr uint32_t kLargeSeqMask = (1U << 30) - 1;
/// Bytes of one pool receive: every protocol message of rFaaS's control
/// channels fits (the largest, a lease grant, is under 1 KiB).
constexpr size_t kPoolMessage = 4096;
/// Receives in the pool: room for a burst between two reads of the queue
/// (each is posted again as soon as its message was handed over). Well under
/// RxM's default receive queue (2048), whatever the number of links.
constexpr size_t kPoolReceives = 512;

/// A completion read from a shared queue by another link, kept for its owner
/// (which converts it: only the owner touches its slots). `err` is non-zero
/// for an error entry.
struct RawCompletion {
  fi_cq_data_entry e{};
  uint64_t tag = 0; // a shared queue's tag (its completions are FI_CQ_FORMAT_TAGGED)
  /// A shared receive queue's source (fi_cq_readfrom): the sender's AV entry,
  /// FI_ADDR_NOTAVAIL for a sender the AV does not hold.
  fi_addr_t src = FI_ADDR_NOTAVAIL;
  int err = 0;
  int prov_errno = 0;

  static RawCompletion from(const fi_cq_tagged_entry &t,
                            fi_addr_t source = FI_ADDR_NOTAVAIL) noexcept {
    RawCompletion rc;
    rc.src = source;
    rc.e.op_context = t.op_context;
    rc.e.flags = t.flags;
    rc.e.len = t.len;
    rc.e.buf = t.buf;
    rc.e.data = t.data;
    rc.tag = t.tag;
    return rc;
  }

  /// A failed operation as fi_cq_readerr reports it; an error entry without
  /// a code still fails (FI_EIO).
  static RawCompletion failed(const fi_cq_err_entry &ee) noexcept {
    RawCompletion rc;
    rc.e.op_context = ee.op_context;
    rc.e.flags = ee.flags;
    rc.e.len = ee.len;
    rc.e.data = ee.data;
    rc.tag = ee.tag;
    rc.err = ee.err ? ee.err : FI_EIO;
    rc.prov_errno = ee.prov_errno;
    return rc;
  }
};

/// Connection::wait_fd(): one epoll descriptor over the descriptors behind
/// some queues' wait objects (FI_WAIT_FD: one descriptor; FI_WAIT_POLLFD: a
/// set of them, which the provider changes as sockets come and go), so that
/// a caller sleeps on one descriptor per link whatever the provider keeps.
struct WaitEpoll {
  /// -2: not built yet; -1: some queue has no descriptor (callers poll).
  int fd = -2;
  /// The last FI_WAIT_POLLFD set seen (its change_index), re-read by arm().
  uint64_t change_index = 0;
  bool pollfd = false;
  std::vector<std::pair<int, uint32_t>> added; // (descriptor, epoll events)

  WaitEpoll() = default;
  WaitEpoll(const WaitEpoll &) = delete;
  WaitEpoll &operator=(const WaitEpoll &) = delete;
  ~WaitEpoll() { reset(); }
  void reset() noexcept;
  /// Builds the descriptor from the wait objects of `fids` on first use;
  /// returns it (-1 when one of them has no descriptor).
  int build(fid_t const *fids, size_t n) noexcept;
  /// Follows a change of an FI_WAIT_POLLFD set (`wait`, the set's owner);
  /// false when it cannot be read any more.
  bool refresh(fid_t wait) noexcept;
  /// Called after an arm that found every queue empty: a socket-pair
  /// descriptor that is readable at kStaleArms such arms in a row is a
  /// signal nothing resets, and leaves the set for good (operations.cpp).
  /// Looks only during a link's first kCleanArms quiet arms.
  void check_stale() noexcept;
  static constexpr int kStaleArms = 3;
  static constexpr int kCleanArms = 16;
  std::vector<int> muted;
  int stale_fd = -1;
  int stale_count = 0;
  int clean_arms = 0;
};

/// Quirks::links_share_endpoint: the fabric's one endpoint, address vector
/// and completion queues for every reliable-datagram link. Opened with the
/// first link, closed with the fabric. Completions are read under `m`: a
/// link that reads one of another link's moves it to that link's inbox, so
/// that each link sees its own in order.
struct SharedRdm {
  std::mutex m;
  std::condition_variable cv; // a blocking read ended (block())
  // A thread sleeps in fi_cq_sread on that queue (Send, Recv) without `m`:
  // nobody else reads it meanwhile.
  bool reading[2] = {false, false};
  /// Slots and control memory of closed links whose operations had not all
  /// completed: the provider may still name them. Freed after the endpoint
  /// closes (declared first).
  std::vector<std::vector<OpSlot>> dead_slots;
  std::vector<std::vector<uint8_t>> dead_ctl;
  std::vector<Fid<fid_mr>> dead_mr;
  /// The pool of wildcard receives (kPoolTag) and their memory, posted
  /// when the endpoint opens; a slot whose post found no room waits in
  /// `unposted` for the next read of the queue.
  std::vector<uint8_t> pool_mem;
  Fid<fid_mr> pool_mr;
  std::vector<OpSlot> pool;
  std::vector<OpSlot *> unposted;
  // Order matters: the endpoint closes before what it is bound to.
  Fid<fid_cq> txcq, rxcq;
  /// Connection::wait_fd() of every link: over both shared queues.
  WaitEpoll wait;
  Fid<fid_av> av;
  Fid<fid_ep> ep;
  uint32_t next_link = 1;
  /// Messages of the pool dropped because their sender was not the peer of
  /// the link their tag named.
  uint64_t foreign = 0;
  std::unordered_map<uint32_t, detail::ConnectionImpl *> links;
  /// Links whose receive inbox got a completion (ConnectionImpl::listed),
  /// for Fabric::ready_links; a link leaves it once its inbox is empty.
  std::vector<detail::ConnectionImpl *> ready;
  struct Peer {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    int refs = 0;
  };
  std::unordered_map<std::string, Peer> peers; // by raw address

  /// Accepted links whose peer has not confirmed the handshake yet
  /// (ConnectionImpl::expect_confirm): ready_links names each once its
  /// deadline has passed, so that a server polling only the links it names
  /// still finds such a link ended.
  std::vector<detail::ConnectionImpl *> awaiting;
  /// The peer's AV entry, inserted on first use; a reference for each call.
  /// Returns false (errno-style code in `err`) when the insert failed.
  bool add_peer(const void *raw, size_t len, fi_addr_t &out, int &err);
  /// Drop a reference; the entry is removed with the last.
  void release_peer(fi_addr_t addr) noexcept;
  /// Post pool receive `p` again (under `m`); kept in `unposted` when the
  /// provider has no room yet.
  void repost(OpSlot *p) noexcept;
};

/// A free list of slots. Sends, writes, reads and atomics take from one pool
/// of ConnectionOptions::send_depth (plus rdmalib's own control messages),
/// receives from another of recv_depth: a queue is full when its pool is
/// empty, on every provider, as on verbs.
struct SlotList {
  uint32_t head = UINT32_MAX;
  /// Slots of the caller's operations in flight, at most `limit` (the
  /// connection's depth); rdmalib's own take the rest of the pool.
  uint32_t used = 0;
  uint32_t limit = 0;
};

/// An emulated write-with-immediate whose notification could not be posted
/// yet (the provider's queue was full). Posted, in order, before anything
/// else on the link, so that the target sees the notifications in the order
/// of the writes and before any later message.
struct PendingNotify {
  uint32_t imm = 0;
  uint32_t length = 0;
  /// ControlType::Notify, or Large: the announcement of a large message on
  /// a shared endpoint (imm: its sequence number).
  uint16_t type = 1;
};

/// A transmit posted on a shared link before its peer confirmed the
/// handshake (ConnectionImpl::hold): kept in order and posted once the
/// confirmation comes, or failed with the link when it does not. Only the
/// handshake's first moments see one, so its inline copy may allocate.
struct HeldOp {
  HeldOp(OpKind k, bool inl, bool notify_write, const LocalRef &l, uint64_t remote_addr,
         uint64_t remote_key, uint64_t atomic_operand, uint64_t atomic_compare, uint64_t context,
         uint32_t immediate = 0) noexcept
      : kind(k), inline_(inl), notify(notify_write), local(l), addr(remote_addr), key(remote_key),
        operand(atomic_operand), compare(atomic_compare), ctx(context), imm(immediate) {}
  OpKind kind = OpKind::Send;
  bool inline_ = false;
  /// A write-with-immediate emulated by a write and a message (post_write_notify).
  bool notify = false;
  LocalRef local;
  uint64_t addr = 0, key = 0, operand = 0, compare = 0, ctx = 0;
  uint32_t imm = 0;
  /// An inline transmit's bytes: its caller may reuse the buffer at once.
  std::vector<uint8_t> copy;
};

/// Quirks::truncation_hangs_receiver: memory posted behind every receive, so
/// that the provider never has to truncate one. First `scratch` writable
/// bytes: the provider copies short messages (up to 4 KiB on shm) with
/// memcpy, which must land somewhere. Then, where the provider copies by
/// cross-memory attach, `guard` inaccessible bytes: process_vm_readv fails on
/// them with EFAULT, and the provider completes the receive with an error
/// instead of looping for ever, however long the message. Shared by every
/// receive of the fabric: what lands here is never read. rdmalib reports a
/// receive longer than the caller's buffer as failed and ends the link.
struct RecvOverflow {
  uint8_t *base = nullptr;
  size_t scratch = 0, guard = 0;
  /// iovecs of a receive with this area behind it: 2 or 3 (1 when unused).
  size_t iovs = 1;
  RecvOverflow() = default;
  RecvOverflow(const RecvOverflow &) = delete;
  RecvOverflow &operator=(const RecvOverflow &) = delete;
  ~RecvOverflow();
  /// Map it (scratch bytes, plus one guard page when `guard_page`).
  void open(size_t scratch_bytes, bool guard_page);
};

} // namespace rdmalib::lf

namespace rdmalib::detail {

struct ConnectionImpl;

} // namespace rdmalib::detail

namespace rdmalib::detail {
struct FabricImpl;
} // namespace rdmalib::detail

namespace rdmalib::lf {
class Preparer;
/// Register `bytes` at `ptr` for rdmalib's own sends and receives (an
/// application-chosen key where the provider wants one). Throws Error
/// naming `what`.
Fid<fid_mr> register_local(detail::FabricImpl &f, void *ptr, size_t bytes, const char *what);
} // namespace rdmalib::lf

namespace rdmalib::detail {

struct FabricImpl final : FabricCore {
  lf::InfoPtr info; // the chosen fi_info (one entry)
  lf::Fid<fid_fabric> fabric;
  lf::Fid<fid_domain> domain;
  const lf::ProviderPolicy *policy = nullptr;
  /// The provider's quirks on the running libfabric, resolved when it opened.
  lf::Quirks quirks;
  bool rdm = false;          // FI_EP_RDM endpoints
  bool ordered_saw = false;  // send-after-write ordering available
  bool need_context = false; // FI_CONTEXT/FI_CONTEXT2 mode kept
  bool rx_cq_data = false;   // FI_RX_CQ_DATA: writedata consumes a receive
  bool native_cq_data = false;
  bool app_keys = false; // rdmalib chooses MR keys
  bool virt_addr = false;
  bool mr_endpoint = false;
  bool mr_local = false;
  bool wait_fd_cq = false; // CQs opened with FI_WAIT_FD
  bool wait_cq = false;    // CQs support a blocking read (fd or unspec)
  /// Quirks::link_queues_share_wait_set on a connected fabric: a link's
  /// queues and event queue share one wait set.
  bool link_wait_set = false;
  size_t inject_size = 0;
  uint32_t addr_format = 0;
  // The device has no ip_address: every address this fabric reports is the
  // provider's opaque endpoint name (Address::opaque()), whatever its format.
  bool opaque_names = false;
  /// Capabilities::shared_endpoint after the mask: links share `shared_rdm`.
  bool shared = false;
  lf::RecvOverflow overflow; // empty unless Quirks::truncation_hangs_receiver
  /// Listeners get a doorbell (doorbell.hpp) and connecting endpoints ring
  /// it: a node-local provider whose queues offer no wait fd.
  bool doorbell() const noexcept { return rdm && !wait_fd_cq && policy && policy->node_local; }

  // ---- the front end's contract (frontend/contract.hpp)
  void open();
  void finish();
  std::string describe_details() const;
  MemoryRegionImpl *register_memory(void *ptr, size_t bytes, uint32_t access, void *&desc,
                                    RemoteBuffer &remote);
  static const char *backend_name() noexcept { return "libfabric"; }
  static std::string backend_version();
  static std::vector<ProviderInfo> discover();
  static std::vector<std::string> known_providers();
  static std::string canonical_provider(const std::string &name_or_alias);
  static void preload(const DeviceConfig &config);
  static Fabric::ConfinementNeeds confinement_needs(const DeviceConfig &config);
  static void isolate_tenants() noexcept;
  static Fabric::ReclaimReport reclaim_stale(std::chrono::seconds min_age);

  /// fi_info for a new endpoint bound to `src` (host, port; port 0 = any).
  /// For FI_ADDR_STR providers (shm) the name is derived from host and port.
  lf::InfoPtr endpoint_info(const Address *src) const;
  /// Raw provider address (as fi_av_insert wants it) for a listener at `a`:
  /// an opaque address's own bytes (Error(Config) when its format is not this
  /// fabric's), or host:port resolved into the provider's format.
  std::vector<uint8_t> raw_address(const Address &a) const;
  /// Decode a raw provider address: host:port where the format is IP (or an
  /// rdmalib-named FI_ADDR_STR) and the device has an ip_address, else the
  /// opaque name. Never throws; an empty or oversized name gives Address{}.
  Address decode_address(const void *raw, size_t len) const;
  /// Address::format's token for this fabric's addr_format.
  std::string format_token() const;
  /// Draw the next application-chosen MR key (unique, unpredictable).
  uint64_t next_key();

  std::atomic<uint64_t> key_counter{0};
  uint64_t key_secret = 0;
  /// The shared link endpoint (opened by the first link). Closes before the
  /// domain.
  std::mutex shared_open;
  std::unique_ptr<lf::SharedRdm> shared_rdm;
  /// Post the shared endpoint's receive pool (kPoolTag). Throws Error.
  void open_receive_pool(lf::SharedRdm &S);
  /// Fabric::ready_links (front end's contract).
  bool ready_links(std::vector<uint64_t> &tags);
  /// The shared link endpoint, opened on first use. Throws Error.
  lf::SharedRdm &shared_links();
  /// Quirks::connreq_names_vanished_peer: a live endpoint that guards point
  /// vanished peers' commands at (opened on first use). Declared last: it
  /// closes before the domain.
  // Quirks::connreq_names_vanished_peer: an endpoint of this process that
  // takes the setup commands of vanished peers (ShmConnreqGuard), opened on
  // first need by sink_name(), which returns its raw name ("" if it cannot
  // be opened).
  std::mutex shm_sink_open;
  std::shared_ptr<ConnectionImpl> shm_sink;
  std::string shm_sink_name;
  bool shm_sink_failed = false;
  std::string sink_name(Fabric *handle) noexcept;

  // ---- Fabric::prepare (Quirks::endpoint_open_is_slow), front end's contract
  bool prepare(const ConnectionOptions &options, Fabric::Refill refill);
  Fabric::PreparedEndpoints prepared() const;
  // ---- Fabric::names_own_endpoint (fabric.cpp)
  bool names_own_endpoint(const Address &a) const noexcept;
  // Set in finish() where the quirk applies, then never replaced. Declared
  // last: its thread stops and its waiting endpoints close before the rest
  // of the fabric.
  std::unique_ptr<lf::Preparer> preparer;
};

struct MemoryRegionImpl final {
  lf::Fid<fid_mr> mr;
  FabricImpl *fabric = nullptr;
  bool enabled = false;
};

struct ConnectionImpl final : LinkCore {
  explicit ConnectionImpl(FabricImpl &f) noexcept : fab(&f) {
    const lf::RecvOverflow &ov = f.overflow;
    rx_iov[1] = iovec{ov.base, ov.scratch};
    rx_iov[2] = iovec{ov.base + ov.scratch, ov.guard};
    rx_msg = fi_msg{rx_iov, rx_descs, ov.iovs, FI_ADDR_UNSPEC, nullptr, 0};
  }
  ConnectionImpl(const ConnectionImpl &) = delete;
  ConnectionImpl &operator=(const ConnectionImpl &) = delete;
  ~ConnectionImpl();

  FabricImpl *fab;
  // Quirks::truncation_hangs_receiver: a receive's message with the fabric's
  // overflow area behind the caller's buffer, built once; a post fills in
  // the buffer and the context (the provider copies the message), some
  // twenty stores less on every repost.
  iovec rx_iov[3] = {};
  void *rx_descs[3] = {};
  fi_msg rx_msg{};

  // Order matters: members are destroyed bottom-up, so the endpoint goes
  // before the queues, address vector and event queue it is bound to, and the
  // slot pool (in-flight contexts) outlives the endpoint.
  std::vector<lf::OpSlot> slots; // the send pool first, then the receive pool
  size_t tx_slots = 0;
  lf::SlotList tx_free, rx_free;
  std::vector<lf::PendingNotify> pending; // a ring of tx_slots entries
  size_t pending_head = 0, pending_count = 0;
  // FabricImpl::link_wait_set: the one wait object of eq, txcq and rxcq
  // (closed after them). Null where each has its own.
  lf::Fid<fid_wait> waitset;
  lf::Fid<fid_eq> eq;
  lf::Fid<fid_cq> txcq;
  lf::Fid<fid_cq> rxcq;
  lf::Fid<fid_av> av;
  std::vector<uint8_t> ctl_mem; // control send/recv buffers
  lf::Fid<fid_mr> ctl_mr;
  lf::Fid<fid_ep> ep;

  fi_addr_t peer = FI_ADDR_UNSPEC; // RDM: the peer's AV entry
  // Capabilities::shared_endpoint: this link's place on the fabric's shared
  // endpoint (ep, queues and av above are borrowed from it, never closed
  // here). Messages to the peer carry `peer_link` as their tag; receives
  // match `link_id`.
  lf::SharedRdm *sh = nullptr;
  uint32_t link_id = 0, peer_link = 0;
  /// Tag of this link's messages through the peer's receive pool.
  uint64_t pool_tag() const noexcept { return lf::kPoolTag | peer_link; }
  /// Next sequence number of a large message (kLargeTag) to the peer.
  uint32_t large_seq = 0;
  // Quirks::in_process_peer_must_be_alive: this endpoint's raw name, and the
  // peer's when the peer is an endpoint of this process.
  std::string local_name, peer_name;
  bool ended_here = false; // peer_closed set by this side (a truncated receive)
  // ConnectionOptions::accept_in_background: the handshake answer (in a
  // control send slot) waits for the provider to take it until this time.
  bool answer_pending = false;
  bool answer_failed = false; // reported once as a failed receive
  const uint8_t *answer_buf = nullptr;
  // The answer's send once posted, until its completion is read: close()
  // waits for it (shm crashed in a later completion read when an endpoint
  // went away with it outstanding).
  lf::OpSlot *answer_slot = nullptr;
  std::chrono::steady_clock::time_point answer_deadline;
  /// Post the pending answer again; false when it cannot be sent any more.
  bool retry_answer() noexcept;

  // Shared endpoint, accepting side: nothing may go to the peer before it
  // confirmed (HsConfirm) that it holds this endpoint's address. tcp;ofi_rxm
  // names the source of a message that arrives before its receiver inserted
  // the sender's address FI_ADDR_NOTAVAIL, and the receiver's source check
  // (route_pooled_locked) must drop such a message: it cannot be told from a
  // stranger's. The confirmation is received into ctl_recv(0) with a
  // receive directed at the peer, so that nobody else can give it.
  // A message from the peer through the pool (its source checked) is as
  // good: the peer could only send it once it held this side's address. A
  // server that answers only once its client spoke (the resource manager)
  // then never waits, whatever the client does with the confirmation.
  // Meanwhile nothing waits either: a transmit is held (hold()) and posted
  // once the confirmation came; a peer that has not confirmed by the
  // accept's deadline (a hostile or broken client) ends the link, with an
  // error that says so, and what was held fails.
  bool awaiting_confirm = false; // the owner's: the confirmation is not settled yet
  /// The owner's: every transmit goes through hold() (awaiting_confirm, or
  /// held transmits not posted yet).
  bool hold_tx = false;
  bool confirm_missed = false;    // the owner's: no confirmation by the deadline (no goodbye)
  bool confirm_overdue = false;   // under sh->m: ready_links named it at its deadline
  bool confirm_seen = false;      // under sh->m: the confirmation's receive completed
  bool peer_spoke = false;        // under sh->m: a message of the peer reached the link
  bool confirm_abandoned = false; // under sh->m: the owner stopped waiting for it (peer_spoke)
  int confirm_err = 0;            // under sh->m: its error, if it failed
  lf::OpSlot *confirm_slot = nullptr;
  /// Shared endpoint: the handshake's nonce, drawn by the client and known
  /// only to the two ends. The confirmation echoes it, and every goodbye
  /// carries it (goodbye()), so that a goodbye is taken from a sender whose
  /// source the receiver cannot name yet: a link closed right after it was
  /// made still ends at the peer at once. 0 before the handshake.
  uint64_t nonce = 0;
  /// The goodbye of this link (nonce included) as it goes to the peer.
  ControlMessage goodbye() const noexcept {
    return control_message(ControlType::Goodbye, static_cast<uint32_t>(nonce),
                           static_cast<uint32_t>(nonce >> 32));
  }
  /// Under sh->m: whether the `len` bytes at `msg`, from a source that is not
  /// the peer's address (route_pooled_locked), are the peer's goodbye.
  bool peer_goodbye(const void *msg, size_t len) const noexcept;
  std::chrono::steady_clock::time_point confirm_deadline;
  /// What the accept gave the handshake: the error of a missing
  /// confirmation says how long it was waited for.
  std::chrono::milliseconds confirm_wait{0};
  /// Transmits posted before the confirmation, oldest first.
  std::deque<lf::HeldOp> held;
  /// Shared endpoint, accepting side: posts the receive of the peer's
  /// confirmation (before the answer goes, so that it cannot be missed).
  void expect_confirm(uint64_t nonce, std::chrono::steady_clock::time_point until);
  /// Whether the confirmation is settled: Ok once the peer confirmed (or
  /// spoke), Again while it may still come, Closed (the link ended, the
  /// reason in last_error) when it failed or did not come by the deadline.
  Status check_confirm() noexcept;
  /// Under sh->m: the confirmation is settled; off SharedRdm::awaiting.
  void settled_locked() noexcept;
  /// A transmit while hold_tx: settles what can be settled, then holds `op`
  /// (st: Ok, Again when the send depth is used up, Closed) and returns
  /// true, or returns false when it may be posted now.
  [[gnu::noinline]] bool hold(lf::HeldOp &&op, Status &st) noexcept;
  /// Every poll while hold_tx: the confirmation settled, the held transmits
  /// posted (or failed).
  [[gnu::noinline]] void settle_held() noexcept;
  /// Posts the held transmits in order; stops at one the provider has no
  /// room for yet (the next poll goes on).
  void replay_held() noexcept;
  /// A held transmit's completion with status `st` (the send queue's stash).
  void report_held(const lf::HeldOp &op, Status st) noexcept;
  /// Shared endpoint, connecting side: tells the server that its address is
  /// in this process's address vector (HsConfirm); throws when it cannot.
  void confirm_answer(uint64_t nonce, const Deadline &dl);

  uint32_t ctl_send_next = 0;

  // Control memory layout (one registration): `ctl_recv_count` handshake
  // receive slots, kCtlSendSlots send slots, then one 16-byte atomic operand
  // area per send slot (operands must live in registered memory on
  // FI_MR_LOCAL providers).
  static constexpr size_t kCtlSlot = sizeof(lf::HandshakeMessage);
  static constexpr size_t kCtlSendSlots = 8;
  size_t ctl_recv_count = 1;
  uint8_t *ctl_recv(size_t i) { return ctl_mem.data() + i * kCtlSlot; }
  uint8_t *ctl_send(size_t i) { return ctl_mem.data() + (ctl_recv_count + i) * kCtlSlot; }
  uint64_t *operand(const lf::OpSlot *s) {
    size_t base = (ctl_recv_count + kCtlSendSlots) * kCtlSlot;
    return reinterpret_cast<uint64_t *>(ctl_mem.data() + base + 16 * (s - slots.data()));
  }
  void *ctl_desc() const { return ctl_mr ? fi_mr_desc(ctl_mr.get()) : nullptr; }

  // ---- the front end's contract (frontend/contract.hpp): setup
  void connect(const Address &to, const void *private_data, size_t private_len, const Deadline &dl);
  void accept(RequestImpl &request, const void *private_data, size_t private_len,
              const Deadline &dl);
  void attach(MemoryRegionImpl &region);
  void close() noexcept;

  // ---- the front end's contract: data path (data_path.hpp, operations.cpp)
  // always_inline where GCC kept a call of its own per operation or poll
  // (register saves and a frame each time: measured with callgrind on shm).
  [[gnu::always_inline]] Status post_send(const LocalRef &src, uint64_t ctx, bool inline_) noexcept;
  [[gnu::always_inline]] Status post_recv(const LocalRef *dst, const uint64_t *ctx, size_t n,
                                          size_t &done) noexcept;
  Status post_write(const LocalRef &src, uint64_t addr, uint64_t key, uint64_t ctx,
                    bool inline_) noexcept;
  [[gnu::always_inline]] Status post_write_imm(const LocalRef &src, uint64_t addr, uint64_t key,
                                               uint32_t imm, uint64_t ctx, bool inline_) noexcept;
  Status post_write_notify(const LocalRef &src, uint64_t addr, uint64_t key, uint32_t imm,
                           uint64_t ctx, bool inline_) noexcept;
  Status post_read(const LocalRef &dst, uint64_t addr, uint64_t key, uint64_t ctx) noexcept;
  Status post_atomic(OpKind kind, const LocalRef &result, uint64_t addr, uint64_t key,
                     uint64_t operand, uint64_t compare, uint64_t ctx) noexcept;
  [[gnu::always_inline]] size_t reap(Queue q, Completion *out, size_t max) noexcept;
  [[gnu::always_inline]] size_t reap_plain(Queue q, Completion *out, size_t max) noexcept;
  bool needs_detour() const noexcept {
    return pending_count || answer_pending || answer_failed || peer_dead || sh;
  }
  void make_room(Queue q) noexcept;
  bool check_peer() noexcept;
  /// Quirks::dead_peer_can_hang_progress: the peer process is gone; the
  /// provider is not entered any more. Asked before every entry: with a
  /// pidfd one poll() answers for lf::kPidfdLookLasts, without one a look
  /// at /proc for a millisecond. A peer that dies holding the provider's
  /// lock wedges the first entry after its death for good, however soon it
  /// comes.
  bool peer_gone() noexcept { return RDMALIB_UNLIKELY(peer_pid != 0) && peer_process_gone(); }
  size_t block(Queue q, Completion *out, size_t max, int slice_ms) noexcept;
  /// block() on a link whose queues share `waitset`.
  size_t block_on_wait_set(Queue q, Completion *out, size_t max, int slice_ms) noexcept;
  /// MSG: one connection-manager event, waiting up to `ms` (fi_eq_sread's
  /// results: -FI_EAGAIN when none came).
  ssize_t read_event(uint32_t &event, void *buf, size_t len, int ms) noexcept;
  /// Connection::wait_fd() and Operations::arm() (operations.cpp).
  lf::WaitEpoll wait;
  int wait_fd() noexcept;
  bool arm() noexcept;
  bool answer_owed() const noexcept { return answer_pending; }
  /// The event queue (a peer's shutdown on connected endpoints) is only
  /// looked at between sleeps; completions wake a sleep at once.
  int wait_slice_ms() const noexcept { return eq ? 20 : 200; }

  // --- the shared endpoint (connection.cpp, operations.cpp)
  /// Take a link id on the fabric's shared endpoint and borrow its objects.
  void join_shared();
  /// Give the link id back: cancel what is posted, wait briefly for the
  /// provider to return every slot (or keep them with the fabric), drop the
  /// peer's AV reference. Idempotent.
  void leave_shared() noexcept;
  /// A control message (handshake, goodbye): tagged with `tag` when the
  /// link or the peer is on a shared endpoint (tag != 0).
  ssize_t ctl_send_to(const void *buf, size_t len, fi_addr_t to, uint64_t tag, void *ctx) noexcept {
    if (sh || tag)
      return fi_tsend(ep.get(), buf, len, ctl_desc(), to, tag, ctx);
    return fi_send(ep.get(), buf, len, ctl_desc(), to, ctx);
  }
  /// One read of a shared queue; on the receive queue with each entry's
  /// source (the pool checks it against the link's peer).
  static ssize_t read_shared(Queue q, fid_cq *cq, fi_cq_tagged_entry *buf, fi_addr_t *from,
                             size_t n) noexcept;
  /// Under sh->m: read one batch of `q`'s shared queue, each completion to
  /// its owner's inbox. Returns how many were read.
  size_t pull_locked(Queue q) noexcept;
  /// Under sh->m: hand one completion to the link it belongs to (dropped
  /// when that link is gone).
  void route_locked(Queue q, const lf::RawCompletion &rc) noexcept;
  uint32_t owner_of(Queue q, const fi_cq_data_entry &e) const noexcept {
    if (auto *s = static_cast<const lf::OpSlot *>(e.op_context))
      return s->link;
    if (q == Queue::Recv && (e.flags & FI_REMOTE_CQ_DATA))
      return static_cast<uint32_t>(e.data >> 32);
    return link_id;
  }
  size_t convert_raw(Queue q, const lf::RawCompletion &rc, Completion *out) noexcept;
  /// A pool receive completed (under sh->m): hand the message to its link,
  /// post the receive again.
  void route_pooled_locked(const lf::RawCompletion &rc) noexcept;
  /// Under sh->m: a message for this link through the pool goes into its
  /// oldest posted receive (a completion in the inbox), or waits in `early`
  /// until one is posted.
  void deliver_locked(const uint8_t *msg, size_t len) noexcept;
  /// Under sh->m: a large message was announced; post the receive that
  /// takes its data into `u`.
  void start_large_locked(lf::OpSlot *u, uint32_t seq, uint32_t length) noexcept;
  /// post_recv on a shared endpoint: the receives wait in rdmalib.
  [[gnu::noinline]] Status post_recv_pooled(const LocalRef *dst, const uint64_t *ctx, size_t n,
                                            size_t &done) noexcept;
  /// post_send of more than kPoolMessage bytes on a shared endpoint.
  [[gnu::noinline]] Status post_send_large(const LocalRef &src, uint64_t ctx) noexcept;
  /// Under sh->m: give back the receives waiting in rdmalib (close).
  void drop_posted_locked() noexcept;
  /// This link's receives posted on a shared endpoint, oldest first
  /// (chained through OpSlot::next_free), and messages that came before
  /// any receive was posted; both under sh->m.
  uint32_t posted_head = UINT32_MAX, posted_tail = UINT32_MAX;
  std::deque<std::vector<uint8_t>> early;
  /// Under sh->m: on SharedRdm::ready.
  bool listed = false;
  /// Under sh->m: a completion for this link's receive queue.
  void push_recv_locked(const lf::RawCompletion &rc) noexcept;
  /// Shared endpoint: this link owes work that only its polls move (a
  /// handshake answer, a notification): list it for Fabric::ready_links.
  [[gnu::noinline]] void list_owed() noexcept;
  /// Whether Fabric::ready_links keeps naming it (under sh->m).
  bool wants_poll() const noexcept {
    return !inbox[1].empty() || answer_pending || answer_failed || pending_count || confirm_overdue;
  }
  size_t reap_shared(Queue q, Completion *out, size_t max) noexcept;
  size_t block_shared(Queue q, Completion *out, size_t max, int slice_ms) noexcept;
  bool wait_internal_shared(Queue q, fi_cq_data_entry &out, const Deadline &dl, int &err);
  /// Release this link's own completions waiting in `q` (close): their
  /// slots go back; true when `watch` was among them.
  bool drain_own(Queue q, const lf::OpSlot *watch) noexcept;
  void close_shared() noexcept;

  // --- setup (connection.cpp)
  /// Take an endpoint Fabric::prepare opened for these options (queues,
  /// control memory, enabled endpoint) instead of opening one; false when
  /// none waits.
  bool adopt_prepared();
  /// Queues, AV (RDM), EQ (MSG), slots and control memory.
  void open_queues(bool want_eq);
  void open_own_queues(bool want_eq);
  /// fi_endpoint from `info`, bind everything, enable.
  void create_endpoint(fi_info *info);
  /// Wait for one raw completion of an internal operation on `q` (handshakes),
  /// driving progress on both queues. Returns false at the deadline.
  bool wait_internal(Queue q, fi_cq_data_entry &out, const Deadline &dl, int &err);
  /// Drive progress without reading any completion (setup steps that wait
  /// for the provider to take a post).
  void drive() noexcept {
    if (!peer_dead)
      fi_cq_read(txcq.get(), nullptr, 0);
  }

  // --- data path helpers (data_path.hpp, operations.cpp)
  /// Post one receive of `len` bytes at `buf` (with the fabric's overflow
  /// area behind it where the provider needs one). Returns fi_recv's result.
  [[gnu::always_inline]] ssize_t post_receive(void *buf, size_t len, void *desc, lf::OpSlot *s,
                                              uint64_t flags) noexcept;
  lf::OpSlot *take_slot(uint64_t user, OpKind kind, bool internal) noexcept {
    lf::SlotList &l = kind == OpKind::Recv ? rx_free : tx_free;
    if (RDMALIB_UNLIKELY(l.head == UINT32_MAX || (!internal && l.used >= l.limit)))
      return nullptr;
    lf::OpSlot *s = &slots[l.head];
    l.head = s->next_free;
    l.used += !internal;
    s->user = user;
    s->kind = kind;
    s->internal = internal;
    s->buf = nullptr;
    return s;
  }
  void put_slot(lf::OpSlot *s) noexcept {
    if (RDMALIB_UNLIKELY(s == answer_slot))
      answer_slot = nullptr;
    lf::SlotList &l = s->rx ? rx_free : tx_free;
    s->next_free = l.head;
    l.head = static_cast<uint32_t>(s - slots.data());
    l.used -= !s->internal;
  }
  /// A post's result: Ok, Again (slot returned), or the error (slot
  /// returned, last_error set).
  Status posted(ssize_t ret, lf::OpSlot *s, const char *what) noexcept {
    if (RDMALIB_LIKELY(ret == 0))
      return Status::Ok;
    if (s)
      put_slot(s);
    if (ret == -FI_EAGAIN)
      return Status::Again;
    return post_failed(ret, what);
  }
  Status post_failed(ssize_t ret, const char *what) noexcept;
  /// An RDMA write reported to the caller as `kind` (Write, or WriteImm for
  /// the emulation's write).
  Status post_rma_write(OpKind kind, const LocalRef &src, uint64_t addr, uint64_t key, uint64_t ctx,
                        bool inline_) noexcept;
  /// Post the notifications still owed (PendingNotify); false while some
  /// remain (the provider's queue is full).
  bool flush_pending() noexcept;
  /// The notification of one emulated write-with-immediate.
  ssize_t post_notify(uint32_t imm, uint32_t length, uint16_t type = 1) noexcept;
  /// MSG: reads the event queue; true when the peer shut the connection down.
  bool check_events() noexcept;
  [[gnu::always_inline]] size_t convert(Queue q, const fi_cq_data_entry *e, size_t n,
                                        Completion *out) noexcept;
  /// reap() after a first read that held nothing for the caller, or an error.
  [[gnu::noinline]] size_t reap_more(Queue q, fid_cq *cq, ssize_t r, Completion *out,
                                     size_t max) noexcept;
  Completion convert_error(Queue q, fid_cq *cq) noexcept;
  Completion convert_error_entry(Queue q, const fi_cq_err_entry &err, const char *ptext) noexcept;
  /// Remember who the peer is (RDM), from its handshake message: its raw
  /// address `raw` (`len` bytes) when it is an endpoint of this process, for
  /// Quirks::in_process_peer_must_be_alive, and its process `pid` in
  /// `pid_namespace`, for Quirks::dead_peer_can_hang_progress.
  void set_peer(const void *raw, size_t len, uint32_t pid, uint64_t pid_namespace);
  /// Quirks::dead_peer_can_hang_progress: true (and the link marked closed) when
  /// the peer process is known to be gone. Looks at most once per
  /// lf::kPidfdLookLasts with a pidfd, else once per millisecond; cheap when
  /// not needed.
  bool peer_process_gone() noexcept;
  uint32_t peer_pid = 0;
  /// A pidfd of peer_pid (-1 when none could be opened): exact liveness for
  /// one poll(). Closed with the connection.
  int peer_pidfd = -1;
  /// The peer process is gone: its lock in the provider may be held for
  /// ever, so reap(), block() and drive() no longer call into the provider.
  bool peer_dead = false;
  std::chrono::steady_clock::time_point next_liveness_check{};
  /// Quirks::connreq_names_vanished_peer: swept before each progress call. Set
  /// on a listener's handshake endpoint (every new client announces itself
  /// there) and on a connecting endpoint until the answer arrived (the
  /// server's link endpoint announces itself before it answers). An accepted
  /// endpoint needs none: it announces itself to its one peer first, which
  /// answers nothing of the kind.
  std::unique_ptr<lf::ShmConnreqGuard> connreq_guard;
  /// Start guarding this endpoint (Quirks::connreq_names_vanished_peer); a
  /// no-op for other providers. Never throws: without a guard the endpoint
  /// works, exposed to the provider bug (warned once per process).
  void guard_connreqs() noexcept;
  void sweep_connreqs() noexcept {
    if (connreq_guard)
      connreq_guard->sweep();
  }
  /// Completions of this link read by other links, by queue (under sh->m;
  /// last: off the cache lines the data path uses).
  std::deque<lf::RawCompletion> inbox[2];
  std::deque<lf::RawCompletion> &inbox_of(Queue q) noexcept { return inbox[q == Queue::Recv]; }
};

struct ListenerImpl;

struct RequestImpl final : RequestCore {
  ListenerImpl *listener = nullptr;
  // MSG: the connection request's info (owns the handle).
  lf::InfoPtr info;
  // RDM: the HELLO.
  lf::HandshakeMessage hello{};

  // ---- the front end's contract (frontend/contract.hpp)
  void reject() noexcept;
  Address remote_address() const;
};

struct ListenerImpl final : ListenerCore {
  explicit ListenerImpl(FabricImpl &f) noexcept : fab(&f) {}
  FabricImpl *fab;
  // Connected endpoints: a passive endpoint and its event queue. Quirk
  // (sockets 1.17): the passive endpoint keeps pointers into the fi_info it
  // was created from and reads them on every connection request, so that info
  // lives as long as the pep (declared first, destroyed last).
  lf::InfoPtr pep_info;
  lf::Fid<fid_eq> eq;
  lf::Fid<fid_pep> pep;
  // Reliable datagrams: an endpoint that receives HELLO messages.
  std::unique_ptr<ConnectionImpl> hs;
  int wait_fd = -1;
  // FabricImpl::doorbell(): the socket that connecting processes poke.
  int bell = -1;
  // Quirks::closed_names_stay_local: the name of the handshake endpoint's
  // region, whose address range is kept when the listener closes.
  std::string region_name;

  ~ListenerImpl();

  // ---- the front end's contract (frontend/contract.hpp)
  void listen(const Address &bind);
  RequestImpl *next(const Deadline &dl);
  int fd() const noexcept { return wait_fd >= 0 ? wait_fd : bell; }
};

} // namespace rdmalib::detail

namespace rdmalib::lf {

/// Fabric::prepare: connection endpoints opened ahead of need by one
/// background thread. One endpoint waits per kind of connection (its receive
/// and send depths, which size its queues); a connect or accept with those
/// depths takes it, and the thread opens the next. A kind whose endpoint
/// cannot be opened is logged once and left to open at connect time, where
/// the error reaches the caller.
class Preparer {
public:
  explicit Preparer(detail::FabricImpl &f) noexcept : f_(f) {}
  ~Preparer();
  Preparer(const Preparer &) = delete;
  Preparer &operator=(const Preparer &) = delete;

  /// Keep one endpoint for these depths; false when kMaxKinds are kept.
  bool want(uint32_t recv_depth, uint32_t send_depth, Fabric::Refill refill);
  /// The waiting endpoint for these depths, or null. When the thread is
  /// opening one for these depths right now, waits for it: finishing that
  /// costs less than opening a second one beside it.
  std::unique_ptr<detail::ConnectionImpl> take(uint32_t recv_depth, uint32_t send_depth);
  /// Endpoints that wait, and how many were taken.
  Fabric::PreparedEndpoints counts() const;

  static constexpr size_t kMaxKinds = 4;

private:
  struct Kind {
    uint32_t recv_depth = 0, send_depth = 0;
    std::unique_ptr<detail::ConnectionImpl> ready;
    bool failed = false;
    /// The thread is opening this kind's endpoint.
    bool opening = false;
    Fabric::Refill refill = Fabric::Refill::Keep;
    /// Refill::Once and taken: nothing more to open.
    bool done = false;
    /// When a connection last took this kind's endpoint.
    std::chrono::steady_clock::time_point taken_at{};
  };
  void run();

  detail::FabricImpl &f_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<Kind> kinds_;
  uint64_t taken_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

} // namespace rdmalib::lf

#include "data_path.hpp"
