// One established link to one peer.
//
// On connected fabrics (libfabric FI_EP_MSG, verbs RC) it wraps an endpoint set
// up by the connection manager; on reliable-datagram fabrics (FI_EP_RDM) it is a
// private endpoint plus an address-vector entry for the peer, established by a
// handshake message. Both carry small private data each way during setup, so a
// client can present a lease or token and the server can answer with a buffer
// advertisement before any data flows.
#pragma once

#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmalib/address.hpp>
#include <rdmalib/buffer.hpp>
#include <rdmalib/operations.hpp>

namespace rdmalib {

class Fabric;
class Listener;

/// Queue sizes and deadlines of one connection.
struct ConnectionOptions {
  /// Outstanding sends/writes/reads/atomics.
  uint32_t send_depth = 64;
  /// Outstanding receives; 0 = the device's default_receive_buffer_size.
  uint32_t recv_depth = 0;
  /// How long a post may retry on a full queue before returning Timeout.
  /// Not spent on the handshake: on a link over a shared endpoint
  /// (Capabilities::shared_endpoint) an accepting side's transmits before
  /// the peer confirmed that it can name this side as the sender of what it
  /// gets (a step of the handshake, about one one-way trip after the answer;
  /// a first message of the peer's says the same) return Ok at once and are
  /// held, counted in send_depth, until a poll, wait or post finds the
  /// confirmation. A peer that has not confirmed by accept()'s deadline
  /// ends the link: PeerClosed, last_error naming the peer and the time
  /// waited, and what was held completes with Status::Closed, unsent.
  std::chrono::milliseconds post_deadline{5000};
  /// Connection requests the peer refuses are made again this many times,
  /// after 20, 40, 80, ... ms and within connect()'s timeout. A refusal is not
  /// always final: libfabric's sockets provider intermittently refuses requests
  /// its listener then accepts. 0: the first refusal is the answer.
  uint32_t refused_retries = 0;
  /// Server side, for single-threaded servers that must not wait for one
  /// peer: on reliable-datagram fabrics, ConnectionRequest::accept() returns
  /// as soon as its answer to the client is posted, and when the provider
  /// cannot take the answer yet (tcp;ofi_rxm first connects to the client,
  /// which takes up to a second) it is posted again by every later poll or
  /// wait on the connection until accept's timeout; past it the connection
  /// reports PeerClosed with the reason. Do not send on such a connection
  /// before the peer has spoken: the answer may not have left yet. Connected
  /// fabrics (whose accept completes in the provider's connection manager)
  /// ignore it.
  bool accept_in_background = false;
  /// For loops that poll many links and must not hang on one (a server's
  /// single thread): poll() looks at the peer before it reads completions
  /// instead of only every 1024th empty poll: a peer process's liveness at
  /// most every 10 us with a pidfd (one poll(2)) or every millisecond without
  /// one (/proc), its connection events at most every millisecond. On
  /// providers where entering the provider after a peer died can spin for
  /// ever (shm: a peer killed while it held a lock of this endpoint's
  /// region), a peer known gone is then never entered again; elsewhere the
  /// link's end is reported sooner. Costs a clock read per poll and those
  /// looks: leave it off on busy-polling data paths. wait() always looks.
  bool check_peer_before_poll = false;
  /// Active side: when set, connect() gives up as soon as *cancel is
  /// non-zero (Error kind Timeout, "cancelled"), at its next look between two
  /// provider calls: within about 100 ms, and never from inside the provider.
  /// For a process that must end on a signal: its handler sets the flag, the
  /// connect returns, and the process ends where no provider call is under
  /// way. Ending inside one can leave a lock held in another process's shared
  /// memory (shm: the peer's region lock, taken to deliver a message) and
  /// wedge that process (docs/BACKEND-BUGS.md, "a killed peer can hang
  /// progress"). Must stay valid while connect() runs.
  const volatile std::sig_atomic_t *cancel = nullptr;
};

/// One established link to one peer (the file's opening comment says what it is on each
/// kind of fabric). Move-only; closing is the destructor's or close()'s.
class Connection {
public:
  Connection() noexcept;
  ~Connection();
  /// Takes over the link; `o` is left closed.
  Connection(Connection &&o) noexcept;
  /// Ends the current link as the destructor does, then takes over `o`'s.
  Connection &operator=(Connection &&o) noexcept;
  Connection(const Connection &) = delete;
  Connection &operator=(const Connection &) = delete;

