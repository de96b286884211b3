// The slow and rare paths of the verbs data path: failed posts and
// completions, room for a full queue, the peer's end, sleeping on the
// completion channel. The fast path is in data_path.hpp. No allocation and
// no exception on any of these paths (only a caller that keeps posting to a
// full queue without polling makes the front end's stash grow).
#include "backend.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rdmalib::detail {

namespace {

const char *kind_name(OpKind k) noexcept {
  switch (k) {
  case OpKind::Send:
    return "send";
  case OpKind::Recv:
    return "receive";
  case OpKind::Write:
    return "write";
  case OpKind::WriteImm:
    return "write_imm";
  case OpKind::Read:
    return "read";
  case OpKind::FetchAdd:
    return "fetch_add";
  case OpKind::CompareSwap:
    return "compare_swap";
  case OpKind::RemoteWriteImm:
    return "remote write_imm";
  case OpKind::PeerClosed:
    return "peer close";
  }
  return "operation";
}

} // namespace

void ConnectionImpl::on_peer_closed() noexcept {
  if (peer_closed)
    return;
  peer_closed = true;
  // Move our QP to the error state so that what is still posted is flushed
  // back as completions instead of waiting forever.
  if (id && !local_closed)
    rdma_disconnect(id.get());
}
bool ConnectionImpl::check_cm_events() noexcept {
  if (!events)
    return peer_closed;
  rdma_cm_event *ev = nullptr;
  while (rdma_get_cm_event(events.get(), &ev) == 0) {
    switch (ev->event) {
    case RDMA_CM_EVENT_DISCONNECTED:
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
    case RDMA_CM_EVENT_CONNECT_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      set_error("the peer %s closed the connection (%s)", remote.host.c_str(),
                rdma_event_str(ev->event));
      rdma_ack_cm_event(ev);
      on_peer_closed();
      break;
    default: // TIMEWAIT_EXIT and the like
      rdma_ack_cm_event(ev);
      break;
    }
  }
  return peer_closed;
}

void ConnectionImpl::failed(Queue q, const ibv_wc &w, const vb::Slot &s, Completion &o) noexcept {
  if (w.status == IBV_WC_WR_FLUSH_ERR) {
    // Flushed because the QP went to the error state: the peer left, or we
    // closed. The first flushed receive after a peer close reports it.
    o.status = peer_closed ? Status::Closed : Status::Cancelled;
    if (q == Queue::Recv && peer_closed && !peer_close_reported) {
      o.kind = OpKind::PeerClosed;
      peer_close_reported = true;
    }
    return;
  }
  switch (w.status) {
  case IBV_WC_RETRY_EXC_ERR:
  case IBV_WC_RNR_RETRY_EXC_ERR:
    // The peer stopped answering: it is gone.
    o.status = Status::Closed;
    break;
  default:
    o.status = Status::Error;
    break;
  }
  set_error("%s failed on the connection to %s: %s (status %d, vendor error 0x%x)%s",
            kind_name(s.kind), remote.to_string().c_str(), ibv_wc_status_str(w.status),
            static_cast<int>(w.status), w.vendor_err,
            w.status == IBV_WC_LOC_LEN_ERR
                ? "; the peer sent a message longer than the posted receive (message "
                  "truncated); the link is closed"
                : "");
  // A failed receive ends the link (operations.hpp); the RC QP is in the
  // error state already, and the disconnect tells the peer.
  if (o.status == Status::Closed || q == Queue::Recv)
    on_peer_closed();
}

void ConnectionImpl::internal_failed(const ibv_wc &w) noexcept {
  if (w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR)
    set_error("write (of write_imm) failed: %s (vendor error 0x%x)", ibv_wc_status_str(w.status),
              w.vendor_err);
}

Status ConnectionImpl::post_send_failed(ibv_send_wr &wr, ibv_send_wr *bad, vb::Slot *slot,
                                        int ret) noexcept {
  if (bad == &wr) {
    // Nothing of it was posted.
    sq.put(slot);
    if (ret == ENOMEM)
      return Status::Again; // the send queue is full
  } else if (ret == ENOMEM) {
    // Part of a chain (an emulated write_imm's notification) is posted and
    // the rest found the queue full: it cannot be taken back, so it is
    // posted here once there is room, within the post deadline. The slot
    // stays with the posted part and completes with it.
    Deadline dl(options.post_deadline);
    for (ibv_send_wr *next = bad; !dl.passed();) {
      make_room(Queue::Send);
      ret = ibv_post_send(qp, next, &bad);
      if (ret == 0)
        return Status::Ok;
      if (ret != ENOMEM)
        break;
      next = bad;
    }
  }
  set_error("ibv_post_send on the connection to %s: %s (errno %d)", remote.to_string().c_str(),
            std::strerror(ret), ret);
  return Status::Error;
}

