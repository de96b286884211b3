// The slow and rare paths of the libfabric backend's data path: errors,
// progress for a post that found no room, the notifications an emulated
// write-with-immediate still owes, a peer's end, sleeping for completions.
// The fast path is in data_path.hpp. Nothing here allocates or throws.
#include <algorithm>
#include <cstdio>
#include <thread>

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "backend.hpp"
#include "common/logging.hpp"
#include <spdlog/spdlog.h>

namespace rdmalib::detail {

namespace {

Status status_of(ssize_t ret) noexcept {
  switch (-ret) {
  case FI_ENOTCONN:
  case FI_ECONNRESET:
  case FI_ECONNABORTED:
  case EPIPE:
  case FI_ESHUTDOWN:
    return Status::Closed;
  case FI_EINVAL:
  case FI_EMSGSIZE:
    return Status::InvalidArgument;
  case FI_EOPNOTSUPP:
  case FI_ENOSYS:
    return Status::Unsupported;
  case FI_ECANCELED:
    return Status::Cancelled;
  case FI_ETIMEDOUT:
    return Status::Timeout;
  default:
    return Status::Error;
  }
}

/// Read up to a batch of completions of `q` into the link's stash.
bool reap_into_stash(ConnectionImpl &c, Queue q) noexcept {
  Completion tmp[16];
  size_t n = c.reap(q, tmp, 16);
  CompletionStash &st = c.stash(q);
  c.detour = c.detour || n;
  for (size_t i = 0; i < n; ++i)
    if (!st.push(tmp[i])) {
      c.set_error("out of memory keeping the completions of a full queue");
      return false;
    }
  return n > 0;
}

} // namespace

Status ConnectionImpl::post_failed(ssize_t ret, const char *what) noexcept {
  set_error("%s: %s (%d)", what, fi_strerror(static_cast<int>(-ret)), static_cast<int>(-ret));
  Status st = status_of(ret);
  if (st == Status::Closed)
    peer_closed = true;
  return st;
}

ssize_t ConnectionImpl::post_notify(uint32_t imm, uint32_t length, uint16_t type) noexcept {
  const ControlMessage m = control_message(static_cast<ControlType>(type), imm, length);
  if (fab->inject_size >= sizeof m) {
    // Injected: copied at once, no completion to reap.
    if (sh)
      return fi_tinject(ep.get(), &m, sizeof m, peer, pool_tag());
    return fi_inject(ep.get(), &m, sizeof m, peer);
  }
  lf::OpSlot *s = take_slot(0, OpKind::Send, true);
  if (!s)
    return -FI_EAGAIN;
  uint8_t *buf = ctl_send(ctl_send_next++ % kCtlSendSlots);
  std::memcpy(buf, &m, sizeof m);
  ssize_t ret = ctl_send_to(buf, sizeof m, peer, sh ? pool_tag() : peer_link, s);
  if (ret)
    put_slot(s);
  return ret;
}

bool ConnectionImpl::flush_pending() noexcept {
  while (pending_count) {
    const lf::PendingNotify &p = pending[pending_head];
    ssize_t ret = post_notify(p.imm, p.length, p.type);
    if (ret == -FI_EAGAIN)
      return false;
    if (ret) {
      post_failed(ret, p.type == static_cast<uint16_t>(ControlType::Notify)
                           ? "write_imm (notification)"
                           : "send (announcement of a large message)");
      // The target will never learn of that write: the link is unusable.
      peer_closed = true;
      ended_here = true;
    }
    pending_head = (pending_head + 1) % pending.size();
    --pending_count;
  }
  return true;
}

void ConnectionImpl::make_room(Queue q) noexcept {
  // Reading a CQ is what moves data on manual-progress providers; what is
  // read here waits in the stashes for the next poll(), so nothing is lost.
  sweep_connreqs();
  if (pending_count)
    flush_pending();
  bool got = reap_into_stash(*this, q);
  got = reap_into_stash(*this, q == Queue::Send ? Queue::Recv : Queue::Send) || got;
  if (!got)
    drive(); // a zero-count read still drives progress
}

size_t ConnectionImpl::reap_more(Queue q, fid_cq *cq, ssize_t r, Completion *out,
                                 size_t max) noexcept {
  if (r == -FI_EAVAIL) {
    out[0] = convert_error(q, cq);
    return 1;
  }
  if (r <= 0)
    return 0;
  // The first batch held only internal completions: read again, a few times
  // at most.
  size_t n = 0;
  for (int round = 1; n < max && round < 4; ++round) {
    fi_cq_data_entry buf[16];
    size_t want = max - n < 16 ? max - n : 16;
    r = fi_cq_read(cq, buf, want);
    if (r > 0) {
      n += convert(q, buf, static_cast<size_t>(r), out + n);
      if (n)
        break;
      continue;
    }
    if (r == -FI_EAVAIL)
      out[n++] = convert_error(q, cq);
    break;
  }
  return n;
}

bool ConnectionImpl::check_peer() noexcept {
  if (peer_closed)
    return true;
  if (peer_pid && peer_process_gone())
    return true;
  if (check_events()) {
    peer_closed = true;
    return true;
  }
  return false;
}

} // namespace rdmalib::detail

