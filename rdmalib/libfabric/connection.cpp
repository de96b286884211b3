// Connection setup and teardown for the libfabric backend.
//
// Connected (FI_EP_MSG) endpoints use libfabric's connection manager with
// private data. Reliable-datagram (FI_EP_RDM) endpoints have no connection
// manager, so rdmalib runs its own handshake: the client sends HELLO (its raw
// address, a nonce and the private data) to the listener's endpoint; the server
// opens a fresh endpoint for the connection and answers ACCEPT from it (its raw
// address and the reply private data). From then on each side has exactly one
// peer in its address vector, and every operation names it.
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>

#include "backend.hpp"
#include "doorbell.hpp"
#include "provider_table.hpp"

namespace rdmalib {
namespace detail {

namespace {

/// Endpoints of this process that are open, by raw name, for
/// Quirks::in_process_peer_must_be_alive. Only open ones: a connection
/// learns whether its peer is in this process from the peer's handshake
/// message (set_peer), so nothing of a closed endpoint is kept, however
/// many a long-running server opens. Leaked on purpose: connections owned by static
/// objects may close after a function-local static would be destroyed.
struct LocalEndpoints {
  std::mutex m;
  std::unordered_map<std::string, int> live;
};
LocalEndpoints &local_endpoints() {
  static auto *r = new LocalEndpoints;
  return *r;
}

/// True when no endpoint of this process by the name `name` (one that was
/// open when the peer's name was learnt) is open any more. The caller holds
/// the registry's mutex.
bool closed_in_this_process(LocalEndpoints &r, const std::string &name) {
  auto it = r.live.find(name);
  return it == r.live.end() || it->second == 0;
}

/// Drop `name` from the live endpoints. The caller holds the registry's mutex.
void forget_local_locked(LocalEndpoints &r, std::string &name) {
  if (name.empty())
    return;
  auto it = r.live.find(name);
  if (it != r.live.end() && --it->second <= 0)
    r.live.erase(it);
  name.clear();
}

void forget_local(std::string &name) {
  if (name.empty())
    return;
  LocalEndpoints &r = local_endpoints();
  std::lock_guard<std::mutex> g(r.m);
  forget_local_locked(r, name);
}

} // namespace

ConnectionImpl::~ConnectionImpl() {
  leave_shared();
  forget_local(local_name);
  if (peer_pidfd >= 0)
    lf::release_pidfd(peer_pidfd);
}

} // namespace detail

namespace lf {

bool SharedRdm::add_peer(const void *raw, size_t len, fi_addr_t &out, int &err) {
  std::lock_guard<std::mutex> g(m);
  std::string key(static_cast<const char *>(raw), len);
  auto it = peers.find(key);
  if (it != peers.end()) {
    ++it->second.refs;
    out = it->second.addr;
    return true;
  }
  fi_addr_t a = FI_ADDR_UNSPEC;
  int ret = fi_av_insert(av.get(), raw, 1, &a, 0, nullptr);
  if (ret != 1) {
    err = ret < 0 ? -ret : FI_EINVAL;
    return false;
  }
  peers.emplace(std::move(key), Peer{a, 1});
  out = a;
  return true;
}

void SharedRdm::release_peer(fi_addr_t addr) noexcept {
  if (addr == FI_ADDR_UNSPEC)
    return;
  std::lock_guard<std::mutex> g(m);
  for (auto it = peers.begin(); it != peers.end(); ++it) {
    if (it->second.addr != addr)
      continue;
    // With the last link to that peer its entry goes, and with it the
    // provider's transport connection.
    if (--it->second.refs <= 0) {
      fi_av_remove(av.get(), &addr, 1, 0);
      peers.erase(it);
    }
    return;
  }
}

Fid<fid_mr> register_local(detail::FabricImpl &f, void *ptr, size_t bytes, const char *what) {
  iovec iov{ptr, bytes};
  fi_mr_attr ma{};
  ma.mr_iov = &iov;
  ma.iov_count = 1;
  ma.access = FI_SEND | FI_RECV | FI_READ | FI_WRITE;
  ma.iface = FI_HMEM_SYSTEM;
  Fid<fid_mr> mr;
  int ret = 0;
  for (int attempt = 0; attempt < 8; ++attempt) {
    ma.requested_key = f.app_keys ? f.next_key() : 0;
    ret = fi_mr_regattr(f.domain.get(), &ma, 0, mr.out());
    if (ret != -FI_ENOKEY)
      break;
  }
  if (ret)
    throw_fi(std::string("registering ") + what + " on " + f.provider, ret);
  return mr;
}

} // namespace lf

namespace detail {

lf::SharedRdm &FabricImpl::shared_links() {
  std::lock_guard<std::mutex> g(shared_open);
  if (shared_rdm)
    return *shared_rdm;
  auto S = std::make_unique<lf::SharedRdm>();
  fi_cq_attr attr{};
  // The tag names the link a message of the receive pool is for.
  attr.format = FI_CQ_FORMAT_TAGGED;
  attr.wait_obj = wait_fd_cq ? FI_WAIT_FD : wait_cq ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
  // Room for every link's completions: a full queue would stall them all.
  attr.size = 16384;
  int ret = fi_cq_open(domain.get(), &attr, S->txcq.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_cq_open (shared send queue) on " + provider, ret);
  ret = fi_cq_open(domain.get(), &attr, S->rxcq.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_cq_open (shared receive queue) on " + provider, ret);
  fi_av_attr aa{};
  aa.type = FI_AV_TABLE;
  aa.count = 256;
  ret = fi_av_open(domain.get(), &aa, S->av.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_av_open on " + provider, ret);
  lf::InfoPtr i = endpoint_info(nullptr);
  if (ordered_saw)
    i->tx_attr->msg_order |= FI_ORDER_SAW;
  ret = fi_endpoint(domain.get(), i.get(), S->ep.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_endpoint (shared) on " + provider, ret);
  if ((ret = fi_ep_bind(S->ep.get(), &S->av->fid, 0)))
    lf::throw_fi("binding the address vector", ret);
  if ((ret = fi_ep_bind(S->ep.get(), &S->txcq->fid, FI_TRANSMIT)))
    lf::throw_fi("binding the send queue", ret);
  if ((ret = fi_ep_bind(S->ep.get(), &S->rxcq->fid, FI_RECV)))
    lf::throw_fi("binding the receive queue", ret);
  if ((ret = fi_enable(S->ep.get())))
    lf::throw_fi("fi_enable (shared) on " + provider, ret);
  open_receive_pool(*S);
  shared_rdm = std::move(S);
  return *shared_rdm;
}

void FabricImpl::open_receive_pool(lf::SharedRdm &S) {
  S.pool_mem.assign(lf::kPoolReceives * lf::kPoolMessage, 0);
  S.pool_mr = lf::register_local(*this, S.pool_mem.data(), S.pool_mem.size(),
                                 "the shared endpoint's receive pool");
  void *desc = fi_mr_desc(S.pool_mr.get());
  S.pool.assign(lf::kPoolReceives, lf::OpSlot{});
  for (size_t i = 0; i < S.pool.size(); ++i) {
    lf::OpSlot &p = S.pool[i];
    p.pool = true;
    p.rx = true;
    p.internal = true;
    p.kind = OpKind::Recv;
    p.buf = S.pool_mem.data() + i * lf::kPoolMessage;
    p.cap = lf::kPoolMessage;
    p.desc = desc;
    ssize_t r;
    Deadline dl(std::chrono::seconds(5));
    while ((r = fi_trecv(S.ep.get(), p.buf, lf::kPoolMessage, desc, FI_ADDR_UNSPEC, lf::kPoolTag,
                         ~lf::kPoolTag, &p)) == -FI_EAGAIN &&
           !dl.passed())
      fi_cq_read(S.rxcq.get(), nullptr, 0);
    if (r)
      lf::throw_fi("posting the shared endpoint's receive pool on " + provider,
                   static_cast<int>(r));
  }
}

void ConnectionImpl::join_shared() {
  lf::SharedRdm &S = fab->shared_links();
  // Ready before it is listed: another thread may read the shared queues
  // through any listed link (FabricImpl::ready_links).
  sh = &S;
  detour = true;
  ep.borrow(S.ep.get());
  txcq.borrow(S.txcq.get());
  rxcq.borrow(S.rxcq.get());
  av.borrow(S.av.get());
  std::lock_guard<std::mutex> g(S.m);
  link_id = S.next_link++;
  if (S.next_link == 0)
    S.next_link = 1;
  S.links[link_id] = this;
}

void ConnectionImpl::leave_shared() noexcept {
  if (!sh)
    return;
  lf::SharedRdm &S = *sh;
  // The handshake confirmation's receive, once completed (also as
  // cancelled below), is this link's again: the router kept it for
  // check_confirm, which a link that never sent did not run.
  auto reclaim_confirm = [this, &S] {
    std::lock_guard<std::mutex> g(S.m);
    if (confirm_slot && confirm_seen) {
      confirm_slot->confirm = false;
      put_slot(confirm_slot);
      confirm_slot = nullptr;
    }
  };
  {
    // Transmits held for the confirmation never leave.
    std::lock_guard<std::mutex> g(S.m);
    if (awaiting_confirm)
      settled_locked();
    hold_tx = false;
    tx_free.used -= static_cast<uint32_t>(held.size());
    held.clear();
  }
  {
    // Receives that wait in rdmalib, not at the provider, go back at once.
    std::lock_guard<std::mutex> g(S.m);
    drop_posted_locked();
  }
  reclaim_confirm();
  // What the provider still holds: every slot not on a free list.
  std::vector<bool> free_slot(slots.size(), false);
  for (lf::SlotList *l : {&tx_free, &rx_free})
    for (uint32_t i = l->head; i != UINT32_MAX && i < slots.size(); i = slots[i].next_free)
      free_slot[i] = true;
  size_t busy = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    if (free_slot[i])
      continue;
    ++busy;
    if (slots[i].rx)
      fi_cancel(&ep->fid, &slots[i]);
  }
  for (Deadline dl(std::chrono::milliseconds(200)); busy && !dl.passed();) {
    drain_own(Queue::Send, nullptr);
    drain_own(Queue::Recv, nullptr);
    reclaim_confirm();
    std::fill(free_slot.begin(), free_slot.end(), false);
    for (lf::SlotList *l : {&tx_free, &rx_free})
      for (uint32_t i = l->head; i != UINT32_MAX && i < slots.size(); i = slots[i].next_free)
        free_slot[i] = true;
    busy = static_cast<size_t>(std::count(free_slot.begin(), free_slot.end(), false));
    if (busy)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  {
    std::lock_guard<std::mutex> g(S.m);
    S.links.erase(link_id);
    if (listed) {
      S.ready.erase(std::find(S.ready.begin(), S.ready.end(), this));
      listed = false;
    }
    inbox[0].clear();
    inbox[1].clear();
    if (busy) {
      // The provider may still complete them (or write into the control
      // memory): kept until the fabric closes.
      try {
        S.dead_slots.push_back(std::move(slots));
        S.dead_ctl.push_back(std::move(ctl_mem));
        S.dead_mr.push_back(std::move(ctl_mr));
      } catch (...) {
      }
    }
  }
  S.release_peer(peer);
  peer = FI_ADDR_UNSPEC;
  ep.drop();
  txcq.drop();
  rxcq.drop();
  av.drop();
  sh = nullptr;
  // Nothing of the provider's is this link's any more: reap(), block() and
  // drive() no longer enter it, and nothing owed is posted.
  peer_dead = true;
  detour = true;
  pending_count = 0;
  answer_pending = false;
}

bool ConnectionImpl::wait_internal_shared(Queue q, fi_cq_data_entry &out, const Deadline &dl,
                                          int &err) {
  const Queue other = q == Queue::Send ? Queue::Recv : Queue::Send;
  err = 0;
  // Takes the oldest completion of `box`, giving its slot back; false (and
  // `err`) when it failed.
  auto take = [&](std::deque<lf::RawCompletion> &box, lf::RawCompletion &rc) {
    rc = box.front();
    box.pop_front();
    if (rc.e.op_context)
      put_slot(static_cast<lf::OpSlot *>(rc.e.op_context));
    err = rc.err;
    return rc.err == 0;
  };
  for (bool first = true; first || !dl.passed(); first = false) {
    {
      std::lock_guard<std::mutex> g(sh->m);
      // During setup the other queue holds only rdmalib's own completions.
      if (!sh->reading[other == Queue::Recv])
        pull_locked(other);
      lf::RawCompletion rc;
      for (auto &box = inbox_of(other); !box.empty();)
        if (!take(box, rc))
          return false;
      if (!sh->reading[q == Queue::Recv])
        pull_locked(q);
      auto &box = inbox_of(q);
      if (!box.empty()) {
        if (!take(box, rc))
          return false;
        out = rc.e;
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  err = FI_ETIMEDOUT;
  return false;
}

void ConnectionImpl::confirm_answer(uint64_t nonce, const Deadline &dl) {
  lf::HandshakeMessage m{};
  m.magic = lf::kHandshakeMagic;
  m.version = lf::kHandshakeVersion;
  m.type = lf::HsConfirm;
  m.nonce = nonce;
  m.link = link_id;
  // Slot 0 carried the hello, whose completion may still be unread.
  uint8_t *buf = ctl_send(1);
  ctl_send_next = 2;
  std::memcpy(buf, &m, sizeof m);
  lf::OpSlot *s = take_slot(0, OpKind::Send, true);
  if (!s)
    throw Error(ErrorKind::Backend,
                "rdmalib: no slot to confirm the handshake to " + remote.to_string());
  // To the server's link alone (its id, no pool bit): it waits for this
  // before it sends anything, so its first message finds the server's
  // address in this process's address vector.
  ssize_t r;
  do {
    r = ctl_send_to(buf, sizeof m, peer, peer_link, s);
    if (r == -FI_EAGAIN)
      drive();
  } while (r == -FI_EAGAIN && !dl.passed());
  if (r) {
    put_slot(s);
    throw Error(r == -FI_EAGAIN ? ErrorKind::Timeout : ErrorKind::Backend,
                "rdmalib: confirming the handshake to " + remote.to_string() + ": " +
                    (r == -FI_EAGAIN ? std::string("the provider kept refusing the send")
                                     : std::string(fi_strerror(static_cast<int>(-r)))));
  }
}

void ConnectionImpl::close_shared() noexcept {
  // A link this side ended (the peer overran a receive) still has a live
  // peer, which must learn that the link is gone; a peer that never
  // confirmed the handshake gets none (it may be gone, and a send to a gone
  // peer waits here for nothing).
  bool goodbye = (!peer_closed || ended_here) && !confirm_missed;
  Deadline dl(std::chrono::milliseconds(200));
  // A handshake answer still in flight (accept_in_background) completes
  // before the link goes.
  while (answer_slot && !dl.passed())
    if (!drain_own(Queue::Send, nullptr))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  lf::OpSlot *s = goodbye ? take_slot(0, OpKind::Send, true) : nullptr;
  if (s) {
    // With the handshake's nonce: this may leave before the peer can name
    // this side as its sender (a close right after accept).
    const ControlMessage m = this->goodbye();
    uint8_t *buf = ctl_send(ctl_send_next++ % kCtlSendSlots);
    std::memcpy(buf, &m, sizeof m);
    ssize_t r = ctl_send_to(buf, sizeof m, peer, pool_tag(), s);
    while (r == -FI_EAGAIN && !dl.passed()) {
      drain_own(Queue::Send, nullptr);
      r = ctl_send_to(buf, sizeof m, peer, pool_tag(), s);
    }
    if (r != 0)
      put_slot(s);
    // Wait until the goodbye leaves, so that dropping the peer's address
    // does not drop it.
    while (r == 0 && !dl.passed() && !drain_own(Queue::Send, s))
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  leave_shared();
}

void ConnectionImpl::set_peer(const void *raw, size_t len, uint32_t pid, uint64_t pid_namespace) {
  const lf::Quirks &q = fab->quirks;
  if (!q.in_process_peer_must_be_alive && !q.dead_peer_can_hang_progress)
    return;
  uint32_t self = 0;
  uint64_t ns = 0;
  lf::self_process(self, ns);
  if (q.in_process_peer_must_be_alive) {
    // The peer is an endpoint of this process when its hello or answer gives
    // this process's id and namespace (it may have closed already by the
    // time that is read), or, from a peer that sent no process id, when an
    // endpoint of this process by its name is open.
    std::string name(static_cast<const char *>(raw), len);
    bool local = pid != 0 && pid == self && pid_namespace == ns;
    if (!local) {
      LocalEndpoints &r = local_endpoints();
      std::lock_guard<std::mutex> g(r.m);
      local = r.live.count(name) > 0;
    }
    if (local)
      peer_name = std::move(name);
  }
  // A pid from another pid namespace names some other process here.
  if (q.dead_peer_can_hang_progress && pid != 0 && ns != 0 && ns == pid_namespace && pid != self) {
    peer_pid = pid;
    if (peer_pidfd >= 0)
      lf::release_pidfd(peer_pidfd);
    peer_pidfd = lf::acquire_pidfd(pid);
  }
}

void ConnectionImpl::guard_connreqs() noexcept {
  if (!fab->rdm || !fab->quirks.connreq_names_vanished_peer)
    return;
  static std::atomic<bool> warned{false};
  try {
    FabricImpl &f = *fab;
    uint8_t name[lf::kMaxRawAddress];
    size_t len = sizeof name;
    if (fi_getname(&ep->fid, name, &len) != 0 || len > sizeof name)
      throw Error(ErrorKind::Backend, "no name for the endpoint");
    const std::string region = lf::shm_region_name(name, len);
    // The sink is opened only when a sweep finds a command to redirect: an
    // endpoint costs milliseconds on shm (Quirks::endpoint_open_is_slow), and
    // most processes never meet a vanished peer.
    Fabric *handle = fabric_handle;
    auto sink = [&f, handle]() noexcept { return f.sink_name(handle); };
    auto guard = std::make_unique<lf::ShmConnreqGuard>(region, sink);
    if (!guard->active())
      throw Error(ErrorKind::Backend, guard->why_inactive());
    connreq_guard = std::move(guard);
  } catch (const std::exception &e) {
    if (!warned.exchange(true))
      rdmalib::logger().warn("rdmalib: shm: cannot guard endpoints against peers that vanish "
                             "while connecting ({}); such a peer can crash this process",
                             e.what());
  }
}

std::string FabricImpl::sink_name(Fabric *handle) noexcept {
  std::lock_guard<std::mutex> g(shm_sink_open);
  if (shm_sink || shm_sink_failed)
    return shm_sink_name;
  try {
    auto sink = std::make_shared<ConnectionImpl>(*this);
    sink->fabric_handle = handle;
    sink->options.recv_depth = 1;
    sink->options.send_depth = 1;
    sink->open_queues(false);
    lf::InfoPtr i = endpoint_info(nullptr);
    sink->create_endpoint(i.get());
    uint8_t name[lf::kMaxRawAddress];
    size_t len = sizeof name;
    if (fi_getname(&sink->ep->fid, name, &len) != 0 || len > sizeof name)
      throw Error(ErrorKind::Backend, "no name for the sink endpoint");
    shm_sink_name.assign(reinterpret_cast<const char *>(name), len);
    shm_sink = std::move(sink);
  } catch (const std::exception &e) {
    shm_sink_failed = true;
    shm_sink_name.clear();
    try {
      rdmalib::logger().warn("rdmalib: shm: cannot open the endpoint that takes the connection "
                             "setup of vanished peers ({}); such a peer can crash this process",
                             e.what());
    } catch (...) {
    }
  }
  return shm_sink_name;
}

bool ConnectionImpl::peer_process_gone() noexcept {
  if (!peer_pid)
    return false;
  if (peer_dead)
    return true;
  {
    // With a pidfd one look answers for kPidfdLookLasts (a busy poller
    // entered the provider several times per message, a system call each);
    // without one, /proc is read at most once per millisecond.
    auto t = std::chrono::steady_clock::now();
    if (t < next_liveness_check)
      return false;
    next_liveness_check =
        t + (peer_pidfd >= 0 ? lf::kPidfdLookLasts
                             : std::chrono::steady_clock::duration(std::chrono::milliseconds(1)));
  }
  if (!(peer_pidfd >= 0 ? lf::pidfd_exited(peer_pidfd) : lf::process_gone(peer_pid)))
    return false;
  set_error("peer process %u is gone", peer_pid);
  peer_closed = true;
  peer_dead = true;
  detour = true;
  return true;
}

void ConnectionImpl::open_queues(bool want_eq) {
  FabricImpl &f = *fab;
  // The send pool also carries rdmalib's own messages (goodbye, the
  // emulation's notifications, a handshake answer); the receive pool the
  // handshake receives.
  tx_slots = options.send_depth + kCtlSendSlots + 4;
  const size_t rx_slots = options.recv_depth + ctl_recv_count;
  const size_t nslots = tx_slots + rx_slots;
  slots.assign(nslots, lf::OpSlot{});
  auto chain = [&](lf::SlotList &l, size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      slots[i].next_free = i + 1 < to ? static_cast<uint32_t>(i + 1) : UINT32_MAX;
      slots[i].rx = &l == &rx_free;
    }
    l.head = from < to ? static_cast<uint32_t>(from) : UINT32_MAX;
    l.used = 0;
  };
  chain(tx_free, 0, tx_slots);
  chain(rx_free, tx_slots, nslots);
  tx_free.limit = options.send_depth;
  rx_free.limit = options.recv_depth;
  pending.assign(tx_slots, lf::PendingNotify{});
  for (auto &slot : slots)
    slot.link = link_id;

  // A link on the shared endpoint uses the fabric's queues and address vector.
  if (!sh)
    open_own_queues(want_eq);

  ctl_mem.assign((ctl_recv_count + kCtlSendSlots) * kCtlSlot + 16 * tx_slots, 0);
  ctl_mr = lf::register_local(f, ctl_mem.data(), ctl_mem.size(), "rdmalib's control buffers");
}

void ConnectionImpl::open_own_queues(bool want_eq) {
  FabricImpl &f = *fab;
  const size_t rx_slots = slots.size() - tx_slots;
  auto wait = f.wait_fd_cq ? FI_WAIT_FD : f.wait_cq ? FI_WAIT_UNSPEC : FI_WAIT_NONE;
  if (want_eq && f.link_wait_set) {
    // Quirks::link_queues_share_wait_set: one wait object for the link
    // instead of one per queue. Without it the queues keep their own.
    fi_wait_attr wa{};
    wa.wait_obj = FI_WAIT_POLLFD;
    int wret = fi_wait_open(f.fabric.get(), &wa, waitset.out());
    if (wret) {
      waitset.drop();
      rdmalib::logger().debug("rdmalib: fi_wait_open on {} failed ({}): one wait object per queue",
                              f.provider, lf::fi_error_text(wret));
    }
  }
  fi_cq_attr attr{};
  attr.format = FI_CQ_FORMAT_DATA;
  attr.wait_obj = waitset ? FI_WAIT_SET : wait;
  attr.wait_set = waitset.get();
  attr.size = tx_slots * 2;
  int ret = fi_cq_open(f.domain.get(), &attr, txcq.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_cq_open (send queue) on " + f.provider, ret);
  attr.size = rx_slots * 2;
  ret = fi_cq_open(f.domain.get(), &attr, rxcq.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_cq_open (receive queue) on " + f.provider, ret);

  if (want_eq) {
    fi_eq_attr ea{};
    ea.size = 16;
    ea.wait_obj = waitset ? FI_WAIT_SET : FI_WAIT_UNSPEC;
    ea.wait_set = waitset.get();
    ret = fi_eq_open(f.fabric.get(), &ea, eq.out(), nullptr);
    if (ret)
      lf::throw_fi("fi_eq_open on " + f.provider, ret);
  }
  if (f.rdm) {
    fi_av_attr aa{};
    aa.type = FI_AV_TABLE;
    aa.count = 4;
    ret = fi_av_open(f.domain.get(), &aa, av.out(), nullptr);
    if (ret)
      lf::throw_fi("fi_av_open on " + f.provider, ret);
  }
}

void ConnectionImpl::create_endpoint(fi_info *info) {
  FabricImpl &f = *fab;
  info->tx_attr->size = options.send_depth + kCtlSendSlots;
  info->rx_attr->size = options.recv_depth + ctl_recv_count;
  if (f.ordered_saw)
    info->tx_attr->msg_order |= FI_ORDER_SAW;
  int ret = fi_endpoint(f.domain.get(), info, ep.out(), nullptr);
  if (ret)
    lf::throw_fi("fi_endpoint on " + f.provider, ret);
  if (eq && (ret = fi_ep_bind(ep.get(), &eq->fid, 0)))
    lf::throw_fi("binding the event queue", ret);
  if (av && (ret = fi_ep_bind(ep.get(), &av->fid, 0)))
    lf::throw_fi("binding the address vector", ret);
  if ((ret = fi_ep_bind(ep.get(), &txcq->fid, FI_TRANSMIT)))
    lf::throw_fi("binding the send queue", ret);
  if ((ret = fi_ep_bind(ep.get(), &rxcq->fid, FI_RECV)))
    lf::throw_fi("binding the receive queue", ret);
  ret = fi_enable(ep.get());
  if (ret == -FI_EBUSY || ret == -FI_EADDRINUSE)
    throw Error(ErrorKind::Backend,
                "rdmalib: the endpoint address is already in use on " + f.provider + ": " +
                    lf::fi_error_text(ret),
                -ret);
  if (ret)
    lf::throw_fi("fi_enable on " + f.provider, ret);
  if (f.mr_endpoint) {
    if ((ret = fi_mr_bind(ctl_mr.get(), &ep->fid, 0)) || (ret = fi_mr_enable(ctl_mr.get())))
      lf::throw_fi("binding rdmalib's control buffers to the endpoint", ret);
  }
  if (f.rdm && (f.quirks.in_process_peer_must_be_alive || f.quirks.region_padding_zero_filled)) {
    uint8_t name[lf::kMaxRawAddress];
    size_t len = sizeof name;
    if (fi_getname(&ep->fid, name, &len) != 0 || len > sizeof name)
      return;
    std::string got(reinterpret_cast<const char *>(name), len);
    // Now, before any peer maps the region: its padding is only ours.
    if (f.quirks.region_padding_zero_filled)
      lf::release_region_padding(got);
    if (f.quirks.in_process_peer_must_be_alive) {
      local_name = std::move(got);
      LocalEndpoints &r = local_endpoints();
      std::lock_guard<std::mutex> g(r.m);
      ++r.live[local_name];
    }
  }
}

bool ConnectionImpl::wait_internal(Queue q, fi_cq_data_entry &out, const detail::Deadline &dl,
                                   int &err) {
  if (sh)
    return wait_internal_shared(q, out, dl, err);
  fid_cq *want = q == Queue::Send ? txcq.get() : rxcq.get();
  fid_cq *other = q == Queue::Send ? rxcq.get() : txcq.get();
  err = 0;
  // One pass even when the deadline has passed: a caller polling with a zero
  // timeout (a server loop that must not wait for one peer) still reads what
  // is there.
  for (bool first = true; first || !dl.passed(); first = false) {
    sweep_connreqs();
    if (q == Queue::Recv && !inbox_of(q).empty()) {
      out = inbox_of(q).front().e;
      inbox_of(q).pop_front();
      put_slot(static_cast<lf::OpSlot *>(out.op_context));
      return true;
    }
    fi_cq_data_entry e;
    // The other queue only holds rdmalib's own completions during setup;
    // reading it drives progress and releases their slots. A receive that
    // completes while a listener waits for an answer to leave is the next
    // client's HELLO: it is kept for the listener's next wait.
    ssize_t r = fi_cq_read(other, &e, 1);
    if (r == 1 && e.op_context) {
      auto *s = static_cast<lf::OpSlot *>(e.op_context);
      if (s->rx) {
        lf::RawCompletion rc;
        rc.e = e;
        inbox_of(Queue::Recv).push_back(rc);
      } else {
        put_slot(s);
      }
    } else if (r == -FI_EAVAIL) {
      fi_cq_err_entry ee{};
      fi_cq_readerr(other, &ee, 0);
      if (ee.op_context)
        put_slot(static_cast<lf::OpSlot *>(ee.op_context));
      err = ee.err ? static_cast<int>(ee.err) : FI_EIO;
      return false;
    }
    // Each read progresses the endpoint: sweep again for commands queued
    // since the first (Quirks::connreq_names_vanished_peer).
    sweep_connreqs();
    if (fab->wait_cq && !waitset)
      r = fi_cq_sread(want, &out, 1, nullptr, dl.remaining_ms(5) ? dl.remaining_ms(5) : 1);
    else
      r = fi_cq_read(want, &out, 1);
    if (r == 1) {
      if (out.op_context)
        put_slot(static_cast<lf::OpSlot *>(out.op_context));
      return true;
    }
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry ee{};
      fi_cq_readerr(want, &ee, 0);
      if (ee.op_context)
        put_slot(static_cast<lf::OpSlot *>(ee.op_context));
      err = ee.err ? static_cast<int>(ee.err) : FI_EIO;
      return false;
    }
    if (!fab->wait_cq || waitset)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  err = FI_ETIMEDOUT;
  return false;
}

void ConnectionImpl::close() noexcept {
  if (!open)
    return;
  open = false;
  // Its descriptors belong to the queues that go now.
  wait.reset();
  if (!ep)
    return;
  if (sh) {
    close_shared();
    return;
  }
  if (fab->rdm) {
    // A goodbye to an endpoint this process already closed would crash shm
    // (Quirks::in_process_peer_must_be_alive); that peer needs no goodbye. The
    // check, the goodbye and our own endpoint's end happen under one lock so
    // that two threads closing both ends of a link cannot interleave them.
    std::unique_lock<std::mutex> tracked;
    // A link this side ended (the peer overran a receive) still has a live
    // peer, which must learn that the link is gone.
    bool goodbye = !peer_closed || ended_here;
    // A handshake answer still in flight (accept_in_background) completes
    // before the endpoint goes, whether or not a goodbye follows it.
    for (Deadline dl(std::chrono::milliseconds(200)); answer_slot && !dl.passed();) {
      fi_cq_data_entry e;
      ssize_t n = fi_cq_read(txcq.get(), &e, 1);
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry ee{};
        fi_cq_readerr(txcq.get(), &ee, 0);
        e.op_context = ee.op_context;
        n = 1;
      }
      if (n == 1 && e.op_context)
        put_slot(static_cast<lf::OpSlot *>(e.op_context));
      else
        std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    if (!local_name.empty()) {
      LocalEndpoints &r = local_endpoints();
      tracked = std::unique_lock<std::mutex>(r.m);
      if (goodbye && !peer_name.empty() && closed_in_this_process(r, peer_name)) {
        peer_closed = true;
        goodbye = false;
      }
    }
    if (goodbye) {
      // Tell the peer; wait briefly for the goodbye to leave, so a
      // manual-progress provider does not drop it with the endpoint.
      lf::OpSlot *s = take_slot(0, OpKind::Send, true);
      if (s) {
        ControlMessage m = control_message(ControlType::Goodbye);
        uint8_t *buf = ctl_send(ctl_send_next++ % kCtlSendSlots);
        std::memcpy(buf, &m, sizeof m);
        ssize_t r = fi_send(ep.get(), buf, sizeof m, ctl_desc(), peer, s);
        Deadline dl(std::chrono::milliseconds(200));
        while (r == -FI_EAGAIN && !dl.passed()) {
          sweep_connreqs();
          fi_cq_read(txcq.get(), nullptr, 0);
          r = fi_send(ep.get(), buf, sizeof m, ctl_desc(), peer, s);
        }
        if (r == 0) {
          // Drain until our goodbye completes (or the short deadline passes).
          while (!dl.passed()) {
            sweep_connreqs();
            fi_cq_data_entry e;
            ssize_t n = fi_cq_read(txcq.get(), &e, 1);
            if (n == 1 && e.op_context == s)
              break;
            if (n == -FI_EAVAIL) {
              fi_cq_err_entry ee{};
              fi_cq_readerr(txcq.get(), &ee, 0);
              if (ee.op_context == s)
                break;
            }
            if (n != 1)
              std::this_thread::sleep_for(std::chrono::microseconds(20));
          }
        }
      }
    }
    if (tracked.owns_lock()) {
      ep.reset();
      forget_local_locked(local_endpoints(), local_name);
      return;
    }
  } else if (!peer_closed) {
    fi_shutdown(ep.get(), 0);
  }
  ep.reset();
  forget_local(local_name);
}

} // namespace detail

namespace {

[[noreturn]] void throw_connect(detail::FabricImpl &f, const Address &remote, int err,
                                const char *step, int timeout_ms) {
  std::string where = " to " + remote.to_string() + " over " + f.provider;
  if (err == FI_ECONNREFUSED)
    throw Error(ErrorKind::Refused,
                "rdmalib: connection" + where +
                    " refused (nobody listens there, or the server"
                    " rejected the request)",
                err);
  if (err == FI_ETIMEDOUT)
    throw Error(ErrorKind::Timeout,
                "rdmalib: connection" + where + " timed out after " + std::to_string(timeout_ms) +
                    " ms (" + step + "); is a server listening there?",
                err);
  throw Error(ErrorKind::Backend,
              "rdmalib: connection" + where + " failed (" + step + "): " + lf::fi_error_text(err),
              err);
}

/// Wait on a connection's event queue for FI_CONNECTED, copying the peer's
/// private data. Errors carry the step and the address.
void wait_connected(detail::ConnectionImpl &c, const Address &remote, const detail::Deadline &dl,
                    int timeout_ms, const char *step) {
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + lf::kMaxPrivateData];
  for (;;) {
    int slice = dl.remaining_ms(100);
    if (slice == 0)
      throw_connect(*c.fab, remote, FI_ETIMEDOUT, step, timeout_ms);
    uint32_t event = 0;
    ssize_t r = c.read_event(event, buf, sizeof buf, slice);
    if (r == -FI_EAGAIN || r == -FI_ETIMEDOUT)
      continue;
    if (r == -FI_EAVAIL) {
      fi_eq_err_entry err{};
      fi_eq_readerr(c.eq.get(), &err, 0);
      int code = err.err ? err.err : FI_ECONNREFUSED;
      // A rejected connect shows as ECONNREFUSED on every provider here.
      throw_connect(*c.fab, remote, code, step, timeout_ms);
    }
    if (r < 0)
      throw_connect(*c.fab, remote, static_cast<int>(-r), step, timeout_ms);
    if (event == FI_CONNECTED) {
      size_t plen = static_cast<size_t>(r) > sizeof(fi_eq_cm_entry)
                        ? static_cast<size_t>(r) - sizeof(fi_eq_cm_entry)
                        : 0;
      auto *entry = reinterpret_cast<fi_eq_cm_entry *>(buf);
      c.peer_private.assign(entry->data, entry->data + plen);
      return;
    }
    if (event == FI_SHUTDOWN)
      throw_connect(*c.fab, remote, FI_ECONNRESET, step, timeout_ms);
  }
}

} // namespace

namespace detail {

void ConnectionImpl::attach(MemoryRegionImpl &m) {
  if (!fab->mr_endpoint)
    return;
  if (m.enabled)
    throw Error(ErrorKind::Unsupported,
                "rdmalib: provider " + fab->provider +
                    " binds memory to one endpoint; this region is already attached");
  int ret = fi_mr_bind(m.mr.get(), &ep->fid, 0);
  if (!ret)
    ret = fi_mr_enable(m.mr.get());
  if (ret)
    lf::throw_fi("binding a memory region to the endpoint", ret);
  m.enabled = true;
}

void ConnectionImpl::connect(const Address &remote, const void *private_data, size_t private_len,
                             const Deadline &dl) {
  FabricImpl &f = *fab;
  ConnectionImpl *c = this;
  if (f.rdm && f.shared)
    join_shared();
  const bool adopted = f.rdm && !sh && adopt_prepared();
  if (!adopted)
    open_queues(!f.rdm);
  int timeout_ms = dl.remaining_ms();
  if (f.rdm && f.quirks.send_to_absent_name_never_completes &&
      (!remote.opaque() || remote.format == f.format_token())) {
    // A string name (opaque or derived from host and port) is the name of a
    // file in /dev/shm while its endpoint exists.
    const char *text = reinterpret_cast<const char *>(remote.name.data());
    const std::string shm_name = remote.opaque()
                                     ? std::string(text, strnlen(text, remote.name.size()))
                                     : lf::named_endpoint(remote.host, remote.port);
    if (lf::named_endpoint_absent(shm_name))
      throw Error(ErrorKind::Refused,
                  "rdmalib: nothing listens at " + remote.to_string() +
                      " over shm (no shared-memory endpoint /dev/shm/" + shm_name +
                      "); if the server listens with another provider (its start-up line names "
                      "it), use a device entry with that provider",
                  FI_ECONNREFUSED);
    std::string why;
    if (f.quirks.closed_names_stay_local &&
        !lf::refresh_retired_name(lf::shm_region_name(shm_name.data(), shm_name.size()), why))
      throw Error(ErrorKind::Unsupported,
                  "rdmalib: cannot connect to " + remote.to_string() +
                      " over shm from this process, which had a listener there before: " + why +
                      " (docs/BACKEND-BUGS.md); connect from another process");
  }
  std::vector<uint8_t> raw = f.raw_address(remote);

  if (!f.rdm) {
    lf::InfoPtr info = f.endpoint_info(nullptr);
    // verbs resolves the route when the active endpoint is created, so the
    // destination must be in the info given to fi_endpoint (tcp and sockets
    // only need it at fi_connect).
    info->dest_addr = malloc(raw.size());
    if (!info->dest_addr)
      throw Error(ErrorKind::Backend, "rdmalib: out of memory");
    std::memcpy(info->dest_addr, raw.data(), raw.size());
    info->dest_addrlen = raw.size();
    c->create_endpoint(info.get());
    int ret = fi_connect(c->ep.get(), raw.data(), private_data, private_len);
    if (ret)
      throw_connect(f, remote, -ret, "fi_connect", timeout_ms);
    wait_connected(*c, remote, dl, timeout_ms, "waiting for the server to accept");
  } else {
    if (!c->sh) {
      if (!adopted) {
        lf::InfoPtr info = f.endpoint_info(nullptr);
        c->create_endpoint(info.get());
      }
      c->guard_connreqs();
    }
    fi_addr_t listener = FI_ADDR_UNSPEC;
    int ret = 1, aerr = 0;
    if (c->sh)
      ret = c->sh->add_peer(raw.data(), raw.size(), listener, aerr) ? 1 : -aerr;
    else
      ret = fi_av_insert(c->av.get(), raw.data(), 1, &listener, 0, nullptr);
    if (ret != 1)
      throw_connect(f, remote, ret < 0 ? -ret : FI_ECONNREFUSED,
                    "inserting the server address (is a server listening there?)", timeout_ms);
    // The listener's entry goes when the handshake ends, however it ends.
    struct DropListener {
      ConnectionImpl *c;
      fi_addr_t a;
      ~DropListener() {
        if (c->sh)
          c->sh->release_peer(a);
        else if (c->av)
          fi_av_remove(c->av.get(), &a, 1, 0);
      }
    } drop_listener{c, listener};

    // Receive for the answer first, then HELLO.
    lf::OpSlot *rs = c->take_slot(0, OpKind::Recv, true);
    uint8_t *rbuf = c->ctl_recv(0);
    ssize_t r;
    do {
      r = c->post_receive(rbuf, sizeof(lf::HandshakeMessage), c->ctl_desc(), rs, 0);
      if (r == -FI_EAGAIN)
        c->drive();
    } while (r == -FI_EAGAIN && !dl.passed());
    if (r)
      throw_connect(f, remote, static_cast<int>(-r), "posting the handshake receive", timeout_ms);

    lf::HandshakeMessage hello{};
    hello.magic = lf::kHandshakeMagic;
    hello.version = lf::kHandshakeVersion;
    hello.type = lf::HsHello;
    std::random_device rd;
    hello.nonce = (static_cast<uint64_t>(rd()) << 32) | rd();
    // Known before the answer: the server's goodbye may follow the answer
    // at once, and is routed to this link by whichever thread reads it.
    if (c->sh) {
      std::lock_guard<std::mutex> g(c->sh->m);
      c->nonce = hello.nonce;
    }
    size_t alen = sizeof hello.address;
    ret = fi_getname(&c->ep->fid, hello.address, &alen);
    if (ret)
      throw_connect(f, remote, -ret, "fi_getname", timeout_ms);
    hello.address_len = static_cast<uint32_t>(alen);
    hello.link = c->link_id;
    hello.private_len = static_cast<uint32_t>(private_len);
    lf::self_process(hello.pid, hello.pid_namespace);
    if (private_len)
      std::memcpy(hello.private_data, private_data, private_len);
    uint8_t *sbuf = c->ctl_send(0);
    std::memcpy(sbuf, &hello, sizeof hello);
    lf::OpSlot *ss = c->take_slot(0, OpKind::Send, true);
    // With a doorbell, the listener sleeps until rung. The first send to it
    // can only go once the listener's progress has mapped this endpoint
    // (shm's "map my region" command, queued by the first attempt): ring
    // while the send waits for that, and once more when it went.
    std::chrono::steady_clock::time_point rung{};
    // Quirks::connreq_names_vanished_peer: the first send queues a "map my
    // region" command in the listener naming this endpoint's region. shm's
    // SIGTERM and SIGINT handlers remove the process's regions and let it
    // run on (an executor ended during its setup): a command naming a region
    // that is already gone when it is queued can reach the listener's
    // progress before its guard sees it, and crash the listener. Such a
    // process connects nowhere.
    if (f.quirks.connreq_names_vanished_peer &&
        lf::named_endpoint_absent(lf::shm_region_name(hello.address, hello.address_len))) {
      c->put_slot(ss);
      throw Error(ErrorKind::Closed,
                  "rdmalib: not connecting to " + remote.to_string() +
                      ": this process's shared-memory endpoint is gone (shm removes a process's "
                      "regions when it receives SIGTERM or SIGINT)");
    }
    do {
      r = fi_send(c->ep.get(), sbuf, sizeof hello, c->ctl_desc(), listener, ss);
      if (r == -FI_EAGAIN) {
        if (f.doorbell() &&
            std::chrono::steady_clock::now() - rung > std::chrono::milliseconds(1)) {
          lf::ring_doorbell(raw.data(), raw.size());
          rung = std::chrono::steady_clock::now();
        }
        c->drive();
      }
    } while (r == -FI_EAGAIN && !dl.passed());
    // Without a listener, RDM providers either fail the send at once (sockets:
    // ENOENT, RxM: ECONNREFUSED) or keep it queued (shm, RxM retrying): both
    // mean nobody answers at that address.
    if (r == -FI_EAGAIN)
      throw_connect(f, remote, FI_ETIMEDOUT, "sending the handshake", timeout_ms);
    if (r == -FI_ENOENT || r == -FI_ECONNREFUSED || r == -FI_EHOSTUNREACH)
      throw_connect(f, remote, FI_ECONNREFUSED, "sending the handshake", timeout_ms);
    if (r)
      throw_connect(f, remote, static_cast<int>(-r), "sending the handshake", timeout_ms);
    if (f.doorbell())
      lf::ring_doorbell(raw.data(), raw.size());

    // The send's completion is drained by wait_internal; an error there (a
    // refused TCP connection under RxM, say) ends the attempt at once.
    fi_cq_data_entry e{};
    int err = 0;
    for (;;) {
      if (!c->wait_internal(Queue::Recv, e, dl, err))
        throw_connect(f, remote, err == FI_ENOENT || err == FI_EHOSTUNREACH ? FI_ECONNREFUSED : err,
                      "waiting for the server's handshake answer", timeout_ms);
      lf::HandshakeMessage ans;
      std::memcpy(&ans, rbuf, sizeof ans);
      if (ans.magic != lf::kHandshakeMagic || ans.nonce != hello.nonce) {
        // Not ours (a stale answer): listen again.
        rs = c->take_slot(0, OpKind::Recv, true);
        c->post_receive(rbuf, sizeof(lf::HandshakeMessage), c->ctl_desc(), rs, 0);
        continue;
      }
      if (ans.type == lf::HsReject && ans.version != lf::kHandshakeVersion)
        throw Error(ErrorKind::Backend, "rdmalib: the server at " + remote.to_string() +
                                            " speaks handshake version " +
                                            std::to_string(ans.version) + ", this rdmalib " +
                                            std::to_string(lf::kHandshakeVersion) +
                                            ": run the same rFaaS version on both ends");
      if (ans.type == lf::HsReject)
        throw_connect(f, remote, FI_ECONNREFUSED, "handshake", timeout_ms);
      if (ans.type != lf::HsAccept || ans.address_len > sizeof ans.address ||
          ans.private_len > sizeof ans.private_data)
        throw Error(ErrorKind::Backend,
                    "rdmalib: malformed handshake answer from " + remote.to_string());
      if ((ans.link != 0) != (c->sh != nullptr))
        throw Error(ErrorKind::Backend,
                    "rdmalib: the server at " + remote.to_string() +
                        (c->sh ? " gives each connection its own endpoint"
                               : " puts connections on one shared endpoint") +
                        " and this process does not (RDMALIB_DISABLE_CAPS=shared_endpoint must be "
                        "the same on both sides)");
      c->peer_link = ans.link;
      if (c->sh)
        ret = c->sh->add_peer(ans.address, ans.address_len, c->peer, aerr) ? 1 : -aerr;
      else
        ret = fi_av_insert(c->av.get(), ans.address, 1, &c->peer, 0, nullptr);
      if (ret != 1)
        throw_connect(f, remote, ret < 0 ? -ret : FI_EINVAL,
                      "inserting the server's connection endpoint", timeout_ms);
      c->set_peer(ans.address, ans.address_len, ans.pid, ans.pid_namespace);
      c->peer_private.assign(ans.private_data, ans.private_data + ans.private_len);
      break;
    }
    if (c->sh)
      c->confirm_answer(hello.nonce, dl);
    // The server's link endpoint sent its command before the answer could
    // arrive, and no other peer writes to this endpoint.
    c->connreq_guard.reset();
  }
}

} // namespace detail

} // namespace rdmalib
