// Listener and ConnectionRequest on rdma_cm. Each request is moved to an
// event channel of its own right away (rdma_migrate_id), so the connection it
// becomes sees its own ESTABLISHED / DISCONNECTED events and nobody else's.
#include "backend.hpp"

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>

namespace rdmalib {

namespace detail {

RequestImpl::~RequestImpl() { reject(); }

void RequestImpl::reject() noexcept {
  if (id && rdma_reject(id.get(), nullptr, 0))
    rdmalib::logger().warn("rdmalib verbs: rdma_reject failed: {}", std::strerror(errno));
  id.reset();
  events.reset();
}

Address RequestImpl::remote_address() const {
  if (!id)
    return Address{};
  return vb::sockaddr_address(rdma_get_peer_addr(id.get()));
}

void ConnectionImpl::accept(RequestImpl &r, const void *private_data, size_t private_len,
                            const Deadline &deadline) {
  ConnectionImpl *c = this;
  const auto timeout = deadline.remaining();
  c->remote = vb::sockaddr_address(rdma_get_peer_addr(r.id.get()));
  // From here on the connection owns the id and channel; if anything below
  // throws, the id is rejected by hand and released with the connection.
  c->events = std::move(r.events);
  c->id = std::move(r.id);
  const std::string who = "accept from " + c->remote.to_string();
  try {
    c->check_device("connection from");
    c->create_resources();
  } catch (...) {
    rdma_reject(c->id.get(), nullptr, 0);
    throw;
  }

  uint8_t framed[vb::kPrivateHeader + vb::kMaxPrivateData];
  vb::frame_private(private_data, private_len, framed);
  rdma_conn_param param{};
  param.private_data = framed;
  param.private_data_len = static_cast<uint8_t>(vb::kPrivateHeader + private_len);
  // Never promise more RDMA read/atomic resources than the client can use or
  // asked to serve.
  param.responder_resources = std::min(r.fab->rd_atomic, r.peer_initiator_depth);
  param.initiator_depth = std::min(r.fab->rd_atomic, r.peer_responder_resources);
  param.rnr_retry_count = 7;
  if (rdma_accept(c->id.get(), &param))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_accept (" + who + ")", errno);

  rdma_cm_event ev{};
  if (!vb::next_cm_event(c->events.get(), deadline, ev, nullptr))
    throw Error(ErrorKind::Timeout, "rdmalib verbs: " + who + " timed out after " +
                                        std::to_string(timeout.count()) +
                                        " ms waiting for the connection to be established");
  if (ev.event != RDMA_CM_EVENT_ESTABLISHED)
    throw Error(ev.event == RDMA_CM_EVENT_DISCONNECTED ? ErrorKind::Closed : ErrorKind::Backend,
                "rdmalib verbs: " + who + " failed: " + vb::event_text(ev),
                ev.status < 0 ? -ev.status : ev.status);
}

// ---------------------------------------------------------------- Listener

void ListenerImpl::listen(const Address &bind) {
  auto &l = *this;
  rdma_event_channel *ch = rdma_create_event_channel();
  if (!ch)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_event_channel", errno);
  l.events.reset(ch);
  vb::set_nonblocking(ch->fd, "the rdma_cm event channel");
  rdma_cm_id *raw = nullptr;
  if (rdma_create_id(ch, &raw, nullptr, RDMA_PS_TCP))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_id", errno);
  l.id.reset(raw);

  vb::AddrInfo ai = vb::resolve(bind, true);
  if (rdma_bind_addr(l.id.get(), ai->ai_src_addr))
    vb::throw_errno(ErrorKind::Backend,
                    "rdmalib verbs: cannot listen on " + bind.to_string() +
                        (errno == EADDRNOTAVAIL ? " (not an address of this node)" : ""),
                    errno);
  if (l.id->verbs && l.id->verbs != l.fab->ctx)
    throw Error(ErrorKind::Config, "rdmalib verbs: listen address " + bind.to_string() +
                                       " is on device " + ibv_get_device_name(l.id->verbs->device) +
                                       ", but the Fabric opened " + l.fab->device_name);
  if (rdma_listen(l.id.get(), 128))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_listen on " + bind.to_string(), errno);
  l.address = bind;
  l.address.port = ntohs(rdma_get_src_port(l.id.get()));
  if (l.address.host.empty() || l.address.host == "0.0.0.0" || l.address.host == "::")
    l.address.host = l.fab->config.ip_address;
}

RequestImpl *ListenerImpl::next(const Deadline &deadline) {
  auto &l = *this;
  for (;;) {
    // Read the event by hand: the request's id must be taken before the
    // event is acknowledged.
    rdma_cm_event *ev = nullptr;
    if (rdma_get_cm_event(l.events.get(), &ev)) {
      int err = errno;
      if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
        vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_get_cm_event on the listener",
                        err);
      if (deadline.passed())
        return nullptr;
      pollfd pfd{l.events->fd, POLLIN, 0};
      ::poll(&pfd, 1, deadline.remaining_ms(1000));
      continue;
    }
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      // Only requests arrive here: accepted ids are migrated before accept.
      rdmalib::logger().debug("rdmalib verbs: listener {} ignores {}", l.address.to_string(),
                              rdma_event_str(ev->event));
      rdma_ack_cm_event(ev);
      continue;
    }
    std::unique_ptr<RequestImpl> r(new RequestImpl);
    r->fab = l.fab;
    r->fabric_handle = l.fabric_handle;
    r->id.reset(ev->id);
    std::vector<uint8_t> raw;
    const auto *p = static_cast<const uint8_t *>(ev->param.conn.private_data);
    if (p)
      raw.assign(p, p + ev->param.conn.private_data_len);
    r->peer_initiator_depth = ev->param.conn.initiator_depth;
    r->peer_responder_resources = ev->param.conn.responder_resources;
    rdma_ack_cm_event(ev);
    std::string who = "client " + vb::sockaddr_address(rdma_get_peer_addr(r->id.get())).to_string();
    try {
      r->private_data = vb::unframe_private(raw, who);
    } catch (const Error &e) {
      rdmalib::logger().warn("{}; rejected", e.what());
      continue; // r's destructor rejects
    }
    rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch)
      vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_event_channel", errno);
    r->events.reset(ch);
    vb::set_nonblocking(ch->fd, "the rdma_cm event channel");
    if (rdma_migrate_id(r->id.get(), ch))
      vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_migrate_id", errno);
    return r.release();
  }
}

} // namespace detail

} // namespace rdmalib