namespace {

/// The descriptors behind one wait object (or a queue's): false when it has
/// none (FI_WAIT_YIELD, FI_WAIT_MUTEX_COND, a provider that cannot say).
bool wait_descriptors(fid_t f, std::vector<std::pair<int, uint32_t>> &out, bool &pollfd,
                      uint64_t &change) noexcept {
  fi_wait_obj obj = FI_WAIT_NONE;
  if (fi_control(f, FI_GETWAITOBJ, &obj) != 0)
    return false;
  if (obj == FI_WAIT_FD) {
    int fd = -1;
    if (fi_control(f, FI_GETWAIT, &fd) != 0 || fd < 0)
      return false;
    out.emplace_back(fd, EPOLLIN);
    return true;
  }
  if (obj != FI_WAIT_POLLFD)
    return false;
  pollfd = true;
  struct pollfd fds[32];
  fi_wait_pollfd set{};
  set.nfds = sizeof fds / sizeof fds[0];
  set.fd = fds;
  if (fi_control(f, FI_GETWAIT, &set) != 0)
    return false;
  change = set.change_index;
  for (size_t i = 0; i < set.nfds; ++i) {
    uint32_t ev = 0;
    if (fds[i].events & POLLIN)
      ev |= EPOLLIN;
    if (fds[i].events & POLLOUT)
      ev |= EPOLLOUT;
    out.emplace_back(fds[i].fd, ev ? ev : EPOLLIN);
  }
  return true;
}

} // namespace

namespace rdmalib::lf {

void WaitEpoll::reset() noexcept {
  if (fd >= 0)
    ::close(fd);
  fd = -2;
  added.clear();
  pollfd = false;
  change_index = 0;
  // Descriptor numbers are reused once the link's objects close.
  muted.clear();
  stale_fd = -1;
  stale_count = 0;
  clean_arms = 0;
}

int WaitEpoll::build(fid_t const *fids, size_t n) noexcept {
  if (fd != -2)
    return fd;
  fd = -1;
  std::vector<std::pair<int, uint32_t>> want;
  for (size_t i = 0; i < n; ++i)
    if (!wait_descriptors(fids[i], want, pollfd, change_index))
      return -1;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    return -1;
  for (const auto &[d, ev] : want) {
    epoll_event e{};
    e.events = ev;
    e.data.fd = d;
    // The same descriptor behind two queues (one wait set) is added once.
    if (epoll_ctl(ep, EPOLL_CTL_ADD, d, &e) != 0 && errno != EEXIST) {
      ::close(ep);
      return -1;
    }
  }
  added = std::move(want);
  fd = ep;
  return fd;
}

bool WaitEpoll::refresh(fid_t wait) noexcept {
  if (fd < 0 || !pollfd)
    return fd >= 0;
  std::vector<std::pair<int, uint32_t>> now;
  bool is_pollfd = false;
  uint64_t change = 0;
  if (!wait_descriptors(wait, now, is_pollfd, change))
    return false;
  if (change == change_index)
    return true;
  for (const auto &[d, ev] : added)
    epoll_ctl(fd, EPOLL_CTL_DEL, d, nullptr); // a closed one is gone already
  for (const auto &[d, ev] : now) {
    if (std::find(muted.begin(), muted.end(), d) != muted.end())
      continue;
    epoll_event e{};
    e.events = ev;
    e.data.fd = d;
    if (epoll_ctl(fd, EPOLL_CTL_ADD, d, &e) != 0 && errno != EEXIST)
      return false;
  }
  added = std::move(now);
  change_index = change;
  return true;
}

// The receive pool of a shared endpoint (see kPoolTag).
void SharedRdm::repost(lf::OpSlot *p) noexcept {
  ssize_t r =
      fi_trecv(ep.get(), p->buf, kPoolMessage, p->desc, FI_ADDR_UNSPEC, kPoolTag, ~kPoolTag, p);
  if (r == 0)
    return;
  // No room at the provider yet (or an endpoint going away): the next read
  // of the queue tries again.
  try {
    unposted.push_back(p);
  } catch (...) {
  }
}

void WaitEpoll::check_stale() noexcept {
  // tcp 1.17 puts a socket pair of its event queue's progress engine into a
  // link's wait set, raises it when the queue opens, and resets it only
  // from a progress thread that manual progress never starts: the set's
  // descriptor stayed readable for the link's whole life, and a loop
  // sleeping on it spun (an idle resource manager with one node used a
  // quarter of a core). A real signal is consumed by the next progress
  // pass, so it is not readable again at the next quiet arm; a connection's
  // own socket (not AF_UNIX) is never left out.
  if (fd < 0 || clean_arms >= kCleanArms)
    return;
  epoll_event ev[4];
  int n = epoll_wait(fd, ev, 4, 0);
  if (n <= 0) {
    ++clean_arms;
    stale_fd = -1;
    stale_count = 0;
    return;
  }
  const int d = ev[0].data.fd;
  int domain = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(d, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX) {
    stale_fd = -1;
    stale_count = 0;
    return;
  }
  if (d != stale_fd) {
    stale_fd = d;
    stale_count = 0;
  }
  if (++stale_count < kStaleArms)
    return;
  epoll_ctl(fd, EPOLL_CTL_DEL, d, nullptr);
  muted.push_back(d);
  stale_fd = -1;
  stale_count = 0;
  rdmalib::logger().debug("rdmalib: descriptor {} stays readable with every queue empty; no "
                          "longer waited on",
                          d);
}

} // namespace rdmalib::lf

