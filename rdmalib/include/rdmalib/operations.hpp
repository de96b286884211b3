// The data path of one Connection: posts and completion polling.
//
// Rules every call follows:
//  * never throws, never allocates; failures are Status values;
//  * posts whose queue is momentarily full (-FI_EAGAIN, ENOMEM on verbs) drive
//    progress and retry until the connection's post deadline, then return
//    Status::Timeout;
//  * every post produces exactly one completion on the Send queue (carrying the
//    caller's `context`), except receives, which complete on the Recv queue;
//  * remote memory is always named as (RemoteBuffer, offset): rdmalib turns it
//    into a virtual address or an offset as the provider requires;
//  * a write's completion at the initiator means its local buffer may be
//    reused, not that the target sees the data: on manual-progress providers
//    (shm, tcp) the target applies it when it next polls or waits. Synchronise
//    with write_imm or a message before relying on remote visibility.
//
// Oversized messages: a message longer than the receive it lands in ends the
// link, on every backend and provider. The receiver's receive completes with a
// non-Ok status (last_error() says the message was truncated), or the link
// reports its end (PeerClosed / Closed) where the provider drops the
// connection itself (tcp); receives still posted may come back flushed, never
// as messages; afterwards posts return Closed and wait() returns Closed. No
// call waits inside the provider for it (shm 1.17 would spin for ever; rdmalib
// posts its receives so that it cannot). The sender's send completes, Ok or
// not, within its deadlines, and it sees the link end once the receiver closes
// it. Protocols must therefore bound their messages and size receives for the
// largest one; a peer that sends more loses its link, nothing else.
//
// Thread-safety: an Operations handle (and its Connection) is used by one thread
// at a time. Different connections may be driven from different threads.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include <rdmalib/buffer.hpp>
#include <rdmalib/errors.hpp>

namespace rdmalib {

namespace detail {
struct ConnectionImpl;
struct Internals;
} // namespace detail

/// Which completion queue of a connection to poll.
enum class Queue : uint8_t { Send, Recv };

/// What finished.
enum class OpKind : uint8_t {
  Send,
  Recv,
  Write,
  WriteImm,
  Read,
  FetchAdd,
  CompareSwap,
  /// Target side of a peer's write-with-immediate: `imm` holds the 32-bit value.
  /// Arrives on the Recv queue. `length` is NOT reliable here (tcp reports 0):
  /// carry sizes in the immediate or in a header.
  RemoteWriteImm,
  /// The peer closed the connection (RDM goodbye, MSG shutdown event).
  PeerClosed,
};

/// One completion in backend-neutral form.
struct Completion {
  /// The `context` given when the operation was posted.
  uint64_t context = 0;
  /// Bytes received (Recv only; see RemoteWriteImm for the caveat).
  uint32_t length = 0;
  /// Immediate data (RemoteWriteImm only).
  uint32_t imm = 0;
  /// Which operation completed (a local post or a remote write with immediate).
  OpKind kind = OpKind::Send;
  /// Ok, or why the operation failed; the data path reports errors here, never by
  /// throwing.
  Status status = Status::Ok;
};

/// Result of a blocking wait.
struct WaitResult {
  /// Completions written to the output array.
  size_t count = 0;
  /// Ok when count > 0; Timeout when the deadline passed with none; Closed when
  /// the peer went away and nothing else is pending; Error otherwise.
  Status status = Status::Ok;
};

/// Per-post flags, combined with |.
enum PostFlags : uint32_t {
  PostNone = 0,
  /// Copy the payload at post time (no completion wait needed before reuse).
  /// Honoured only when len <= Capabilities::max_inline; ignored otherwise.
  PostInline = 1u << 0,
};

/// A non-owning handle to a connection's data path. Copyable; valid as long as
/// the Connection it came from.
class Operations {
public:
  /// An empty handle: every post returns InvalidArgument, poll() returns 0,
  /// wait() returns InvalidArgument, valid() is false.
  Operations() noexcept = default;

  /// Send `src` as one message; the peer needs a posted receive of at least
  /// src.len bytes (a longer message ends the link: see the file comment).
  Status send(const LocalRef &src, uint64_t context, uint32_t flags = PostNone) noexcept;

  /// Post one receive buffer.
  Status post_recv(const LocalRef &dst, uint64_t context) noexcept;
  /// Post `n` receive buffers at once (one doorbell / lock where the backend
  /// allows). On failure the first `*posted` were posted (when non-null).
  Status post_recv(const LocalRef *dst, const uint64_t *contexts, size_t n,
                   size_t *posted = nullptr) noexcept;

