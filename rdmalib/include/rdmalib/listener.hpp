// The passive side of connection setup.
//
// Accepting is two steps so that a server can look at the client's private data
// (a lease id, a token, a protocol version) before deciding: next_request()
// returns a ConnectionRequest, which is accepted with reply private data or
// rejected. accept() does both for servers that take everyone.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <rdmalib/address.hpp>
#include <rdmalib/connection.hpp>

namespace rdmalib {

class Fabric;

namespace detail {
struct ListenerImpl;
struct RequestImpl;
struct Internals;
} // namespace detail

/// A client asking to connect. Move-only. Destroying it without accepting
/// rejects it.
class ConnectionRequest {
public:
  ConnectionRequest() noexcept;
  ~ConnectionRequest();
  /// Takes over the pending request; `o` is left empty.
  ConnectionRequest(ConnectionRequest &&o) noexcept;
  /// Ends the current request as the destructor does (rejects it), then takes over `o`'s.
  ConnectionRequest &operator=(ConnectionRequest &&o) noexcept;

  /// What the client sent with its request.
  const std::vector<uint8_t> &private_data() const noexcept;

  /// Where the request comes from (best effort, as Connection::remote_address()
  /// after accept), so a server can apply per-peer limits before it spends an
  /// endpoint on the request. Never throws: an address it cannot decode is
  /// returned empty.
  Address remote_address() const noexcept;

  /// Complete the connection, replying with `private_data` (at most
  /// Capabilities::max_private_data bytes). Blocks until the connection is
  /// established on both sides or `timeout` passes. Throws Error.
  Connection accept(const void *private_data, size_t private_len, std::chrono::milliseconds timeout,
                    const ConnectionOptions &options = {});

  /// Refuse; the client's connect() throws Error(Refused). Never throws.
  void reject() noexcept;

private:
  friend struct detail::Internals;
  friend class Listener;
  explicit ConnectionRequest(detail::RequestImpl *impl) noexcept;
  struct Deleter {
    void operator()(detail::RequestImpl *p) const noexcept;
  };
  std::unique_ptr<detail::RequestImpl, Deleter> impl_;
};

/// A listening endpoint bound to an address. Move-only.
///
/// Thread-safety: one thread at a time calls next_request()/accept(); the
/// connections it returns are independent objects.
class Listener {
public:
  /// Listen on `bind` (port 0 = let the OS choose). Throws Error(Backend) when
  /// the address is in use or not local, naming it.
  Listener(Fabric &fabric, const Address &bind);
  ~Listener();
  /// Takes over the listening endpoint; `o` is left closed.
  Listener(Listener &&o) noexcept;
  /// Closes the current endpoint as the destructor does, then takes over `o`'s.
  Listener &operator=(Listener &&o) noexcept;

  /// The address clients should connect to, with the real port (never 0).
  const Address &address() const noexcept;

  /// Wait for the next connection request. Throws Error(Timeout) when none
  /// arrives within `timeout`. A zero timeout still takes a request that is
  /// already pending (after fd() became readable), looking for at most ~1 ms.
  ConnectionRequest next_request(std::chrono::milliseconds timeout);

  /// next_request() + accept() in one call.
  Connection accept(const void *private_data, size_t private_len, std::chrono::milliseconds timeout,
                    const ConnectionOptions &options = {});

  /// A file descriptor that becomes readable when a request may be pending, so
  /// daemons can multiplex listeners with other work; -1 if the fabric has none
  /// (then call next_request with a short timeout). After a wake-up, call
  /// next_request until it times out (zero timeouts after the first): one
  /// wake-up may stand for several requests. On node-local providers whose
  /// queues have no fd (shm) it is a doorbell that connecting rdmalib
  /// processes ring; one in another network namespace cannot, so also call
  /// next_request(0) every few hundred milliseconds regardless.
  int fd() const noexcept;

private:
  struct Deleter {
    void operator()(detail::ListenerImpl *p) const noexcept;
  };
  std::unique_ptr<detail::ListenerImpl, Deleter> impl_;
};

} // namespace rdmalib