namespace rdmalib::detail {

int ConnectionImpl::wait_fd() noexcept {
  if (!ep)
    return -1;
  if (sh) {
    std::lock_guard<std::mutex> g(sh->m);
    fid_t fids[2] = {&sh->txcq->fid, &sh->rxcq->fid};
    return sh->wait.build(fids, 2);
  }
  if (waitset) {
    fid_t fids[1] = {&waitset->fid};
    return wait.build(fids, 1);
  }
  fid_t fids[3] = {&txcq->fid, &rxcq->fid, eq ? &eq->fid : nullptr};
  return wait.build(fids, eq ? 3 : 2);
}

bool ConnectionImpl::arm() noexcept {
  if (!ep || peer_dead)
    return false;
  // Work the provider is owed only moves when polled: a notification
  // waiting for room, a handshake answer posted again, transmits held for a
  // confirmation that came (one still awaited wakes the descriptor).
  if (pending_count || answer_pending || answer_failed || (hold_tx && !awaiting_confirm))
    return false;
  if (sh) {
    std::lock_guard<std::mutex> g(sh->m);
    // Completions another link read for this one sit in its inbox.
    if (!inbox[0].empty() || !inbox[1].empty() || sh->wait.fd < 0)
      return false;
    fid_t fids[2] = {&sh->txcq->fid, &sh->rxcq->fid};
    return fi_trywait(fab->fabric.get(), fids, 2) == 0;
  }
  if (waitset) {
    if (wait.fd < 0 || !wait.refresh(&waitset->fid))
      return false;
    fid_t fids[1] = {&waitset->fid};
    if (fi_trywait(fab->fabric.get(), fids, 1) != 0)
      return false;
    wait.check_stale();
    return true;
  }
  if (wait.fd < 0)
    return false;
  fid_t fids[3] = {&txcq->fid, &rxcq->fid, eq ? &eq->fid : nullptr};
  if (fi_trywait(fab->fabric.get(), fids, eq ? 3 : 2) != 0)
    return false;
  wait.check_stale();
  return true;
}

size_t ConnectionImpl::block(Queue q, Completion *out, size_t max, int slice_ms) noexcept {
  if (peer_dead)
    return 0;
  if (sh)
    return block_shared(q, out, max, slice_ms);
  if (waitset)
    return block_on_wait_set(q, out, max, slice_ms);
  fid_cq *cq = q == Queue::Send ? txcq.get() : rxcq.get();
  fi_cq_data_entry buf[16];
  size_t want = max < 16 ? max : 16;
  ssize_t r = fi_cq_sread(cq, buf, want, nullptr, slice_ms > 0 ? slice_ms : 1);
  if (r > 0)
    return convert(q, buf, static_cast<size_t>(r), out);
  if (r == -FI_EAVAIL) {
    out[0] = convert_error(q, cq);
    return 1;
  }
  return 0;
}

size_t ConnectionImpl::block_on_wait_set(Queue q, Completion *out, size_t max,
                                         int slice_ms) noexcept {
  fid_cq *cq = q == Queue::Send ? txcq.get() : rxcq.get();
  const Queue other = q == Queue::Send ? Queue::Recv : Queue::Send;
  const Deadline dl(std::chrono::milliseconds(slice_ms > 0 ? slice_ms : 1));
  fi_cq_data_entry buf[16];
  size_t want = max < 16 ? max : 16;
  for (;;) {
    ssize_t r = fi_cq_read(cq, buf, want);
    if (r > 0)
      return convert(q, buf, static_cast<size_t>(r), out);
    if (r == -FI_EAVAIL) {
      out[0] = convert_error(q, cq);
      return 1;
    }
    // The wait set ends a sleep at once while any of its queues holds an
    // entry: the other queue's completions go to its stash (the next poll
    // of that queue returns them) and the event queue is read, so that the
    // sleep below lasts until something for `q` (or the peer's end) comes.
    reap_into_stash(*this, other);
    if (check_peer())
      return 0;
    int left = dl.remaining_ms();
    if (left <= 0)
      return 0;
    int w = fi_wait(waitset.get(), left);
    if (w != 0 && w != -FI_ETIMEDOUT && w != -FI_EAGAIN && w != -FI_EINTR)
      return 0;
  }
}

ssize_t ConnectionImpl::read_event(uint32_t &event, void *buf, size_t len, int ms) noexcept {
  if (!waitset)
    return fi_eq_sread(eq.get(), &event, buf, len, ms, 0);
  const Deadline dl(std::chrono::milliseconds(ms > 0 ? ms : 1));
  for (;;) {
    // fi_eq_read also drives the provider's connection manager.
    ssize_t r = fi_eq_read(eq.get(), &event, buf, len, 0);
    if (r != -FI_EAGAIN)
      return r;
    int left = dl.remaining_ms();
    if (left <= 0)
      return -FI_EAGAIN;
    int w = fi_wait(waitset.get(), left);
    if (w != 0 && w != -FI_ETIMEDOUT && w != -FI_EAGAIN && w != -FI_EINTR)
      return w;
  }
}

bool ConnectionImpl::check_events() noexcept {
  if (!eq)
    return false;
  uint32_t event = 0;
  alignas(fi_eq_cm_entry) uint8_t buf[sizeof(fi_eq_cm_entry) + 64];
  ssize_t r = fi_eq_read(eq.get(), &event, buf, sizeof buf, 0);
  if (r >= 0 && event == FI_SHUTDOWN) {
    set_error("peer %s closed the connection", remote.to_string().c_str());
    return true;
  }
  if (r == -FI_EAVAIL) {
    fi_eq_err_entry err{};
    fi_eq_readerr(eq.get(), &err, 0);
    set_error("connection event error: %s", fi_strerror(err.err));
    return true;
  }
  return false;
}
Completion ConnectionImpl::convert_error(Queue q, fid_cq *cq) noexcept {
  fi_cq_err_entry err{};
  if (fi_cq_readerr(cq, &err, 0) < 0) {
    Completion c;
    c.kind = q == Queue::Recv ? OpKind::Recv : OpKind::Send;
    c.status = Status::Error;
    set_error("fi_cq_readerr failed");
    return c;
  }
  char prov[160] = {0};
  const char *ptext = fi_cq_strerror(cq, err.prov_errno, err.err_data, prov, sizeof prov);
  return convert_error_entry(q, err, ptext);
}

Completion ConnectionImpl::convert_error_entry(Queue q, const fi_cq_err_entry &err,
                                               const char *ptext) noexcept {
  Completion c;
  c.kind = q == Queue::Recv ? OpKind::Recv : OpKind::Send;
  c.status = Status::Error;
  auto *s = static_cast<lf::OpSlot *>(err.op_context);
  size_t cap = s ? s->cap : 0;
  if (s) {
    c.context = s->user;
    c.kind = s->kind;
    put_slot(s);
  }
  c.status = status_of(-static_cast<ssize_t>(err.err));
  set_error("%s failed: %s (%d); provider: %s", q == Queue::Recv ? "receive" : "operation",
            fi_strerror(err.err), err.err, ptext ? ptext : "");
  // A failed receive ends the link on every provider (operations.hpp): the
  // message that caused it is lost, and the provider may not be able to
  // deliver anything after it in order (a truncated message on tcp, say).
  if (c.status == Status::Closed || (q == Queue::Recv && c.kind == OpKind::Recv)) {
    // shm fails a receive that reached RecvOverflow's guard page with EIO.
    if (err.err == FI_ETRUNC || (err.err == FI_EIO && fab->overflow.guard)) {
      set_error("receive failed: the peer sent a message longer than the posted receive of %zu "
                "bytes (message truncated; %s); the link is closed",
                cap, fi_strerror(err.err));
      c.status = Status::Error;
      ended_here = !peer_closed;
    }
    peer_closed = true;
  }
  return c;
}
bool ConnectionImpl::retry_answer() noexcept {
  lf::OpSlot *s = take_slot(0, OpKind::Send, true);
  if (!s)
    return true; // every slot busy: try again later
  ssize_t r = ctl_send_to(answer_buf, sizeof(lf::HandshakeMessage), peer, peer_link, s);
  if (r == 0) {
    answer_pending = false;
    answer_slot = s;
    return true;
  }
  put_slot(s);
  if (r == -FI_EAGAIN && !(peer_pid && peer_process_gone()) &&
      std::chrono::steady_clock::now() < answer_deadline)
    return true;
  answer_pending = false;
  set_error("the handshake answer to %s could not be sent in time: %s", remote.to_string().c_str(),
            r == -FI_EAGAIN ? "the provider kept refusing it (EAGAIN)"
                            : fi_strerror(static_cast<int>(-r)));
  peer_closed = true;
  ended_here = true;
  answer_failed = true;
  detour = true;
  if (sh)
    list_owed();
  return false;
}

// ---- the shared endpoint --------------------------------------------------

void ConnectionImpl::expect_confirm(uint64_t nonce, std::chrono::steady_clock::time_point until) {
  lf::OpSlot *s = take_slot(0, OpKind::Recv, true);
  if (!s)
    throw Error(ErrorKind::Backend, "rdmalib: no slot to receive the handshake confirmation");
  s->buf = ctl_recv(0);
  s->cap = sizeof(lf::HandshakeMessage);
  s->confirm = true;
  confirm_slot = s;
  confirm_deadline = until;
  confirm_wait = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
  // Tagged with this link's id alone, as the client's answer receive, and
  // directed at the peer: a message from anyone else does not match it.
  ssize_t r;
  Deadline dl(std::chrono::milliseconds(1000));
  do {
    r = fi_trecv(ep.get(), s->buf, s->cap, ctl_desc(), peer, link_id, 0, s);
    if (r == -FI_EAGAIN)
      drive();
  } while (r == -FI_EAGAIN && !dl.passed());
  if (r) {
    confirm_slot = nullptr;
    s->confirm = false;
    put_slot(s);
    lf::throw_fi("posting the receive of the handshake confirmation", static_cast<int>(r));
  }
  awaiting_confirm = true;
  hold_tx = true;
  detour = true;
  std::lock_guard<std::mutex> g(sh->m);
  // Read by whichever thread routes the peer's goodbye (peer_goodbye).
  this->nonce = nonce;
  try {
    sh->awaiting.push_back(this);
  } catch (...) {
    // Not named at its deadline: found when next polled.
  }
}

void ConnectionImpl::settled_locked() noexcept {
  awaiting_confirm = false;
  confirm_overdue = false;
  auto &a = sh->awaiting;
  a.erase(std::remove(a.begin(), a.end(), this), a.end());
}

Status ConnectionImpl::check_confirm() noexcept {
  {
    std::lock_guard<std::mutex> g(sh->m);
    if (!confirm_seen && !peer_spoke) {
      // Not while another thread sleeps in the queue (block_shared): it
      // routes what it reads.
      if (!sh->reading[1])
        pull_locked(Queue::Recv);
    }
    if (!confirm_seen && peer_spoke) {
      // The receive stays posted; its completion, if any, goes to convert.
      confirm_abandoned = true;
      confirm_slot = nullptr;
      settled_locked();
      return Status::Ok;
    }
    if (!confirm_seen) {
      if (std::chrono::steady_clock::now() < confirm_deadline && !peer_closed)
        return Status::Again;
      settled_locked();
      // A legitimate client confirms within a one-way trip of the answer:
      // this one does not follow rdmalib's handshake, or is gone.
      set_error("the peer %s (link %u) did not confirm the handshake within %lld ms of this "
                "side's answer (a client that does not follow rdmalib's handshake, or one that "
                "is gone): the link is closed, and nothing was sent to it",
                remote.to_string().c_str(), link_id, static_cast<long long>(confirm_wait.count()));
      rdmalib::logger().warn("rdmalib: {}", last_error);
      confirm_missed = true;
      peer_closed = true;
      ended_here = true;
      return Status::Closed;
    }
    settled_locked();
  }
  // Seen: the slot is this link's again (no completion of it is outstanding).
  lf::HandshakeMessage m;
  std::memcpy(&m, confirm_slot->buf, sizeof m);
  const int err = confirm_err;
  confirm_slot->confirm = false;
  put_slot(confirm_slot);
  confirm_slot = nullptr;
  if (err || m.magic != lf::kHandshakeMagic || m.type != lf::HsConfirm || m.nonce != nonce) {
    set_error("the handshake confirmation of %s %s", remote.to_string().c_str(),
              err ? fi_strerror(err) : "was malformed");
    confirm_missed = true;
    peer_closed = true;
    ended_here = true;
    return Status::Closed;
  }
  return Status::Ok;
}

bool ConnectionImpl::hold(lf::HeldOp &&op, Status &st) noexcept {
  settle_held();
  if (!usable()) {
    // Settling ended the link (no confirmation by the deadline).
    st = Status::Closed;
    return true;
  }
  if (!hold_tx)
    return false; // confirmed, nothing held before it: posted now
  // Held transmits count against the send depth, as posted ones do.
  if (tx_free.used >= tx_free.limit) {
    st = Status::Again;
    return true;
  }
  try {
    if (op.inline_) {
      const auto *p = static_cast<const uint8_t *>(op.local.ptr);
      op.copy.assign(p, p + op.local.len);
      op.local.ptr = op.copy.data(); // a vector's move keeps its storage
    }
    held.push_back(std::move(op));
  } catch (...) {
    set_error("out of memory holding a transmit until the peer confirms the handshake");
    st = Status::Error;
    return true;
  }
  ++tx_free.used;
  detour = true;
  st = Status::Ok;
  return true;
}

void ConnectionImpl::settle_held() noexcept {
  if (awaiting_confirm) {
    const Status cst = check_confirm();
    if (cst == Status::Again)
      return;
    if (cst != Status::Ok) {
      // The link has ended: what was held never leaves.
      hold_tx = false;
      for (const lf::HeldOp &op : held)
        report_held(op, Status::Closed);
      tx_free.used -= static_cast<uint32_t>(held.size());
      held.clear();
      return;
    }
  }
  replay_held();
}

void ConnectionImpl::replay_held() noexcept {
  // The posts below go to the provider, not back into `held`.
  hold_tx = false;
  while (!held.empty()) {
    lf::HeldOp &op = held.front();
    // The post takes the place in the depth that holding it took.
    --tx_free.used;
    Status st;
    const LocalRef &l = op.local;
    switch (op.kind) {
    case OpKind::Send:
      st = post_send(l, op.ctx, op.inline_);
      break;
    case OpKind::Write:
      st = post_write(l, op.addr, op.key, op.ctx, op.inline_);
      break;
    case OpKind::WriteImm:
      st = op.notify ? post_write_notify(l, op.addr, op.key, op.imm, op.ctx, op.inline_)
                     : post_write_imm(l, op.addr, op.key, op.imm, op.ctx, op.inline_);
      break;
    case OpKind::Read:
      st = post_read(l, op.addr, op.key, op.ctx);
      break;
    default:
      st = post_atomic(op.kind, l, op.addr, op.key, op.operand, op.compare, op.ctx);
      break;
    }
    if (st == Status::Again) {
      // No room at the provider yet: the rest waits, in order, for the
      // next poll or post.
      ++tx_free.used;
      hold_tx = true;
      return;
    }
    if (st != Status::Ok)
      report_held(op, st);
    held.pop_front();
  }
}

void ConnectionImpl::report_held(const lf::HeldOp &op, Status st) noexcept {
  detour = true;
  if (!tx_stash.push(Completion{op.ctx, 0, 0, op.kind, st}))
    set_error("out of memory keeping the completion of a held transmit");
}

void ConnectionImpl::route_locked(Queue q, const lf::RawCompletion &rc) noexcept {
  if (q == Queue::Recv && rc.e.op_context &&
      static_cast<const lf::OpSlot *>(rc.e.op_context)->pool) {
    route_pooled_locked(rc);
    return;
  }
  const uint32_t id = owner_of(q, rc.e);
  ConnectionImpl *owner = this;
  if (id != link_id) {
    auto it = sh->links.find(id);
    // A closed link's late completion: its slots are kept by the fabric.
    if (it == sh->links.end())
      return;
    owner = it->second;
  }
  if (q == Queue::Recv && rc.e.op_context && static_cast<lf::OpSlot *>(rc.e.op_context)->confirm) {
    // The peer's handshake confirmation: its owner reads it (check_confirm),
    // or, when it no longer waits for it, gives the slot back as any
    // internal receive's (convert).
    owner->confirm_seen = true;
    owner->confirm_err = rc.err;
    if (owner->confirm_abandoned) {
      static_cast<lf::OpSlot *>(rc.e.op_context)->confirm = false;
      owner->push_recv_locked(rc);
    }
    return;
  }
  if (q == Queue::Recv) {
    // A large message's receive is directed at the owner's peer; a
    // completion from anyone else means the provider ignored that. (The
    // handshake's own receives come before the peer is known; its answer
    // carries the nonce of the hello.)
    if (!rc.err && (rc.tag & lf::kLargeTag) && rc.src != owner->peer) {
      owner->set_error("a receive completed with a message from a process that is not this "
                       "link's peer");
      if (rc.e.op_context)
        owner->put_slot(static_cast<lf::OpSlot *>(rc.e.op_context));
      return;
    }
    owner->push_recv_locked(rc);
    return;
  }
  try {
    owner->inbox_of(q).push_back(rc);
  } catch (...) {
    owner->set_error("out of memory keeping a completion of the shared queue");
  }
}

void ConnectionImpl::list_owed() noexcept {
  std::lock_guard<std::mutex> g(sh->m);
  if (listed)
    return;
  try {
    sh->ready.push_back(this);
    listed = true;
  } catch (...) {
  }
}

void ConnectionImpl::push_recv_locked(const lf::RawCompletion &rc) noexcept {
  try {
    inbox_of(Queue::Recv).push_back(rc);
    if (!listed) {
      sh->ready.push_back(this);
      listed = true;
    }
  } catch (...) {
    set_error("out of memory keeping a completion of the shared queue");
  }
}

ssize_t ConnectionImpl::read_shared(Queue q, fid_cq *cq, fi_cq_tagged_entry *buf, fi_addr_t *from,
                                    size_t n) noexcept {
  if (q == Queue::Recv)
    return fi_cq_readfrom(cq, buf, n, from);
  for (size_t i = 0; i < n; ++i)
    from[i] = FI_ADDR_NOTAVAIL;
  return fi_cq_read(cq, buf, n);
}

size_t ConnectionImpl::pull_locked(Queue q) noexcept {
  lf::SharedRdm &S = *sh;
  fid_cq *cq = q == Queue::Send ? S.txcq.get() : S.rxcq.get();
  fi_cq_tagged_entry buf[16];
  fi_addr_t from[16];
  ssize_t r = read_shared(q, cq, buf, from, 16);
  if (r > 0) {
    for (ssize_t i = 0; i < r; ++i)
      route_locked(q, lf::RawCompletion::from(buf[i], from[i]));
    return static_cast<size_t>(r);
  }
  if (r != -FI_EAVAIL)
    return 0;
  fi_cq_err_entry ee{};
  if (fi_cq_readerr(cq, &ee, 0) < 0)
    return 0;
  route_locked(q, lf::RawCompletion::failed(ee));
  return 1;
}

size_t ConnectionImpl::convert_raw(Queue q, const lf::RawCompletion &rc, Completion *out) noexcept {
  if (!rc.err)
    return convert(q, &rc.e, 1, out);
  fi_cq_err_entry ee{};
  ee.op_context = rc.e.op_context;
  ee.flags = rc.e.flags;
  ee.len = rc.e.len;
  ee.data = rc.e.data;
  ee.err = rc.err;
  ee.prov_errno = rc.prov_errno;
  out[0] = convert_error_entry(q, ee, "");
  return 1;
}

size_t ConnectionImpl::reap_shared(Queue q, Completion *out, size_t max) noexcept {
  lf::SharedRdm &S = *sh;
  std::lock_guard<std::mutex> g(S.m);
  auto &box = inbox_of(q);
  size_t n = 0;
  while (n < max && !box.empty()) {
    lf::RawCompletion rc = box.front();
    box.pop_front();
    n += convert_raw(q, rc, out + n);
  }
  // A thread asleep on the queue reads it and hands out what it finds.
  if (n || S.reading[q == Queue::Recv])
    return n;
  fid_cq *cq = q == Queue::Send ? S.txcq.get() : S.rxcq.get();
  // As in reap(): another read only when a batch held nothing for the caller.
  // Every read takes a whole batch, whatever the caller wants: each
  // fi_cq_read is a progress pass of the provider, which takes in every
  // message its sockets hold, and a pass that handed out one completion
  // (the control channels poll one at a time) let the links of a busy
  // endpoint take in far more than they read. The pool's receives were then
  // used up and the rest waited as RxM's unexpected messages, each holding
  // one of its receive buffers (a resource manager of 10,000 nodes grew by
  // gigabytes of them, and every request waited behind that backlog). What
  // the caller did not ask for goes to its inbox, behind what is there.
  for (int round = 0; n < max && round < 4; ++round) {
    fi_cq_tagged_entry buf[16];
    fi_addr_t from[16];
    ssize_t r = read_shared(q, cq, buf, from, 16);
    if (r > 0) {
      for (ssize_t i = 0; i < r; ++i) {
        lf::RawCompletion rc = lf::RawCompletion::from(buf[i], from[i]);
        const auto *s = static_cast<const lf::OpSlot *>(rc.e.op_context);
        // Straight to the caller, while it wants more and nothing of this
        // batch waits in its inbox before them: this link's sends, and on the
        // receive side its write-with-immediate notifications (no context, no
        // source to check). Its own receives go through route_locked, which
        // checks a large message's sender; a message of the pool may be this
        // link's.
        const bool direct = q == Queue::Send ? !(s && s->pool) : !s;
        if (n < max && box.empty() && owner_of(q, rc.e) == link_id && direct)
          n += convert(q, &rc.e, 1, out + n);
        else
          route_locked(q, rc);
      }
      while (n < max && !box.empty()) {
        lf::RawCompletion rc = box.front();
        box.pop_front();
        n += convert_raw(q, rc, out + n);
      }
      if (n)
        break;
      continue;
    }
    if (r == -FI_EAVAIL) {
      fi_cq_err_entry ee{};
      if (fi_cq_readerr(cq, &ee, 0) < 0)
        break;
      lf::RawCompletion rc = lf::RawCompletion::failed(ee);
      if (owner_of(q, rc.e) == link_id) {
        char prov[160] = {0};
        const char *ptext = fi_cq_strerror(cq, ee.prov_errno, ee.err_data, prov, sizeof prov);
        ee.err = rc.err;
        out[n++] = convert_error_entry(q, ee, ptext ? ptext : "");
        break;
      }
      route_locked(q, rc);
      continue;
    }
    break;
  }
  return n;
}

size_t ConnectionImpl::block_shared(Queue q, Completion *out, size_t max, int slice_ms) noexcept {
  lf::SharedRdm &S = *sh;
  // Held transmits go when a poll finds the confirmation, which arrives on
  // the receive queue: a sleep on the send queue would not end for it.
  if (hold_tx)
    slice_ms = 1;
  const int qi = q == Queue::Recv;
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(slice_ms > 0 ? slice_ms : 1);
  fid_cq *cq = q == Queue::Send ? S.txcq.get() : S.rxcq.get();
  std::unique_lock<std::mutex> lk(S.m);
  auto &box = inbox_of(q);
  for (;;) {
    size_t n = 0;
    while (n < max && !box.empty()) {
      lf::RawCompletion rc = box.front();
      box.pop_front();
      n += convert_raw(q, rc, out + n);
    }
    if (n)
      return n;
    auto now = std::chrono::steady_clock::now();
    if (now >= until)
      return 0;
    if (S.reading[qi]) {
      // Another link's thread sleeps on the queue: it hands ours over.
      S.cv.wait_until(lk, until);
      continue;
    }
    S.reading[qi] = true;
    lk.unlock();
    int ms = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count());
    fi_cq_tagged_entry buf[16];
    fi_addr_t from[16];
    ssize_t r = q == Queue::Recv ? fi_cq_sreadfrom(cq, buf, 16, from, nullptr, ms > 0 ? ms : 1)
                                 : fi_cq_sread(cq, buf, 16, nullptr, ms > 0 ? ms : 1);
    fi_cq_err_entry ee{};
    bool failed = r == -FI_EAVAIL && fi_cq_readerr(cq, &ee, 0) >= 0;
    lk.lock();
    S.reading[qi] = false;
    for (ssize_t i = 0; i < r; ++i)
      route_locked(q,
                   lf::RawCompletion::from(buf[i], q == Queue::Recv ? from[i] : FI_ADDR_NOTAVAIL));
    if (failed)
      route_locked(q, lf::RawCompletion::failed(ee));
    S.cv.notify_all();
  }
}