  /// Active side: connect to a Listener at `remote`, presenting `private_data`
  /// (at most Capabilities::max_private_data bytes, at least 32 on every fabric).
  /// Blocks until established or `timeout` passes. Throws Error: Refused when
  /// nobody listens or the peer rejects (after options.refused_retries more
  /// attempts), Timeout at the deadline, Config for oversized private data,
  /// Backend otherwise, each naming the address.
  static Connection connect(Fabric &fabric, const Address &remote, const void *private_data,
                            size_t private_len, std::chrono::milliseconds timeout,
                            const ConnectionOptions &options = {});

  /// The data path. Valid while this Connection lives.
  Operations ops() const noexcept;

  /// Private data the peer sent during setup (client's request on the server,
  /// server's reply on the client).
  const std::vector<uint8_t> &peer_private_data() const noexcept;

  /// Where the peer's listener is (client side) / where the peer connected from
  /// (server side, best effort).
  Address remote_address() const;

  /// Bind a memory region to this connection's endpoint. Required before use
  /// when Capabilities::endpoint_bound_memory; a no-op otherwise. Throws Error.
  void attach(const MemoryRegion &region);

  /// Graceful close: tells the peer (shutdown / goodbye message) and releases
  /// the endpoint. Idempotent; called by the destructor. Never throws.
  void close() noexcept;

  /// True from a successful connect() or accept() until close() or a move.
  bool is_open() const noexcept;

  /// Server side of ConnectionOptions::accept_in_background: true while the
  /// handshake answer has not left yet (the provider could not take it; the
  /// next poll or wait on this link posts it again, until accept's timeout).
  /// The peer waits for that answer, so a loop that sleeps between its polls
  /// should poll this link again soon while it holds. False on every other
  /// link (connected fabrics, or the answer already taken). Cheap; not
  /// thread-safe, like the data path.
  bool answer_pending() const noexcept;

  /// Changes ConnectionOptions::post_deadline from now on (negative = 0).
  /// For a caller about to post under a shorter deadline of its own: a post
  /// to a peer that vanished can find no room for the whole post deadline
  /// (tcp;ofi_rxm answers "try again" while it reconnects to a dead address),
  /// and a goodbye sent at teardown should not wait longer than the teardown
  /// allows. No-op on a closed connection.
  void set_post_deadline(std::chrono::milliseconds deadline) noexcept;

  /// The Fabric this connection was made on.
  Fabric &fabric() const noexcept;

  /// A value of the caller's choosing that Fabric::ready_links() reports
  /// for this link (0 until set). Thread-safe. No-op on a closed connection.
  void set_tag(uint64_t tag) noexcept;

  /// A file descriptor that becomes readable (POLLIN) when this link may
  /// have a completion on either queue, or may have ended, so that one
  /// thread serves many links by sleeping in poll/epoll instead of spinning
  /// over them or sleeping for a fixed time. -1 when the fabric has no such
  /// descriptor (Capabilities::wait_fd false, or a provider whose blocking
  /// wait is no descriptor: shm 1.17 yields the CPU in a loop instead):
  /// poll such links. Links that share one endpoint (reliable-datagram
  /// fabrics) share one descriptor: a wake-up may concern any of them.
  /// Owned by the link (or its fabric), valid until close(); never read or
  /// close it. Before each sleep call Operations::arm() on every link whose
  /// descriptor is waited on. Not thread-safe, like the data path.
  int wait_fd() const noexcept;

private:
  friend struct detail::Internals;
  friend class ConnectionRequest;
  explicit Connection(detail::ConnectionImpl *impl) noexcept;
  struct Deleter {
    void operator()(detail::ConnectionImpl *p) const noexcept;
  };
  /// One attempt of connect().
  static Connection connect_once(Fabric &fabric, const Address &remote, const void *private_data,
                                 size_t private_len, std::chrono::milliseconds timeout,
                                 const ConnectionOptions &options);

  std::unique_ptr<detail::ConnectionImpl, Deleter> impl_;
};

} // namespace rdmalib
