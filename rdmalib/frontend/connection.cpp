// Connection, once for every backend: argument checks, option defaults, the
// retry of refused requests, moves and accessors. One attempt to connect is
// the backend's ConnectionImpl::connect.
#include <algorithm>
#include <thread>

#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>

#include "backend.hpp"
#include "common/logging.hpp"
#include "frontend/link.hpp"

namespace rdmalib {

namespace detail {

ConnectionOptions with_defaults(const FabricImpl &f, ConnectionOptions o) {
  if (o.recv_depth == 0)
    o.recv_depth = f.config.default_receive_buffer_size ? f.config.default_receive_buffer_size : 32;
  if (o.send_depth == 0)
    o.send_depth = 64;
  if (o.post_deadline.count() < 0)
    o.post_deadline = std::chrono::milliseconds(0);
  return o;
}

LinkPtr new_link(Fabric &fabric, const ConnectionOptions &options) {
  FabricImpl &f = Internals::fabric(fabric);
  LinkPtr c(new ConnectionImpl(f));
  c->fabric_handle = &fabric;
  c->options = with_defaults(f, options);
  c->idle_yields = f.caps.progress == Progress::Thread;
  c->tx_stash.reserve(2 * size_t(c->options.send_depth));
  c->rx_stash.reserve(2 * size_t(c->options.recv_depth));
  return c;
}

void check_private_data(const Fabric &fabric, const void *data, size_t len,
                        const std::string &what) {
  const size_t limit = fabric.capabilities().max_private_data;
  if (len > limit)
    throw Error(ErrorKind::Config, "rdmalib: " + what + ": " + std::to_string(len) +
                                       " bytes of private data exceed this fabric's limit of " +
                                       std::to_string(limit) + " (Capabilities::max_private_data)");
  if (len && !data)
    throw Error(ErrorKind::Config, "rdmalib: " + what + ": " + std::to_string(len) +
                                       " bytes of private data at a null address");
}

} // namespace detail

void Connection::Deleter::operator()(detail::ConnectionImpl *p) const noexcept {
  if (p) {
    p->close();
    delete p;
  }
}

Connection::Connection() noexcept = default;
Connection::~Connection() = default;
Connection::Connection(Connection &&) noexcept = default;
Connection &Connection::operator=(Connection &&) noexcept = default;
Connection::Connection(detail::ConnectionImpl *impl) noexcept : impl_(impl) {}

Connection Connection::connect(Fabric &fabric, const Address &remote, const void *private_data,
                               size_t private_len, std::chrono::milliseconds timeout,
                               const ConnectionOptions &options) {
  detail::check_private_data(fabric, private_data, private_len, "connect to " + remote.to_string());
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::milliseconds backoff{20};
  for (uint32_t attempt = 0;; ++attempt) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const Clock::time_point start = Clock::now();
    auto ms = [&] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    };
    logger().debug("connecting to {} over {} (attempt {}, {} ms left)", remote.to_string(),
                   fabric.provider(), attempt + 1, left.count());
    try {
      Connection c = connect_once(fabric, remote, private_data, private_len,
                                  std::max(left, std::chrono::milliseconds(1)), options);
      logger().debug("connected to {} over {} in {} ms", remote.to_string(), fabric.provider(),
                     ms());
      return c;
    } catch (const Error &e) {
      logger().debug("connecting to {} over {} failed after {} ms: {}", remote.to_string(),
                     fabric.provider(), ms(), e.what());
      if (options.cancel && *options.cancel)
        throw Error(ErrorKind::Timeout, "rdmalib: connection to " + remote.to_string() + " over " +
                                            fabric.provider() +
                                            " cancelled (ConnectionOptions::cancel)");
      // Only a refusal is worth another request, and only while the caller's
      // deadline leaves room for the pause and a useful attempt after it.
      left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (e.kind() != ErrorKind::Refused || attempt >= options.refused_retries ||
          left < 2 * backoff)
        throw;
    }
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
}

Connection Connection::connect_once(Fabric &fabric, const Address &remote, const void *private_data,
                                    size_t private_len, std::chrono::milliseconds timeout,
                                    const ConnectionOptions &options) {
  detail::LinkPtr c = detail::new_link(fabric, options);
  c->remote = remote;
  c->connect(remote, private_data, private_len, detail::Deadline(timeout, options.cancel));
  c->open = true;
  return Connection(c.release());
}

Operations Connection::ops() const noexcept { return Operations(impl_.get()); }

const std::vector<uint8_t> &Connection::peer_private_data() const noexcept {
  static const std::vector<uint8_t> empty;
  return impl_ ? impl_->peer_private : empty;
}

Address Connection::remote_address() const { return impl_ ? impl_->remote : Address{}; }

void Connection::attach(const MemoryRegion &region) {
  detail::MemoryRegionImpl *m = detail::Internals::region(region);
  if (!impl_ || !m || !impl_->fab->caps.endpoint_bound_memory)
    return;
  if (!impl_->open)
    throw Error(ErrorKind::Closed,
                "rdmalib: attach on a closed connection to " + impl_->remote.to_string());
  impl_->attach(*m);
}

void Connection::close() noexcept {
  if (impl_)
    impl_->close();
}

bool Connection::is_open() const noexcept { return impl_ && impl_->usable(); }

bool Connection::answer_pending() const noexcept {
  return impl_ && impl_->open && impl_->answer_owed();
}

void Connection::set_post_deadline(std::chrono::milliseconds deadline) noexcept {
  ops().set_post_deadline(deadline);
}

Fabric &Connection::fabric() const noexcept { return *impl_->fabric_handle; }

void Connection::set_tag(uint64_t tag) noexcept {
  if (impl_)
    impl_->tag.store(tag, std::memory_order_relaxed);
}

int Connection::wait_fd() const noexcept {
  return impl_ && impl_->open && impl_->fab->caps.wait_fd ? impl_->wait_fd() : -1;
}

} // namespace rdmalib