  /// RDMA write of `src` into (dst, offset).
  Status write(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset, uint64_t context,
               uint32_t flags = PostNone) noexcept;

  /// RDMA write plus a 32-bit immediate delivered to the peer as a
  /// RemoteWriteImm completion on its Recv queue, after the data is visible.
  /// If Capabilities::write_consumes_receive, the peer must have a receive
  /// posted of at least Capabilities::notify_message_size bytes.
  /// Without native remote CQ data this is a write followed by an ordered
  /// notification message.
  Status write_imm(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset, uint32_t imm,
                   uint64_t context, uint32_t flags = PostNone) noexcept;

  /// RDMA read of (src, offset) into `dst` (dst.len bytes).
  Status read(const LocalRef &dst, const RemoteBuffer &src, uint64_t offset,
              uint64_t context) noexcept;

  /// Atomically add `add` to the 64-bit word at (target, offset); the previous
  /// value lands in `result` (8 bytes, registered). Status::Unsupported without
  /// Capabilities::atomics. The target must be 8-byte aligned.
  Status fetch_add(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                   uint64_t add, uint64_t context) noexcept;

  /// Atomically replace the 64-bit word at (target, offset) by `swap` if it equals
  /// `compare`; the previous value lands in `result`. Status::Unsupported
  /// without Capabilities::atomics.
  Status compare_swap(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                      uint64_t compare, uint64_t swap, uint64_t context) noexcept;

  /// Non-blocking: reap up to `max` completions from queue `q` into `out`, drive
  /// progress if it is manual, and return how many were written. Failed
  /// operations come back as completions with a non-Ok status.
  size_t poll(Queue q, Completion *out, size_t max) noexcept;

  /// Blocking: like poll(), but sleeps (on a wait fd where the fabric has one,
  /// else polling with backoff) until at least one completion arrives, the peer
  /// closes, or `timeout_ms` passes (negative = no deadline, use with care).
  WaitResult wait(Queue q, Completion *out, size_t max, int timeout_ms) noexcept;

  /// Hybrid wait: polls without sleeping for up to `spin` (within
  /// `timeout_ms`), yielding the CPU between polls to any thread that
  /// waits for it, then waits as wait() does. For an answer known to come
  /// within microseconds (a peer that answers from a loop), where a sleep
  /// and its wake-up cost more than the answer: tens of microseconds each on
  /// a busy host. The caller pays the spin in CPU when the answer is late.
  /// A zero or negative `spin`, or a fabric whose provider progresses on a
  /// thread of its own (Capabilities::progress == Thread: spinning would
  /// take the core that thread needs), make it wait() exactly.
  WaitResult wait(Queue q, Completion *out, size_t max, int timeout_ms,
                  std::chrono::microseconds spin) noexcept;

  /// Prepares Connection::wait_fd() for a sleep, after the caller polled
  /// both queues: true when sleeping on it is safe (whatever arrives from
  /// now on makes it readable); false when something may already wait
  /// (completions read ahead into this link's stash, a notification the
  /// device raises only once re-armed, progress owed to the provider such as
  /// a handshake answer posted again by polls): poll again, then arm again.
  /// Never blocks; false on an empty handle or a link without a descriptor.
  bool arm() noexcept;

  /// How long a post retries on a full queue before Status::Timeout: the
  /// connection's ConnectionOptions::post_deadline, or what
  /// set_post_deadline() made it (0 ms on an empty handle).
  std::chrono::milliseconds post_deadline() const noexcept;

  /// Changes the connection's post deadline from the next post on (negative
  /// = 0), as Connection::set_post_deadline() does, for code that holds only
  /// the Operations. A caller with a deadline of its own lowers it around its
  /// post and restores it: a post to a peer that vanished can find no room
  /// for the whole post deadline (tcp;ofi_rxm answers "try again" while it
  /// reconnects). No-op on an empty handle.
  void set_post_deadline(std::chrono::milliseconds deadline) noexcept;

  /// Text describing the most recent non-Ok status of this connection (the
  /// backend's own error string included), for logs.
  const char *last_error() const noexcept;

  /// False for operations of a closed or moved-from connection.
  bool valid() const noexcept { return impl_ != nullptr; }

private:
  friend struct detail::Internals;
  friend class Connection;
  explicit Operations(detail::ConnectionImpl *impl) noexcept : impl_(impl) {}
  detail::ConnectionImpl *impl_ = nullptr;
};

} // namespace rdmalib
