// The passive side of connection setup for the libfabric backend.
#include <random>

#include <unistd.h>

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

#include <rdmalib/fabric.hpp>
#include <rdmalib/listener.hpp>

#include "backend.hpp"
#include "doorbell.hpp"

namespace rdmalib {
namespace detail {

namespace {

constexpr size_t kHandshakeReceives = 8;

void post_handshake_recv(ConnectionImpl &c, size_t i) {
  lf::OpSlot *s = c.take_slot(i, OpKind::Recv, true);
  if (!s)
    throw Error(ErrorKind::Backend, "rdmalib: listener out of handshake slots");
  ssize_t r;
  lf::Deadline dl(std::chrono::milliseconds(1000));
  do {
    r = c.post_receive(c.ctl_recv(i), sizeof(lf::HandshakeMessage), c.ctl_desc(), s, 0);
    if (r == -FI_EAGAIN)
      c.drive();
  } while (r == -FI_EAGAIN && !dl.passed());
  if (r) {
    c.put_slot(s);
    lf::throw_fi("posting a handshake receive on the listener", static_cast<int>(r));
  }
}

/// Send a handshake message from `c` to `to` and wait for it to leave.
/// `tag`: the peer's link id when it is on a shared endpoint, else 0.
/// `peer`: the peer's raw address (its hello's), for the check below.
void send_handshake(ConnectionImpl &c, fi_addr_t to, uint32_t tag, const lf::HandshakeMessage &m,
                    const lf::Deadline &dl, const std::string &what, const uint8_t *peer,
                    size_t peer_len) {
  // Quirks::absent_region_enters_av: a peer whose shared-memory region is
  // gone reads nothing any more, and its process may not be watched by pid
  // (its hello names no PID namespace when it sees no /proc, as in an
  // executor's sandbox): without this look the send stayed in EAGAIN for
  // the whole deadline, and the listening process with it.
  const bool check_region = c.fab->quirks.absent_region_enters_av && peer;
  auto next_region_check = std::chrono::steady_clock::now();
  uint8_t *buf = c.ctl_send(c.ctl_send_next++ % ConnectionImpl::kCtlSendSlots);
  std::memcpy(buf, &m, sizeof m);
  lf::OpSlot *s = c.take_slot(0, OpKind::Send, true);
  if (!s)
    throw Error(ErrorKind::Backend, "rdmalib: no slot to send the " + what);
  ssize_t r;
  do {
    r = c.ctl_send_to(buf, sizeof m, to, tag, s);
    if (r == -FI_EAGAIN) {
      c.drive();
      // shm keeps a send to a dead process's endpoint in EAGAIN: do not make
      // the listening process wait out the whole deadline for it.
      if (c.peer_process_gone()) {
        c.put_slot(s);
        throw Error(ErrorKind::Closed,
                    "rdmalib: the peer process went away before the " + what + " could be sent");
      }
      if (check_region && std::chrono::steady_clock::now() >= next_region_check) {
        next_region_check = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
        if (!lf::shm_region_usable(peer, peer_len)) {
          c.put_slot(s);
          throw Error(ErrorKind::Closed, "rdmalib: the peer's endpoint went away before the " +
                                             what + " could be sent");
        }
      }
    }
  } while (r == -FI_EAGAIN && !dl.passed());
  if (r) {
    c.put_slot(s);
    lf::throw_fi("sending the " + what, static_cast<int>(r));
  }
  fi_cq_data_entry e{};
  int err = 0;
  if (!c.wait_internal(Queue::Send, e, dl, err))
    lf::throw_fi("completing the " + what, -err);
}

/// Quirks::receiver_keeps_senders_mapped: let go of what the provider mapped
/// of the endpoint that sent hello `h` to the listener `hs`. Only the
/// connection's own endpoint answers the client, and the client sends the
/// listener nothing more; reject() enters it again for its answer.
void forget_hello_sender(ConnectionImpl &hs, const lf::HandshakeMessage &h) noexcept {
  // A string address must end inside the hello: the provider reads it to
  // its terminating zero.
  if (hs.fab->addr_format == FI_ADDR_STR && !std::memchr(h.address, 0, h.address_len))
    return;
  // Quirks::absent_region_enters_av: the insert of a sender that is gone
  // would leave a half entry in the map that no remove takes out. What the
  // provider mapped of it at its hello stays mapped then (rare: the sender
  // vanished between its hello and this call, microseconds).
  if (hs.fab->quirks.absent_region_enters_av && !lf::shm_region_usable(h.address, h.address_len))
    return;
  fi_addr_t a = FI_ADDR_UNSPEC;
  if (fi_av_insert(hs.av.get(), h.address, 1, &a, 0, nullptr) == 1)
    fi_av_remove(hs.av.get(), &a, 1, 0);
}

} // namespace

Address RequestImpl::remote_address() const {
  FabricImpl &f = *listener->fab;
  if (!f.rdm)
    return info.p ? f.decode_address(info->dest_addr, info->dest_addrlen) : Address{};
  return f.decode_address(hello.address, hello.address_len);
}

void RequestImpl::reject() noexcept {
  ListenerImpl &l = *listener;
  try {
    if (!l.fab->rdm) {
      fi_reject(l.pep.get(), info->handle, nullptr, 0);
      return;
    }
    ConnectionImpl &hs = *l.hs;
    if (l.fab->addr_format == FI_ADDR_STR && !std::memchr(hello.address, 0, hello.address_len))
      return;
    // Quirks::absent_region_enters_av: a client whose region is gone reads no
    // answer, and sending one would crash this process. Checked again after
    // the insert: the region may go while the provider maps it.
    const bool check_region = l.fab->quirks.absent_region_enters_av;
    if (check_region && !lf::shm_region_usable(hello.address, hello.address_len)) {
      rdmalib::logger().debug("rdmalib: listener {}: no rejection sent to {}: its shared-memory "
                              "region is gone",
                              l.address.to_string(), remote_address().to_string());
      return;
    }
    fi_addr_t to = FI_ADDR_UNSPEC;
    if (fi_av_insert(hs.av.get(), hello.address, 1, &to, 0, nullptr) != 1)
      return;
    if (check_region && !lf::shm_region_usable(hello.address, hello.address_len)) {
      fi_av_remove(hs.av.get(), &to, 1, 0);
      return;
    }
    lf::HandshakeMessage m{};
    m.magic = lf::kHandshakeMagic;
    m.version = lf::kHandshakeVersion;
    m.type = lf::HsReject;
    m.nonce = hello.nonce;
    send_handshake(hs, to, hello.link, m, lf::Deadline(std::chrono::milliseconds(1000)),
                   "rejection", hello.address, hello.address_len);
    fi_av_remove(hs.av.get(), &to, 1, 0);
  } catch (const std::exception &e) {
    rdmalib::logger().warn("rdmalib: rejecting a connection request failed: {}", e.what());
  }
}

void ConnectionImpl::accept(RequestImpl &request, const void *private_data, size_t private_len,
                            const Deadline &dl) {
  FabricImpl &f = *fab;
  ConnectionImpl *c = this;
  const std::chrono::milliseconds timeout = dl.remaining();
  if (f.rdm && (request.hello.link != 0) != f.shared) {
    request.reject();
    throw Error(ErrorKind::Backend,
                "rdmalib: the client " + request.remote_address().to_string() +
                    (f.shared ? " gives each connection its own endpoint"
                              : " puts connections on one shared endpoint") +
                    " and this process does not (RDMALIB_DISABLE_CAPS=shared_endpoint must be the "
                    "same on both sides)");
  }
  if (f.rdm && f.shared)
    join_shared();
  const bool adopted = f.rdm && !sh && adopt_prepared();
  if (!adopted)
    open_queues(!f.rdm);

  if (!f.rdm) {
    c->create_endpoint(request.info.get());
    c->remote = f.decode_address(request.info->dest_addr, request.info->dest_addrlen);
    int ret = fi_accept(c->ep.get(), private_data, private_len);
    if (ret)
      lf::throw_fi("fi_accept", ret);
    alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + lf::kMaxPrivateData];
    // A deadline under 1 ms still gets one 1 ms read, so that a caller woken
    // by fd() can take a pending event with a zero timeout (tcp's
    // non-blocking fi_eq_read does not progress the listener: it missed a
    // request its fd had already announced).
    bool first = true;
    for (;;) {
      int slice = dl.remaining_ms(100);
      if (slice == 0 && !first)
        throw Error(ErrorKind::Timeout, "rdmalib: accepting a connection from " +
                                            c->remote.to_string() + " timed out after " +
                                            std::to_string(timeout.count()) + " ms");
      uint32_t event = 0;
      first = false;
      ssize_t r = c->read_event(event, buf, sizeof buf, slice > 0 ? slice : 1);
      if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT)
        continue;
      if (r == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        fi_eq_readerr(c->eq.get(), &err, 0);
        lf::throw_fi("accepting a connection from " + c->remote.to_string(), -err.err);
      }
      if (r < 0)
        lf::throw_fi("accepting a connection", static_cast<int>(r));
      if (event == FI_CONNECTED)
        break;
      if (event == FI_SHUTDOWN)
        throw Error(ErrorKind::Closed,
                    "rdmalib: the client " + c->remote.to_string() + " went away during accept");
    }
  } else {
    if (!c->sh && !adopted) {
      lf::InfoPtr info = f.endpoint_info(nullptr);
      c->create_endpoint(info.get());
    }
    const lf::HandshakeMessage &h = request.hello;
    c->remote = f.decode_address(h.address, h.address_len);
    c->peer_link = h.link;
    int ret = 1, aerr = 0;
    if (c->sh)
      ret = c->sh->add_peer(h.address, h.address_len, c->peer, aerr) ? 1 : -aerr;
    else
      ret = fi_av_insert(c->av.get(), h.address, 1, &c->peer, 0, nullptr);
    if (ret != 1)
      lf::throw_fi("inserting the client's address", ret < 0 ? ret : -FI_EINVAL);
    c->set_peer(h.address, h.address_len, h.pid, h.pid_namespace);
    lf::HandshakeMessage m{};
    m.magic = lf::kHandshakeMagic;
    m.version = lf::kHandshakeVersion;
    m.type = lf::HsAccept;
    m.nonce = h.nonce;
    m.link = c->link_id;
    lf::self_process(m.pid, m.pid_namespace);
    size_t alen = sizeof m.address;
    ret = fi_getname(&c->ep->fid, m.address, &alen);
    if (ret)
      lf::throw_fi("fi_getname", ret);
    m.address_len = static_cast<uint32_t>(alen);
    m.private_len = static_cast<uint32_t>(private_len);
    if (private_len)
      std::memcpy(m.private_data, private_data, private_len);
    // Its receive is posted before the answer goes, so that it is there
    // when the confirmation comes.
    if (c->sh)
      c->expect_confirm(h.nonce, std::chrono::steady_clock::now() + timeout);
    if (options.accept_in_background) {
      // One try now; if the provider cannot take it yet, later polls retry.
      uint8_t *buf = c->ctl_send(c->ctl_send_next++ % ConnectionImpl::kCtlSendSlots);
      std::memcpy(buf, &m, sizeof m);
      c->answer_buf = buf;
      c->answer_deadline = std::chrono::steady_clock::now() + timeout;
      c->answer_pending = true;
      c->detour = true;
      c->drive();
      if (!c->retry_answer())
        throw Error(ErrorKind::Backend, std::string("rdmalib: ") + c->last_error);
      if (c->answer_pending && c->sh)
        c->list_owed();
    } else {
      send_handshake(*c, c->peer, c->peer_link, m, dl,
                     "handshake answer to " + c->remote.to_string(), h.address, h.address_len);
    }
  }
}