Status ConnectionImpl::post_recv_failed(int ret) noexcept {
  if (ret == ENOMEM)
    return Status::Again;
  set_error("ibv_post_recv on the connection to %s: %s (errno %d)", remote.to_string().c_str(),
            std::strerror(ret), ret);
  return Status::Error;
}

void ConnectionImpl::make_room(Queue q) noexcept {
  Completion tmp[vbd::kPollBatch];
  size_t got = reap(q, tmp, vbd::kPollBatch);
  CompletionStash &st = stash(q);
  detour = detour || got;
  for (size_t i = 0; i < got; ++i)
    if (!st.push(tmp[i]))
      set_error("out of memory keeping the completions of a full queue");
  if (got)
    return;
  check_cm_events();
  sched_yield();
}

void ConnectionImpl::drain_channel(Queue q) noexcept {
  bool &armed = q == Queue::Send ? send_armed : recv_armed;
  vb::Cq &cq = q == Queue::Send ? send_cq : recv_cq;
  ibv_comp_channel *ch = q == Queue::Send ? send_channel.get() : recv_channel.get();
  ibv_cq *ev_cq = nullptr;
  void *ev_ctx = nullptr;
  // The channels are non-blocking: this ends when none is pending.
  while (ch && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) {
    cq.event_received();
    armed = false;
  }
}

int ConnectionImpl::wait_fd() noexcept {
  if (wait_epoll != -2)
    return wait_epoll;
  wait_epoll = -1;
  if (!send_channel || !recv_channel || !events)
    return -1;
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0)
    return -1;
  for (int fd : {send_channel->fd, recv_channel->fd, events->fd}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(ep);
      return -1;
    }
  }
  wait_epoll = ep;
  return wait_epoll;
}

bool ConnectionImpl::arm() noexcept {
  if (wait_epoll < 0 || !send_cq.get() || !recv_cq.get())
    return false;
  // A disconnect announced on the event channel is read here, so that the
  // caller's next poll reports it instead of the descriptor staying readable.
  pollfd pfd{events->fd, POLLIN, 0};
  if (::poll(&pfd, 1, 0) > 0 && check_cm_events())
    return false;
  bool fresh = false;
  for (Queue q : {Queue::Send, Queue::Recv}) {
    drain_channel(q);
    bool &armed = q == Queue::Send ? send_armed : recv_armed;
    if (armed)
      continue;
    if (ibv_req_notify_cq((q == Queue::Send ? send_cq : recv_cq).get(), 0)) {
      set_error("ibv_req_notify_cq failed: %s", std::strerror(errno));
      return false;
    }
    armed = true;
    fresh = true;
  }
  // A completion that arrived before a queue was armed raises no event: the
  // caller polls once more, and the next arm() finds both armed.
  return !fresh;
}

size_t ConnectionImpl::block(Queue q, Completion *out, size_t max, int slice_ms) noexcept {
  bool &armed = q == Queue::Send ? send_armed : recv_armed;
  vb::Cq &cq = q == Queue::Send ? send_cq : recv_cq;
  ibv_comp_channel *ch = q == Queue::Send ? send_channel.get() : recv_channel.get();
  if (!cq.get() || !ch || !events)
    return 0;
  if (!armed) {
    if (ibv_req_notify_cq(cq.get(), 0)) {
      set_error("ibv_req_notify_cq failed: %s", std::strerror(errno));
      return 0;
    }
    armed = true;
    // A completion that arrived before arming raises no event: look again.
    size_t n = reap(q, out, max);
    if (n)
      return n;
  }
  pollfd fds[2] = {{ch->fd, POLLIN, 0}, {events->fd, POLLIN, 0}};
  int ret = ::poll(fds, 2, slice_ms);
  if (ret < 0) {
    if (errno != EINTR)
      set_error("poll on the completion channel failed: %s", std::strerror(errno));
    return 0;
  }
  if (fds[0].revents) {
    ibv_cq *ev_cq = nullptr;
    void *ev_ctx = nullptr;
    while (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) {
      cq.event_received();
      armed = false;
    }
  }
  if (fds[1].revents)
    check_cm_events();
  return reap(q, out, max);
}

} // namespace rdmalib::detail
