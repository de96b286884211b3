// The verbs data path: ibv_post_send / ibv_post_recv, ibv_poll_cq and the
// completion channel. No allocation and no exception on any of these paths:
// slots are sized when the connection is set up (only a caller that keeps posting
// to a full queue without polling makes the completion stash grow).
#include "internal.hpp"

#include <arpa/inet.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>

#include <rdmalib/operations.hpp>

#define RDMALIB_LIKELY(x) __builtin_expect(!!(x), 1)
#define RDMALIB_UNLIKELY(x) __builtin_expect(!!(x), 0)

namespace rdmalib {

using detail::ConnectionImpl;

namespace {

constexpr int kPollBatch = 16;
constexpr int kRecvBatch = 16;
// An empty poll() looks at the rdma_cm channel once every this many calls, so
// that a busy-polling caller also notices a peer's disconnect.
constexpr uint32_t kCmCheckInterval = 1024;

inline uint32_t lkey_of(const LocalRef &r) noexcept {
  return r.desc ? static_cast<const ibv_mr *>(r.desc)->lkey : 0;
}

inline bool in_bounds(const RemoteBuffer &rb, uint64_t offset, uint64_t len) noexcept {
  return offset <= rb.size && len <= rb.size - offset;
}

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

// ---------------------------------------------------------------- ConnectionImpl

void ConnectionImpl::set_error(const char *fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

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

size_t ConnectionImpl::convert(Queue q, const ibv_wc *wc, size_t n, Completion *out) noexcept {
  vb::SlotPool &pool = q == Queue::Send ? sq : rq;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const ibv_wc &w = wc[i];
    if (RDMALIB_UNLIKELY(w.wr_id == vb::kInternalWrId)) {
      // The unsignaled write of an emulated write_imm only completes when it
      // failed; the notification after it is flushed and reports to the user.
      if (w.status != IBV_WC_SUCCESS && w.status != IBV_WC_WR_FLUSH_ERR)
        set_error("write (of write_imm) failed: %s (vendor error 0x%x)",
                  ibv_wc_status_str(w.status), w.vendor_err);
      continue;
    }
    if (RDMALIB_UNLIKELY(!pool.owns(w.wr_id)))
      continue; // cannot happen: every wr_id comes from this pool
    vb::Slot &s = pool.at(w.wr_id);
    Completion &o = out[k++];
    o.context = s.user;
    o.kind = s.kind;
    o.length = 0;
    o.imm = 0;
    if (RDMALIB_LIKELY(w.status == IBV_WC_SUCCESS)) {
      o.status = Status::Ok;
      if (q == Queue::Recv) {
        o.length = w.byte_len;
        if (w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
          o.kind = OpKind::RemoteWriteImm;
          o.imm = ntohl(w.imm_data);
        } else if (w.byte_len == sizeof(vb::ControlMessage) && s.buf) {
          vb::ControlMessage m;
          std::memcpy(&m, s.buf, sizeof m);
          if (m.magic == vb::kControlMagic && m.type == vb::kCtlNotify) {
            o.kind = OpKind::RemoteWriteImm;
            o.imm = m.imm;
            o.length = m.length;
          }
        } else if (w.wc_flags & IBV_WC_WITH_IMM) {
          o.imm = ntohl(w.imm_data); // a send-with-immediate from a non-rdmalib peer
        }
      }
    } else if (w.status == IBV_WC_WR_FLUSH_ERR) {
      // Flushed because the QP went to the error state: the peer left, or we
      // closed. The first flushed receive after a peer close reports it.
      o.status = peer_closed ? Status::Closed : Status::Cancelled;
      if (q == Queue::Recv && peer_closed && !peer_close_reported) {
        o.kind = OpKind::PeerClosed;
        peer_close_reported = true;
      }
    } else {
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
    pool.put(&s);
  }
  return k;
}

size_t ConnectionImpl::reap(Queue q, Completion *out, size_t max) noexcept {
  ibv_cq *cq = q == Queue::Send ? send_cq.get() : recv_cq.get();
  if (RDMALIB_UNLIKELY(!cq))
    return 0;
  ibv_wc wc[kPollBatch];
  size_t total = 0;
  while (total < max) {
    int want = static_cast<int>(std::min<size_t>(kPollBatch, max - total));
    int got = ibv_poll_cq(cq, want, wc);
    if (RDMALIB_UNLIKELY(got < 0)) {
      set_error("ibv_poll_cq failed (%d)", got);
      break;
    }
    if (got == 0)
      break;
    total += convert(q, wc, static_cast<size_t>(got), out + total);
    if (got < want)
      break;
  }
  return total;
}

// Reap completions of queue `q` into its stash (when a post found the queue
// full); returns whether anything was reaped.
static bool drain_to_stash(ConnectionImpl &c, Queue q) noexcept {
  vb::SlotPool &pool = q == Queue::Send ? c.sq : c.rq;
  if (!pool.has_stash()) {
    pool.stash.clear(); // keeps the capacity
    pool.stash_head = 0;
  }
  Completion tmp[kPollBatch];
  size_t got = c.reap(q, tmp, kPollBatch);
  try {
    pool.stash.insert(pool.stash.end(), tmp, tmp + got);
  } catch (...) {
    c.set_error("out of memory keeping %zu completions of a full queue", got);
    return false;
  }
  return got > 0;
}

// Wait for room on queue `q` (a free slot, or space in the hardware queue):
// reap its completions into the stash, give up at the post deadline.
static Status wait_for_room(ConnectionImpl &c, Queue q,
                            std::optional<vb::Deadline> &deadline) noexcept {
  if (!deadline)
    deadline.emplace(c.options.post_deadline);
  if (drain_to_stash(c, q))
    return Status::Ok;
  if (c.peer_closed || c.check_cm_events())
    return Status::Closed;
  if (deadline->passed()) {
    c.set_error("%s queue of the connection to %s stayed full for %lld ms (poll completions "
                "more often or raise ConnectionOptions depths)",
                q == Queue::Send ? "send" : "receive", c.remote.to_string().c_str(),
                static_cast<long long>(c.options.post_deadline.count()));
    return Status::Timeout;
  }
  sched_yield();
  return Status::Ok;
}

vb::Slot *ConnectionImpl::take_send_slot(Status &st) noexcept {
  vb::Slot *s = sq.take();
  if (RDMALIB_LIKELY(s != nullptr))
    return s;
  std::optional<vb::Deadline> deadline; // started only when a queue is full
  for (;;) {
    st = wait_for_room(*this, Queue::Send, deadline);
    if (st != Status::Ok)
      return nullptr;
    if ((s = sq.take()) != nullptr)
      return s;
  }
}

Status ConnectionImpl::post_send_wr(ibv_send_wr &wr, vb::Slot *slot) noexcept {
  ibv_send_wr *next = &wr, *bad = nullptr;
  std::optional<vb::Deadline> deadline; // started only when a queue is full
  for (;;) {
    int ret = ibv_post_send(qp, next, &bad);
    if (RDMALIB_LIKELY(ret == 0))
      return Status::Ok;
    if (ret != ENOMEM) {
      // A partially posted chain (emulated write_imm) cannot be taken back:
      // the slot then stays with the posted part and completes with it.
      if (bad == &wr)
        sq.put(slot);
      set_error("ibv_post_send on the connection to %s: %s (errno %d)", remote.to_string().c_str(),
                std::strerror(ret), ret);
      return Status::Error;
    }
    // Send queue full: the rest of the chain is retried after completions
    // have been reaped.
    next = bad;
    Status st = wait_for_room(*this, Queue::Send, deadline);
    if (st != Status::Ok) {
      if (bad == &wr)
        sq.put(slot);
      return st;
    }
  }
}

// ---------------------------------------------------------------- Operations

namespace {

inline Status usable(ConnectionImpl *c) noexcept {
  if (RDMALIB_UNLIKELY(!c))
    return Status::InvalidArgument;
  if (RDMALIB_UNLIKELY(!c->qp || c->peer_closed))
    return Status::Closed;
  return Status::Ok;
}

inline uint32_t inline_flag(const ConnectionImpl *c, uint32_t flags, size_t len) noexcept {
  return (flags & PostInline) && len <= c->fab->caps.max_inline && c->fab->caps.max_inline
             ? IBV_SEND_INLINE
             : 0;
}

} // namespace

Status Operations::send(const LocalRef &src, uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(src.len > c->fab->caps.max_message)) {
    c->set_error("send of %zu bytes exceeds max_message", src.len);
    return Status::InvalidArgument;
  }
  vb::Slot *s = c->take_send_slot(st);
  if (RDMALIB_UNLIKELY(!s))
    return st;
  s->user = context;
  s->kind = OpKind::Send;
  ibv_sge sge{reinterpret_cast<uint64_t>(src.ptr), static_cast<uint32_t>(src.len), lkey_of(src)};
  ibv_send_wr wr{};
  wr.wr_id = c->sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = src.len ? 1 : 0;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | inline_flag(c, flags, src.len);
  return c->post_send_wr(wr, s);
}

Status Operations::post_recv(const LocalRef &dst, uint64_t context) noexcept {
  return post_recv(&dst, &context, 1, nullptr);
}

Status Operations::post_recv(const LocalRef *dst, const uint64_t *contexts, size_t n,
                             size_t *posted) noexcept {
  ConnectionImpl *c = impl_;
  if (posted)
    *posted = 0;
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  ibv_recv_wr wrs[kRecvBatch];
  ibv_sge sges[kRecvBatch];
  vb::Slot *slots[kRecvBatch];
  size_t done = 0;
  std::optional<vb::Deadline> deadline; // started only when a queue is full
  while (done < n) {
    size_t batch = 0;
    const size_t want = std::min<size_t>(kRecvBatch, n - done);
    while (batch < want) {
      vb::Slot *s = c->rq.take();
      if (!s)
        break;
      const LocalRef &d = dst[done + batch];
      s->user = contexts[done + batch];
      s->buf = d.ptr;
      s->kind = OpKind::Recv;
      sges[batch] =
          ibv_sge{reinterpret_cast<uint64_t>(d.ptr), static_cast<uint32_t>(d.len), lkey_of(d)};
      wrs[batch].wr_id = c->rq.wr_id(s);
      wrs[batch].sg_list = &sges[batch];
      wrs[batch].num_sge = d.len ? 1 : 0;
      wrs[batch].next = nullptr;
      if (batch)
        wrs[batch - 1].next = &wrs[batch];
      slots[batch] = s;
      ++batch;
    }
    if (batch == 0) {
      // Every receive slot is posted: completions must be reaped first.
      st = wait_for_room(*c, Queue::Recv, deadline);
      if (st != Status::Ok)
        return st;
      continue;
    }
    ibv_recv_wr *bad = nullptr;
    int ret = ibv_post_recv(c->qp, wrs, &bad);
    if (RDMALIB_UNLIKELY(ret != 0)) {
      size_t ok = bad ? static_cast<size_t>(bad - wrs) : 0;
      for (size_t i = ok; i < batch; ++i)
        c->rq.put(slots[i]);
      done += ok;
      if (posted)
        *posted = done;
      c->set_error("ibv_post_recv on the connection to %s: %s (errno %d)",
                   c->remote.to_string().c_str(), std::strerror(ret), ret);
      return ret == ENOMEM ? Status::Timeout : Status::Error;
    }
    done += batch;
    if (posted)
      *posted = done;
  }
  return Status::Ok;
}

Status Operations::write(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                         uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!in_bounds(dst, offset, src.len))) {
    c->set_error("write of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)",
                 src.len, static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(dst.size));
    return Status::InvalidArgument;
  }
  vb::Slot *s = c->take_send_slot(st);
  if (RDMALIB_UNLIKELY(!s))
    return st;
  s->user = context;
  s->kind = OpKind::Write;
  ibv_sge sge{reinterpret_cast<uint64_t>(src.ptr), static_cast<uint32_t>(src.len), lkey_of(src)};
  ibv_send_wr wr{};
  wr.wr_id = c->sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = src.len ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | inline_flag(c, flags, src.len);
  wr.wr.rdma.remote_addr = dst.addr + offset;
  wr.wr.rdma.rkey = static_cast<uint32_t>(dst.key);
  return c->post_send_wr(wr, s);
}