bool ConnectionImpl::drain_own(Queue q, const lf::OpSlot *watch) noexcept {
  std::lock_guard<std::mutex> g(sh->m);
  if (!sh->reading[q == Queue::Recv])
    pull_locked(q);
  bool seen = false;
  auto &box = inbox_of(q);
  while (!box.empty()) {
    auto *s = static_cast<lf::OpSlot *>(box.front().e.op_context);
    box.pop_front();
    if (s) {
      seen = seen || s == watch;
      put_slot(s);
    }
  }
  return seen;
}

// ---- the receive pool of a shared endpoint ---------------------------------

void ConnectionImpl::route_pooled_locked(const lf::RawCompletion &rc) noexcept {
  lf::SharedRdm &S = *sh;
  auto *p = static_cast<lf::OpSlot *>(rc.e.op_context);
  // The endpoint is closing: nothing to hand over, nothing to post again.
  if (rc.err == FI_ECANCELED)
    return;
  auto it = S.links.find(static_cast<uint32_t>(rc.tag));
  // A message for a link that closed meanwhile is dropped, and so is one
  // whose sender is not the link's peer: the tag is the sender's choice.
  // Only the peer's goodbye passes from a source the link cannot name: it
  // proves its sender by the handshake's nonce.
  if (it != S.links.end() && !rc.err && rc.src != it->second->peer &&
      !it->second->peer_goodbye(p->buf, rc.e.len)) {
    if (S.foreign++ % 1024 == 0)
      rdmalib::logger().warn("rdmalib: dropped a message tagged for link {} from a process that "
                             "is not that link's peer ({} so far; from {:x}, peer {:x})",
                             it->first, S.foreign, rc.src, it->second->peer);
  } else if (it != S.links.end()) {
    ConnectionImpl *owner = it->second;
    if (!rc.err) {
      owner->peer_spoke = true;
      owner->deliver_locked(static_cast<const uint8_t *>(p->buf), rc.e.len);
    } else if (owner->posted_head != UINT32_MAX) {
      // A message the pool could not hold (longer than kPoolMessage: the
      // peer does not split as rdmalib does): the oldest receive fails.
      lf::OpSlot *u = &owner->slots[owner->posted_head];
      owner->posted_head = u->next_free;
      if (owner->posted_head == UINT32_MAX)
        owner->posted_tail = UINT32_MAX;
      lf::RawCompletion f = rc;
      f.e.op_context = u;
      owner->push_recv_locked(f);
    }
  }
  S.repost(p);
  while (!S.unposted.empty()) {
    lf::OpSlot *u = S.unposted.back();
    if (fi_trecv(S.ep.get(), u->buf, lf::kPoolMessage, u->desc, FI_ADDR_UNSPEC, lf::kPoolTag,
                 ~lf::kPoolTag, u) != 0)
      break;
    S.unposted.pop_back();
  }
}