// ---- Listener ----------------------------------------------------------------

ListenerImpl::~ListenerImpl() {
  if (bell >= 0)
    ::close(bell);
  if (hs && !region_name.empty()) {
    // The guard's own mapping of the region goes first, so that the one
    // left is the provider's.
    hs->connreq_guard.reset();
    const lf::MappedRange where = lf::provider_mapping(region_name);
    hs.reset();
    lf::retire_named_region(region_name, where);
  }
}

void ListenerImpl::listen(const Address &bind) {
  FabricImpl &f = *fab;
  ListenerImpl &l = *this;
  Address want = bind;
  // A device without an ip_address binds where the provider's own source
  // address for it is (its domain's), except for node-local string names,
  // which rdmalib derives from a host and a port.
  const bool provider_source =
      !want.opaque() && want.host.empty() && f.opaque_names && f.addr_format != FI_ADDR_STR;
  if (!want.opaque() && want.host.empty() && !provider_source)
    want.host = f.config.ip_address.empty() ? "127.0.0.1" : f.config.ip_address;

  if (!f.rdm) {
    l.pep_info = f.endpoint_info(provider_source ? nullptr : &want);
    int ret = fi_passive_ep(f.fabric.get(), l.pep_info.get(), l.pep.out(), nullptr);
    if (ret)
      lf::throw_fi("fi_passive_ep on " + want.to_string() + " (" + f.provider + ")", ret);
    fi_eq_attr ea{};
    ea.size = 64;
    ea.wait_obj = FI_WAIT_FD;
    ret = fi_eq_open(f.fabric.get(), &ea, l.eq.out(), nullptr);
    if (ret) {
      ea.wait_obj = FI_WAIT_UNSPEC;
      ret = fi_eq_open(f.fabric.get(), &ea, l.eq.out(), nullptr);
    } else if (fi_control(&l.eq->fid, FI_GETWAIT, &l.wait_fd) != 0) {
      l.wait_fd = -1;
    }
    if (ret)
      lf::throw_fi("fi_eq_open for the listener", ret);
    if ((ret = fi_pep_bind(l.pep.get(), &l.eq->fid, 0)))
      lf::throw_fi("binding the listener's event queue", ret);
    ret = fi_listen(l.pep.get());
    if (ret)
      throw Error(ErrorKind::Backend,
                  "rdmalib: cannot listen on " + want.to_string() + " over " + f.provider + ": " +
                      lf::fi_error_text(ret) + " (address in use, or not an address of this node?)",
                  -ret);
    uint8_t name[lf::kMaxRawAddress];
    size_t len = sizeof name;
    if ((ret = fi_getname(&l.pep->fid, name, &len)))
      lf::throw_fi("fi_getname of the listener", ret);
    l.address = f.decode_address(name, len);
    if (!l.address.opaque() && (l.address.host.empty() || l.address.host == "0.0.0.0"))
      l.address.host = want.host;
    return;
  }

  // RDM: an endpoint at a well-known address receives HELLO messages.
  bool pick_port = !want.opaque() && want.port == 0 && f.addr_format == FI_ADDR_STR;
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0;; ++attempt) {
    Address a = want;
    if (pick_port)
      a.port = static_cast<uint16_t>(20000 + rng() % 40000);
    auto hs = std::make_unique<ConnectionImpl>(f);
    hs->fabric_handle = fabric_handle;
    hs->ctl_recv_count = kHandshakeReceives;
    hs->options.recv_depth = 1;
    hs->options.send_depth = 16;
    hs->open_queues(false);
    lf::InfoPtr info = f.endpoint_info(provider_source ? nullptr : &a);
    try {
      hs->create_endpoint(info.get());
    } catch (const Error &e) {
      // Only shm names can collide when rdmalib picks the "port" itself.
      if (pick_port && attempt < 16 &&
          (e.backend_code() == FI_EBUSY || e.backend_code() == FI_EADDRINUSE))
        continue;
      throw Error(ErrorKind::Backend,
                  std::string(e.what()) + " (listening on " + a.to_string() + ")",
                  e.backend_code());
    }
    uint8_t name[lf::kMaxRawAddress];
    size_t len = sizeof name;
    int ret = fi_getname(&hs->ep->fid, name, &len);
    if (ret)
      lf::throw_fi("fi_getname of the listener", ret);
    l.address = f.decode_address(name, len);
    if (!l.address.opaque()) {
      if (l.address.host.empty() || l.address.host == "0.0.0.0")
        l.address.host = a.host;
      if (l.address.port == 0)
        l.address.port = a.port;
    }
    hs->open = true;
    if (f.quirks.closed_names_stay_local && f.addr_format == FI_ADDR_STR)
      l.region_name = lf::shm_region_name(name, len);
    l.hs = std::move(hs);
    break;
  }
  l.hs->guard_connreqs();
  for (size_t i = 0; i < kHandshakeReceives; ++i)
    post_handshake_recv(*l.hs, i);
  if (f.doorbell()) {
    // Named after the raw address connecting processes compute from the
    // address they were given, which is the one this listener reports.
    try {
      std::vector<uint8_t> raw = f.raw_address(l.address);
      l.bell = lf::open_doorbell(raw.data(), raw.size());
    } catch (const Error &) {
      l.bell = -1;
    }
    if (l.bell < 0)
      rdmalib::logger().debug("rdmalib: listener {} has no doorbell ({}); callers poll it",
                              l.address.to_string(), std::strerror(errno));
  }
}