Status Operations::write_imm(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                             uint32_t imm, uint64_t context, uint32_t flags) noexcept {
  ConnectionImpl *c = impl_;
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!in_bounds(dst, offset, src.len))) {
    c->set_error("write_imm of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)",
                 src.len, static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(dst.size));
    return Status::InvalidArgument;
  }
  vb::Slot *s = c->take_send_slot(st);
  if (RDMALIB_UNLIKELY(!s))
    return st;
  s->user = context;
  s->kind = OpKind::WriteImm;
  ibv_sge sge{reinterpret_cast<uint64_t>(src.ptr), static_cast<uint32_t>(src.len), lkey_of(src)};
  ibv_send_wr wr[2]{};
  wr[0].sg_list = &sge;
  wr[0].num_sge = src.len ? 1 : 0;
  wr[0].wr.rdma.remote_addr = dst.addr + offset;
  wr[0].wr.rdma.rkey = static_cast<uint32_t>(dst.key);
  const uint32_t inl = inline_flag(c, flags, src.len);
  if (RDMALIB_LIKELY(!c->fab->emulate_imm)) {
    // The immediate travels in network byte order; the API's value is host order.
    wr[0].wr_id = c->sq.wr_id(s);
    wr[0].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr[0].imm_data = htonl(imm);
    wr[0].send_flags = IBV_SEND_SIGNALED | inl;
    return c->post_send_wr(wr[0], s);
  }
  // Emulation (remote_cq_data masked off): an unsignaled write, then a
  // notification send. RC executes them in order, so the data is in place
  // when the notification's receive completes at the target.
  const size_t idx = static_cast<size_t>(s - c->sq.slots.data());
  auto *m =
      reinterpret_cast<vb::ControlMessage *>(c->ctl_mem.data() + idx * sizeof(vb::ControlMessage));
  m->magic = vb::kControlMagic;
  m->type = vb::kCtlNotify;
  m->reserved = 0;
  m->imm = imm;
  m->length = static_cast<uint32_t>(src.len);
  ibv_sge msge{reinterpret_cast<uint64_t>(m), sizeof(vb::ControlMessage), c->ctl_mr->lkey};
  wr[0].wr_id = vb::kInternalWrId;
  wr[0].opcode = IBV_WR_RDMA_WRITE;
  wr[0].send_flags = inl;
  wr[0].next = &wr[1];
  wr[1].wr_id = c->sq.wr_id(s);
  wr[1].sg_list = &msge;
  wr[1].num_sge = 1;
  wr[1].opcode = IBV_WR_SEND;
  wr[1].send_flags = IBV_SEND_SIGNALED;
  return c->post_send_wr(wr[0], s);
}