bool ConnectionImpl::peer_goodbye(const void *msg, size_t len) const noexcept {
  // tcp;ofi_rxm names the sender of a message that came before its receiver
  // inserted the sender's address FI_ADDR_NOTAVAIL: the server's goodbye
  // when it closed a link right after accept, before its client had taken
  // in the answer. Nothing but the goodbye is taken that way, and only with
  // the nonce, which nobody but the two ends has seen.
  ControlMessage m;
  if (nonce == 0 || len != sizeof m)
    return false;
  std::memcpy(&m, msg, sizeof m);
  const ControlMessage want = goodbye();
  return m.magic == want.magic && m.type == want.type && m.imm == want.imm &&
         m.length == want.length;
}

void ConnectionImpl::deliver_locked(const uint8_t *msg, size_t len) noexcept {
  if (posted_head == UINT32_MAX) {
    // No receive posted yet: as the provider would, keep it until one is.
    try {
      early.emplace_back(msg, msg + len);
    } catch (...) {
      set_error("out of memory keeping a message that came before its receive");
    }
    return;
  }
  lf::OpSlot *u = &slots[posted_head];
  posted_head = u->next_free;
  if (posted_head == UINT32_MAX)
    posted_tail = UINT32_MAX;
  ControlMessage m;
  if (len == sizeof m) {
    std::memcpy(&m, msg, sizeof m);
    if (m.magic == kControlMagic && m.type == static_cast<uint16_t>(ControlType::Large)) {
      start_large_locked(u, m.imm, m.length);
      return;
    }
  }
  // A message longer than the receive is not copied: convert() fails the
  // receive and ends the link, as a truncation does elsewhere.
  if (len <= u->cap)
    std::memcpy(u->buf, msg, len);
  lf::RawCompletion rc;
  rc.e.op_context = u;
  rc.e.flags = FI_RECV | FI_TAGGED;
  rc.e.len = len;
  push_recv_locked(rc);
}