RequestImpl *ListenerImpl::next(const Deadline &dl) {
  ListenerImpl &l = *this;
  if (!l.fab->rdm) {
    alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + lf::kMaxPrivateData];
    // A deadline under 1 ms still gets one 1 ms read, so that a caller woken
    // by fd() can take a pending event with a zero timeout (tcp's
    // non-blocking fi_eq_read does not progress the listener: it missed a
    // request its fd had already announced).
    bool first = true;
    for (;;) {
      int slice = dl.remaining_ms(100);
      if (slice == 0 && !first)
        return nullptr;
      uint32_t event = 0;
      first = false;
      ssize_t r = fi_eq_sread(l.eq.get(), &event, buf, sizeof buf, slice > 0 ? slice : 1, 0);
      if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT)
        continue;
      if (r == -FI_EAVAIL) {
        fi_eq_err_entry err{};
        fi_eq_readerr(l.eq.get(), &err, 0);
        rdmalib::logger().warn("rdmalib: listener {}: connection event error: {}",
                               l.address.to_string(), fi_strerror(err.err));
        continue;
      }
      if (r < 0)
        lf::throw_fi("reading the listener's event queue", static_cast<int>(r));
      if (event != FI_CONNREQ)
        continue;
      auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
      auto *req = new RequestImpl;
      req->listener = &l;
      req->fabric_handle = l.fabric_handle;
      req->info = lf::InfoPtr(entry->info);
      size_t plen = static_cast<size_t>(r) - sizeof(fi_eq_cm_entry);
      req->private_data.assign(entry->data, entry->data + plen);
      return req;
    }
  }
  ConnectionImpl &hs = *l.hs;
  // Before looking: a HELLO sent after this rings again.
  lf::drain_doorbell(l.bell);
  for (;;) {
    fi_cq_data_entry e{};
    int err = 0;
    if (!hs.wait_internal(Queue::Recv, e, dl, err)) {
      if (err == FI_ETIMEDOUT)
        return nullptr;
      rdmalib::logger().warn("rdmalib: listener {}: handshake receive failed: {}",
                             l.address.to_string(), lf::fi_error_text(err));
      continue;
    }
    // The slot's context is the index of the handshake buffer.
    auto *slot = static_cast<lf::OpSlot *>(e.op_context);
    size_t idx = slot ? static_cast<size_t>(slot->user) : 0;
    lf::HandshakeMessage h;
    std::memcpy(&h, hs.ctl_recv(idx), sizeof h);
    post_handshake_recv(hs, idx);
    if (h.magic != lf::kHandshakeMagic || h.type != lf::HsHello ||
        h.address_len > sizeof h.address || h.private_len > sizeof h.private_data) {
      rdmalib::logger().warn("rdmalib: listener {}: ignoring a malformed handshake",
                             l.address.to_string());
      continue;
    }
    if (h.version != lf::kHandshakeVersion) {
      // Peers of another rdmalib version disagree on how messages are
      // matched on a shared endpoint: refused here, so that both ends say
      // why instead of a link that never delivers.
      rdmalib::logger().warn("rdmalib: listener {}: refusing a peer that speaks handshake version "
                             "{} (this rdmalib speaks {}): run the same rFaaS version on both ends",
                             l.address.to_string(), h.version, lf::kHandshakeVersion);
      RequestImpl refused;
      refused.listener = &l;
      refused.fabric_handle = l.fabric_handle;
      refused.hello = h;
      refused.reject();
      continue;
    }
    if (l.fab->quirks.receiver_keeps_senders_mapped)
      forget_hello_sender(hs, h);
    auto *req = new RequestImpl;
    req->listener = &l;
    req->fabric_handle = l.fabric_handle;
    req->hello = h;
    req->private_data.assign(h.private_data, h.private_data + h.private_len);
    return req;
  }
}

} // namespace detail

} // namespace rdmalib