Status Operations::read(const LocalRef &dst, const RemoteBuffer &src, uint64_t offset,
                        uint64_t context) noexcept {
  ConnectionImpl *c = impl_;
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!in_bounds(src, offset, dst.len))) {
    c->set_error("read of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)", dst.len,
                 static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(src.size));
    return Status::InvalidArgument;
  }
  vb::Slot *s = c->take_send_slot(st);
  if (RDMALIB_UNLIKELY(!s))
    return st;
  s->user = context;
  s->kind = OpKind::Read;
  ibv_sge sge{reinterpret_cast<uint64_t>(dst.ptr), static_cast<uint32_t>(dst.len), lkey_of(dst)};
  ibv_send_wr wr{};
  wr.wr_id = c->sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = dst.len ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = src.addr + offset;
  wr.wr.rdma.rkey = static_cast<uint32_t>(src.key);
  return c->post_send_wr(wr, s);
}

namespace {

Status post_atomic(ConnectionImpl *c, OpKind kind, const LocalRef &result,
                   const RemoteBuffer &target, uint64_t offset, uint64_t compare_add, uint64_t swap,
                   uint64_t context) noexcept {
  Status st = usable(c);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  if (RDMALIB_UNLIKELY(!c->fab->caps.atomics)) {
    c->set_error("%s: this fabric has no remote atomics (Capabilities::atomics)", kind_name(kind));
    return Status::Unsupported;
  }
  if (RDMALIB_UNLIKELY(result.len < sizeof(uint64_t) || !in_bounds(target, offset, 8) ||
                       ((target.addr + offset) & 7) != 0)) {
    c->set_error("%s needs an 8-byte result buffer and an 8-byte aligned target inside the "
                 "remote buffer (offset %llu, size %llu)",
                 kind_name(kind), static_cast<unsigned long long>(offset),
                 static_cast<unsigned long long>(target.size));
    return Status::InvalidArgument;
  }
  vb::Slot *s = c->take_send_slot(st);
  if (RDMALIB_UNLIKELY(!s))
    return st;
  s->user = context;
  s->kind = kind;
  ibv_sge sge{reinterpret_cast<uint64_t>(result.ptr), sizeof(uint64_t), lkey_of(result)};
  ibv_send_wr wr{};
  wr.wr_id = c->sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = kind == OpKind::FetchAdd ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = target.addr + offset;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  wr.wr.atomic.rkey = static_cast<uint32_t>(target.key);
  return c->post_send_wr(wr, s);
}

} // namespace