void ConnectionImpl::start_large_locked(lf::OpSlot *u, uint32_t seq, uint32_t length) noexcept {
  lf::RawCompletion rc;
  rc.e.op_context = u;
  rc.e.flags = FI_RECV | FI_TAGGED;
  rc.e.len = length;
  if (length <= u->cap) {
    const uint64_t tag =
        lf::kLargeTag | (static_cast<uint64_t>(seq & lf::kLargeSeqMask) << 32) | link_id;
    ssize_t r = fi_trecv(ep.get(), u->buf, u->cap, u->desc, peer, tag, 0, u);
    if (r == 0)
      return; // completes as this link's own receive
    rc.err = static_cast<int>(-r);
    set_error("posting the receive of a large message: %s (%d)", fi_strerror(rc.err), rc.err);
  }
  // Longer than the receive: convert() reports the truncation.
  push_recv_locked(rc);
}

Status ConnectionImpl::post_recv_pooled(const LocalRef *dst, const uint64_t *ctx, size_t n,
                                        size_t &done) noexcept {
  done = 0;
  std::lock_guard<std::mutex> g(sh->m);
  for (size_t i = 0; i < n; ++i) {
    lf::OpSlot *u = take_slot(ctx[i], OpKind::Recv, false);
    if (RDMALIB_UNLIKELY(!u))
      return Status::Again;
    u->buf = dst[i].ptr;
    u->cap = dst[i].len;
    u->desc = dst[i].desc;
    u->next_free = UINT32_MAX;
    const uint32_t idx = static_cast<uint32_t>(u - slots.data());
    if (posted_tail == UINT32_MAX)
      posted_head = idx;
    else
      slots[posted_tail].next_free = idx;
    posted_tail = idx;
    ++done;
    while (!early.empty() && posted_head != UINT32_MAX) {
      std::vector<uint8_t> m = std::move(early.front());
      early.pop_front();
      deliver_locked(m.data(), m.size());
    }
  }
  return Status::Ok;
}