Status Operations::fetch_add(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                             uint64_t add, uint64_t context) noexcept {
  return post_atomic(impl_, OpKind::FetchAdd, result, target, offset, add, 0, context);
}

Status Operations::compare_swap(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                                uint64_t compare, uint64_t swap, uint64_t context) noexcept {
  return post_atomic(impl_, OpKind::CompareSwap, result, target, offset, compare, swap, context);
}

size_t Operations::poll(Queue q, Completion *out, size_t max) noexcept {
  ConnectionImpl *c = impl_;
  if (RDMALIB_UNLIKELY(!c || max == 0))
    return 0;
  vb::SlotPool &pool = q == Queue::Send ? c->sq : c->rq;
  size_t n = 0;
  if (RDMALIB_UNLIKELY(pool.has_stash())) {
    while (n < max && pool.has_stash())
      out[n++] = pool.stash[pool.stash_head++];
    if (n == max)
      return n;
  }
  n += c->reap(q, out + n, max - n);
  if (n)
    return n;
  if (RDMALIB_UNLIKELY(++c->empty_polls >= kCmCheckInterval)) {
    c->empty_polls = 0;
    c->check_cm_events();
  }
  if (RDMALIB_UNLIKELY(c->peer_closed && q == Queue::Recv && !c->peer_close_reported)) {
    // Report the close even when no receive was posted to be flushed with it.
    n = c->reap(q, out, max);
    if (n)
      return n;
    c->peer_close_reported = true;
    out[0] = Completion{0, 0, 0, OpKind::PeerClosed, Status::Closed};
    return 1;
  }
  return 0;
}

WaitResult Operations::wait(Queue q, Completion *out, size_t max, int timeout_ms) noexcept {
  ConnectionImpl *c = impl_;
  if (!c || max == 0)
    return WaitResult{0, Status::InvalidArgument};
  vb::Deadline deadline(std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms));
  const bool forever = timeout_ms < 0;
  int backoff_us = 1;
  for (;;) {
    size_t n = poll(q, out, max);
    if (n)
      return WaitResult{n, Status::Ok};
    if (!c->qp)
      return WaitResult{0, Status::Closed};
    if (c->peer_closed) {
      // Completions flushed by the close may still be on their way.
      n = poll(q, out, max);
      return n ? WaitResult{n, Status::Ok} : WaitResult{0, Status::Closed};
    }
    if (!forever && deadline.passed())
      return WaitResult{0, Status::Timeout};

    if (!c->fab->caps.wait_fd) {
      // No completion fd (masked off): poll with a growing pause.
      if (c->check_cm_events())
        continue;
      int left_us = forever ? 1000 : deadline.remaining_ms() * 1000 + 1000;
      std::this_thread::sleep_for(std::chrono::microseconds(std::min(backoff_us, left_us)));
      backoff_us = std::min(backoff_us * 2, 1000);
      continue;
    }

    bool &armed = q == Queue::Send ? c->send_armed : c->recv_armed;
    vb::Cq &cq = q == Queue::Send ? c->send_cq : c->recv_cq;
    ibv_comp_channel *ch = q == Queue::Send ? c->send_channel.get() : c->recv_channel.get();
    if (!armed) {
      if (ibv_req_notify_cq(cq.get(), 0)) {
        c->set_error("ibv_req_notify_cq failed: %s", std::strerror(errno));
        return WaitResult{0, Status::Error};
      }
      armed = true;
      // A completion that arrived before arming raises no event: poll again.
      continue;
    }
    pollfd fds[2] = {{ch->fd, POLLIN, 0}, {c->events->fd, POLLIN, 0}};
    int ret = ::poll(fds, 2, forever ? -1 : deadline.remaining_ms());
    if (ret < 0) {
      if (errno == EINTR)
        continue;
      c->set_error("poll on the completion channel failed: %s", std::strerror(errno));
      return WaitResult{0, Status::Error};
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
      c->check_cm_events();
  }
}

const char *Operations::last_error() const noexcept {
  if (!impl_)
    return "rdmalib: operations on an empty connection";
  return impl_->last_error[0] ? impl_->last_error : "no error";
}

} // namespace rdmalib