void ConnectionImpl::drop_posted_locked() noexcept {
  while (posted_head != UINT32_MAX) {
    lf::OpSlot *u = &slots[posted_head];
    posted_head = u->next_free;
    put_slot(u);
  }
  posted_tail = UINT32_MAX;
  early.clear();
}

Status ConnectionImpl::post_send_large(const LocalRef &src, uint64_t ctx) noexcept {
  // The announcement may have to wait (PendingNotify): room for it first.
  if (pending_count == pending.size())
    return Status::Again;
  lf::OpSlot *s = take_slot(ctx, OpKind::Send, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  const uint32_t seq = large_seq & lf::kLargeSeqMask;
  const uint64_t tag = lf::kLargeTag | (static_cast<uint64_t>(seq) << 32) | peer_link;
  // The data first: the peer's provider keeps it unexpected until the
  // announcement made the peer post its receive.
  Status st = posted(fi_tsend(ep.get(), src.ptr, src.len, src.desc, peer, tag, s), s, "send");
  if (st != Status::Ok)
    return st;
  ++large_seq;
  const uint32_t length = static_cast<uint32_t>(src.len);
  const auto type = static_cast<uint16_t>(ControlType::Large);
  ssize_t ret = post_notify(seq, length, type);
  if (RDMALIB_LIKELY(ret == 0))
    return Status::Ok;
  if (ret != -FI_EAGAIN) {
    post_failed(ret, "send (announcement of a large message)");
    peer_closed = true;
    ended_here = true;
    return Status::Ok;
  }
  pending[(pending_head + pending_count++) % pending.size()] = lf::PendingNotify{seq, length, type};
  detour = true;
  list_owed();
  return Status::Ok;
}

bool FabricImpl::ready_links(std::vector<uint64_t> &tags) {
  if (!rdm || !shared)
    return false;
  lf::SharedRdm *S;
  {
    std::lock_guard<std::mutex> g(shared_open);
    S = shared_rdm.get();
  }
  if (!S)
    return true; // no link yet
  std::lock_guard<std::mutex> g(S->m);
  if (!S->links.empty()) {
    // Any link can read the shared queues: each completion goes to its owner.
    ConnectionImpl *reader = S->links.begin()->second;
    for (Queue q : {Queue::Recv, Queue::Send})
      for (int batch = 0; batch < 64 && !S->reading[q == Queue::Recv]; ++batch)
        if (reader->pull_locked(q) == 0)
          break;
  }
  if (!S->awaiting.empty()) {
    // A peer that never confirms sends nothing that would name its link:
    // named once at its deadline, its next poll ends it.
    const auto now = std::chrono::steady_clock::now();
    for (ConnectionImpl *c : S->awaiting) {
      if (c->confirm_overdue || now < c->confirm_deadline)
        continue;
      c->confirm_overdue = true;
      if (!c->listed) {
        S->ready.push_back(c);
        c->listed = true;
      }
    }
  }
  size_t keep = 0;
  for (ConnectionImpl *c : S->ready) {
    if (!c->wants_poll()) {
      c->listed = false;
      continue;
    }
    S->ready[keep++] = c;
    tags.push_back(c->tag.load(std::memory_order_relaxed));
  }
  S->ready.resize(keep);
  return true;
}

} // namespace rdmalib::detail
