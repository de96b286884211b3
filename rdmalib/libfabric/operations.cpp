// The data path of the libfabric backend: posts, completion conversion,
// progress and blocking waits. Nothing here allocates or throws.
#include <cstdarg>
#include <cstdio>
#include <sched.h>
#include <thread>

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

#include <rdmalib/fabric.hpp>
#include <rdmalib/operations.hpp>

#include "internal.hpp"

namespace rdmalib {
namespace detail {

namespace {

Status status_of(ssize_t ret) {
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

/// Post through `fn(slot)`, retrying -FI_EAGAIN after driving progress until
/// the connection's post deadline. The deadline clock is only read on the
/// slow path.
template <class F> Status post(ConnectionImpl &c, const char *what, lf::OpSlot *s, F &&fn) {
  ssize_t ret = fn(s);
  if (ret == 0)
    return Status::Ok;
  if (ret == -FI_EAGAIN) {
    lf::Deadline dl(c.options.post_deadline);
    do {
      c.progress();
      ret = fn(s);
      if (ret == 0)
        return Status::Ok;
    } while (ret == -FI_EAGAIN && !dl.passed());
  }
  if (s)
    c.put_slot(s);
  if (ret == -FI_EAGAIN) {
    c.set_error("%s: queue still full after %lld ms of retries (peer not progressing?)", what,
                static_cast<long long>(c.options.post_deadline.count()));
    return Status::Timeout;
  }
  c.set_error("%s: %s (%d)", what, fi_strerror(static_cast<int>(-ret)), static_cast<int>(-ret));
  return status_of(ret);
}

bool stash_push(std::vector<fi_cq_data_entry> &st, size_t &head, size_t &len, fid_cq *cq) {
  if (head == len)
    head = len = 0;
  if (len == st.size() && head > 0) {
    std::move(st.begin() + static_cast<long>(head), st.begin() + static_cast<long>(len),
              st.begin());
    len -= head;
    head = 0;
  }
  size_t room = st.size() - len;
  if (room == 0)
    return false;
  ssize_t r = fi_cq_read(cq, st.data() + len, room);
  if (r > 0) {
    len += static_cast<size_t>(r);
    return true;
  }
  return false;
}

} // namespace

ssize_t ConnectionImpl::post_receive(void *buf, size_t len, void *desc, lf::OpSlot *s,
                                     uint64_t flags) noexcept {
  s->buf = buf;
  s->cap = len;
  const lf::RecvOverflow &ov = fab->overflow;
  if (!ov.base) {
    // The single repost after each message takes the provider's plainest
    // entry point.
    if (!flags)
      return fi_recv(ep.get(), buf, len, desc, FI_ADDR_UNSPEC, s);
    iovec iov{buf, len};
    fi_msg msg{&iov, &desc, 1, FI_ADDR_UNSPEC, s, 0};
    return fi_recvmsg(ep.get(), &msg, flags);
  }
  iovec iov[3] = {{buf, len}, {ov.base, ov.scratch}, {ov.base + ov.scratch, ov.guard}};
  void *descs[3] = {desc, nullptr, nullptr};
  fi_msg msg{iov, descs, ov.guard ? 3u : 2u, FI_ADDR_UNSPEC, s, 0};
  return fi_recvmsg(ep.get(), &msg, flags);
}

void ConnectionImpl::set_error(const char *fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
}

lf::OpSlot *ConnectionImpl::take_slot(uint64_t user, OpKind kind, bool internal) {
  if (free_head == UINT32_MAX) {
    set_error("too many outstanding operations (%zu): poll completions before posting more",
              slots.size());
    return nullptr;
  }
  lf::OpSlot *s = &slots[free_head];
  free_head = s->next_free;
  s->user = user;
  s->kind = kind;
  s->internal = internal;
  s->buf = nullptr;
  return s;
}

void ConnectionImpl::progress() noexcept {
  // Reading a CQ is what moves data on manual-progress providers. Whatever is
  // read here is kept for the next poll(), so nothing is lost.
  sweep_connreqs();
  size_t txlen = tx_stash_len, rxlen = rx_stash_len;
  stash_push(tx_stash, tx_stash_head, tx_stash_len, txcq.get());
  stash_push(rx_stash, rx_stash_head, rx_stash_len, rxcq.get());
  if (txlen == tx_stash_len && rxlen == rx_stash_len) {
    // Stashes full or nothing new: a zero-count read still drives progress.
    fi_cq_read(txcq.get(), nullptr, 0);
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
  Completion c;
  c.kind = q == Queue::Recv ? OpKind::Recv : OpKind::Send;
  c.status = Status::Error;
  if (fi_cq_readerr(cq, &err, 0) < 0) {
    set_error("fi_cq_readerr failed");
    return c;
  }
  auto *s = static_cast<lf::OpSlot *>(err.op_context);
  size_t cap = s ? s->cap : 0;
  if (s) {
    c.context = s->user;
    c.kind = s->kind;
    put_slot(s);
  }
  c.status = status_of(-static_cast<ssize_t>(err.err));
  char prov[160] = {0};
  const char *ptext = fi_cq_strerror(cq, err.prov_errno, err.err_data, prov, sizeof prov);
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

size_t ConnectionImpl::convert(Queue q, const fi_cq_data_entry *e, size_t n,
                               Completion *out) noexcept {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const fi_cq_data_entry &en = e[i];
    auto *s = static_cast<lf::OpSlot *>(en.op_context);
    if (q == Queue::Send) {
      if (!s)
        continue;
      bool internal = s->internal;
      if (!internal)
        out[k++] = Completion{s->user, 0, 0, s->kind, Status::Ok};
      put_slot(s);
      continue;
    }
    // Receive side. A native write-with-immediate shows as remote write +
    // remote CQ data (sockets also flags the sender's own completion with
    // FI_REMOTE_CQ_DATA, hence both bits); it owns a posted receive only on
    // FI_RX_CQ_DATA providers.
    if ((en.flags & FI_REMOTE_CQ_DATA) && (en.flags & FI_REMOTE_WRITE)) {
      Completion c{0, static_cast<uint32_t>(en.len), static_cast<uint32_t>(en.data),
                   OpKind::RemoteWriteImm, Status::Ok};
      if (fab->rx_cq_data && s) {
        c.context = s->user;
        put_slot(s);
      }
      out[k++] = c;
      continue;
    }
    if (!s)
      continue;
    if (s->internal) {
      // Handshake receives are consumed by wait_internal, never here.
      put_slot(s);
      continue;
    }
    Completion c{s->user, static_cast<uint32_t>(en.len), 0, OpKind::Recv, Status::Ok};
    if (en.len > s->cap) {
      // Only with an overflow area (RecvOverflow): the provider took a
      // message longer than the caller's receive. Same outcome as a
      // truncation error elsewhere: the receive fails and the link ends.
      set_error("received a message of %zu bytes into a receive of %zu bytes: the peer sent "
                "more than was posted (message truncated); the link is closed",
                static_cast<size_t>(en.len), s->cap);
      c.length = static_cast<uint32_t>(s->cap);
      c.status = Status::Error;
      ended_here = !peer_closed;
      peer_closed = true;
    } else if (en.len == sizeof(lf::ControlMessage) && s->buf) {
      lf::ControlMessage m;
      std::memcpy(&m, s->buf, sizeof m);
      if (m.magic == lf::kControlMagic && m.type == lf::CtlNotify) {
        c.kind = OpKind::RemoteWriteImm;
        c.imm = m.imm;
        c.length = m.length;
      } else if (m.magic == lf::kControlMagic && m.type == lf::CtlGoodbye) {
        c.kind = OpKind::PeerClosed;
        c.status = Status::Closed;
        peer_closed = true;
      }
    }
    put_slot(s);
    out[k++] = c;
  }
  return k;
}

bool ConnectionImpl::retry_answer() noexcept {
  lf::OpSlot *s = take_slot(0, OpKind::Send, true);
  if (!s)
    return true; // every slot busy: try again later
  ssize_t r = fi_send(ep.get(), answer_buf, sizeof(lf::HandshakeMessage), ctl_desc(), peer, s);
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
  return false;
}

size_t ConnectionImpl::reap(Queue q, Completion *out, size_t max) noexcept {
  if (answer_pending)
    retry_answer();
  if (answer_failed && q == Queue::Recv && max > 0) {
    // Reported once, as a failed receive carrying the reason (last_error).
    answer_failed = false;
    out[0] = Completion{0, 0, 0, OpKind::Recv, Status::Error};
    return 1;
  }
  bool tx = q == Queue::Send;
  auto &st = tx ? tx_stash : rx_stash;
  size_t &head = tx ? tx_stash_head : rx_stash_head;
  size_t &len = tx ? tx_stash_len : rx_stash_len;
  fid_cq *cq = tx ? txcq.get() : rxcq.get();
  size_t n = 0;
  while (n < max && head < len)
    n += convert(q, &st[head++], 1, out + n);
  // Read again only when a batch held nothing for the caller (internal
  // completions): on tcp every fi_cq_read is a progress pass with syscalls, so
  // a second read after a hit costs microseconds per message.
  for (int round = 0; n < max && round < 4; ++round) {
    fi_cq_data_entry buf[16];
    size_t want = max - n < 16 ? max - n : 16;
    ssize_t r = fi_cq_read(cq, buf, want);
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

Status ConnectionImpl::send_control(lf::ControlType type, uint32_t imm, uint32_t length,
                                    uint64_t user, bool report) noexcept {
  lf::ControlMessage m{lf::kControlMagic, static_cast<uint16_t>(type), 0, imm, length};
  if (!report && fab->inject_size >= sizeof m) {
    // Injected: copied at once, no completion to reap.
    return post(*this, "control message (inject)", nullptr,
                [&](lf::OpSlot *) { return fi_inject(ep.get(), &m, sizeof m, peer); });
  }
  lf::OpSlot *s = take_slot(user, OpKind::Send, !report);
  if (!s)
    return Status::Again;
  uint8_t *buf = ctl_send(ctl_send_next++ % kCtlSendSlots);
  std::memcpy(buf, &m, sizeof m);
  void *desc = ctl_desc();
  return post(*this, "control message", s,
              [&](lf::OpSlot *slot) { return fi_send(ep.get(), buf, sizeof m, desc, peer, slot); });
}

} // namespace detail

// ---------------------------------------------------------------------------
// Operations: thin, inlinable-in-spirit wrappers over ConnectionImpl.

Status Operations::send(const LocalRef &src, uint64_t context, uint32_t flags) noexcept {
  detail::ConnectionImpl &c = *impl_;
  if (!c.open || c.peer_closed)
    return Status::Closed;
  lf::OpSlot *s = c.take_slot(context, OpKind::Send, false);
  if (!s)
    return Status::Again;
  if ((flags & PostInline) && src.len <= c.fab->caps.max_inline) {
    return detail::post(c, "send (inline)", s, [&](lf::OpSlot *slot) {
      iovec iov{src.ptr, src.len};
      void *desc = src.desc;
      fi_msg msg{&iov, &desc, 1, c.peer, slot, 0};
      return fi_sendmsg(c.ep.get(), &msg, FI_INJECT | FI_COMPLETION);
    });
  }
  return detail::post(c, "send", s, [&](lf::OpSlot *slot) {
    return fi_send(c.ep.get(), src.ptr, src.len, src.desc, c.peer, slot);
  });
}

Status Operations::post_recv(const LocalRef &dst, uint64_t context) noexcept {
  return post_recv(&dst, &context, 1, nullptr);
}

Status Operations::post_recv(const LocalRef *dst, const uint64_t *contexts, size_t n,
                             size_t *posted) noexcept {
  detail::ConnectionImpl &c = *impl_;
  if (posted)
    *posted = 0;
  if (!c.open || c.peer_closed)
    return Status::Closed;
  for (size_t i = 0; i < n; ++i) {
    lf::OpSlot *s = c.take_slot(contexts[i], OpKind::Recv, false);
    if (!s)
      return Status::Again;
    // FI_MORE lets the provider batch the doorbell; the last one flushes.
    uint64_t more = i + 1 < n ? FI_MORE : 0;
    Status st = detail::post(c, "post_recv", s, [&](lf::OpSlot *slot) {
      return c.post_receive(dst[i].ptr, dst[i].len, dst[i].desc, slot, more);
    });
    if (st != Status::Ok)
      return st;
    if (posted)
      *posted = i + 1;
  }
  return Status::Ok;
}

namespace {
inline bool in_bounds(const RemoteBuffer &rb, uint64_t offset, size_t len) {
  return offset <= rb.size && len <= rb.size - offset;
}
} // namespace

Status Operations::write(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                         uint64_t context, uint32_t flags) noexcept {
  detail::ConnectionImpl &c = *impl_;
  if (!c.open || c.peer_closed)
    return Status::Closed;
  if (!in_bounds(dst, offset, src.len)) {
    c.set_error("write of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)", src.len,
                static_cast<unsigned long long>(offset), static_cast<unsigned long long>(dst.size));
    return Status::InvalidArgument;
  }
  lf::OpSlot *s = c.take_slot(context, OpKind::Write, false);
  if (!s)
    return Status::Again;
  uint64_t inject = (flags & PostInline) && src.len <= c.fab->caps.max_inline ? FI_INJECT : 0;
  return detail::post(c, "write", s, [&](lf::OpSlot *slot) {
    if (!inject)
      return fi_write(c.ep.get(), src.ptr, src.len, src.desc, c.peer, dst.addr + offset, dst.key,
                      slot);
    iovec iov{src.ptr, src.len};
    void *desc = src.desc;
    fi_rma_iov rma{dst.addr + offset, src.len, dst.key};
    fi_msg_rma msg{&iov, &desc, 1, c.peer, &rma, 1, slot, 0};
    return fi_writemsg(c.ep.get(), &msg, FI_INJECT | FI_COMPLETION);
  });
}

Status Operations::write_imm(const LocalRef &src, const RemoteBuffer &dst, uint64_t offset,
                             uint32_t imm, uint64_t context, uint32_t flags) noexcept {
  detail::ConnectionImpl &c = *impl_;
  if (!c.open || c.peer_closed)
    return Status::Closed;
  if (!in_bounds(dst, offset, src.len)) {
    c.set_error("write_imm of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)",
                src.len, static_cast<unsigned long long>(offset),
                static_cast<unsigned long long>(dst.size));
    return Status::InvalidArgument;
  }
  lf::OpSlot *s = c.take_slot(context, OpKind::WriteImm, false);
  if (!s)
    return Status::Again;
  uint64_t inject = (flags & PostInline) && src.len <= c.fab->caps.max_inline ? FI_INJECT : 0;
  if (c.fab->native_cq_data) {
    return detail::post(c, "write_imm", s, [&](lf::OpSlot *slot) {
      if (!inject)
        return fi_writedata(c.ep.get(), src.ptr, src.len, src.desc, imm, c.peer, dst.addr + offset,
                            dst.key, slot);
      iovec iov{src.ptr, src.len};
      void *desc = src.desc;
      fi_rma_iov rma{dst.addr + offset, src.len, dst.key};
      fi_msg_rma msg{&iov, &desc, 1, c.peer, &rma, 1, slot, imm};
      return fi_writemsg(c.ep.get(), &msg, FI_INJECT | FI_COMPLETION | FI_REMOTE_CQ_DATA);
    });
  }
  // Emulation: the write, then a notification the target sees after the data
  // (send-after-write ordering, checked when the fabric opened). The caller's
  // completion is the write's.
  Status st = detail::post(c, "write_imm (write)", s, [&](lf::OpSlot *slot) {
    return fi_write(c.ep.get(), src.ptr, src.len, src.desc, c.peer, dst.addr + offset, dst.key,
                    slot);
  });
  if (st != Status::Ok)
    return st;
  return c.send_control(lf::CtlNotify, imm, static_cast<uint32_t>(src.len), 0, false);
}

Status Operations::read(const LocalRef &dst, const RemoteBuffer &src, uint64_t offset,
                        uint64_t context) noexcept {
  detail::ConnectionImpl &c = *impl_;
  if (!c.open || c.peer_closed)
    return Status::Closed;
  if (!in_bounds(src, offset, dst.len)) {
    c.set_error("read of %zu bytes at offset %llu exceeds the remote buffer (%llu bytes)", dst.len,
                static_cast<unsigned long long>(offset), static_cast<unsigned long long>(src.size));
    return Status::InvalidArgument;
  }
  lf::OpSlot *s = c.take_slot(context, OpKind::Read, false);
  if (!s)
    return Status::Again;
  return detail::post(c, "read", s, [&](lf::OpSlot *slot) {
    return fi_read(c.ep.get(), dst.ptr, dst.len, dst.desc, c.peer, src.addr + offset, src.key,
                   slot);
  });
}

namespace {
Status check_atomic(detail::ConnectionImpl &c, const LocalRef &result, const RemoteBuffer &target,
                    uint64_t offset, const char *what) {
  if (!c.open || c.peer_closed)
    return Status::Closed;
  if (!c.fab->caps.atomics) {
    c.set_error("%s: this fabric has no remote atomics (capability 'atomics' is %s)", what,
                c.fab->mask.disables(CapAtomics) ? "masked off" : "not offered by the provider");
    return Status::Unsupported;
  }
  if (result.len < 8 || !in_bounds(target, offset, 8) || ((target.addr + offset) & 7)) {
    c.set_error("%s: needs an 8-byte result and an aligned 8-byte target inside the buffer", what);
    return Status::InvalidArgument;
  }
  return Status::Ok;
}
} // namespace

Status Operations::fetch_add(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                             uint64_t add, uint64_t context) noexcept {
  detail::ConnectionImpl &c = *impl_;
  Status chk = check_atomic(c, result, target, offset, "fetch_add");
  if (chk != Status::Ok)
    return chk;
  lf::OpSlot *s = c.take_slot(context, OpKind::FetchAdd, false);
  if (!s)
    return Status::Again;
  uint64_t *operand = c.operand(s);
  operand[0] = add;
  void *desc = c.ctl_desc();
  // verbs reads the operand from the pointer value itself (provider_table.hpp).
  const void *buf = lf::quirk_atomic_operands_by_value(c.fab->provider)
                        ? reinterpret_cast<const void *>(static_cast<uintptr_t>(add))
                        : operand;
  return detail::post(c, "fetch_add", s, [&](lf::OpSlot *slot) {
    return fi_fetch_atomic(c.ep.get(), buf, 1, desc, result.ptr, result.desc, c.peer,
                           target.addr + offset, target.key, FI_UINT64, FI_SUM, slot);
  });
}

Status Operations::compare_swap(const LocalRef &result, const RemoteBuffer &target, uint64_t offset,
                                uint64_t compare, uint64_t swap, uint64_t context) noexcept {
  detail::ConnectionImpl &c = *impl_;
  Status chk = check_atomic(c, result, target, offset, "compare_swap");
  if (chk != Status::Ok)
    return chk;
  lf::OpSlot *s = c.take_slot(context, OpKind::CompareSwap, false);
  if (!s)
    return Status::Again;
  uint64_t *operand = c.operand(s);
  operand[0] = swap;
  operand[1] = compare;
  void *desc = c.ctl_desc();
  // verbs reads swap and compare from the pointer values (provider_table.hpp).
  const bool by_value = lf::quirk_atomic_operands_by_value(c.fab->provider);
  const void *buf =
      by_value ? reinterpret_cast<const void *>(static_cast<uintptr_t>(swap)) : operand;
  const void *cmp =
      by_value ? reinterpret_cast<const void *>(static_cast<uintptr_t>(compare)) : operand + 1;
  return detail::post(c, "compare_swap", s, [&](lf::OpSlot *slot) {
    return fi_compare_atomic(c.ep.get(), buf, 1, desc, cmp, desc, result.ptr, result.desc, c.peer,
                             target.addr + offset, target.key, FI_UINT64, FI_CSWAP, slot);
  });
}

size_t Operations::poll(Queue q, Completion *out, size_t max) noexcept {
  detail::ConnectionImpl &c = *impl_;
  size_t n = c.reap(q, out, max);
  if (n == 0 && c.prefer_yield)
    sched_yield();
  return n;
}

WaitResult Operations::wait(Queue q, Completion *out, size_t max, int timeout_ms) noexcept {
  detail::ConnectionImpl &c = *impl_;
  // quirk_dead_peer_can_hang_progress: never enter the provider for a peer
  // known dead (its lock may be held forever). A no-op for other providers.
  if (c.peer_pid && c.peer_process_gone())
    return {0, Status::Closed};
  size_t n = c.reap(q, out, max);
  if (n)
    return {n, Status::Ok};
  if (c.peer_closed || !c.ep)
    return {0, Status::Closed};
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto deadline =
      timeout_ms < 0 ? clock::time_point::max() : start + std::chrono::milliseconds(timeout_ms);
  fid_cq *cq = q == Queue::Send ? c.txcq.get() : c.rxcq.get();
  // The event queue (peer shutdown on connected endpoints) is looked at
  // between slices; completions wake the blocking read at once.
  const int slice_cap = c.eq ? 20 : 200;
  unsigned spins = 0;
  for (;;) {
    if (c.check_events()) {
      c.peer_closed = true;
      // The shutdown event can overtake completions the provider has yet to
      // write (sockets completes a send from its progress thread, possibly
      // after the peer already got it and hung up): give them a moment so a
      // finished operation is not reported as lost.
      auto grace = clock::now() + std::chrono::milliseconds(50);
      do {
        n = c.reap(q, out, max);
        if (n)
          return {n, Status::Ok};
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      } while (clock::now() < grace);
      return {0, Status::Closed};
    }
    auto now = clock::now();
    if (now >= deadline)
      return {0, Status::Timeout};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
    int slice = left > slice_cap ? slice_cap : static_cast<int>(left);
    if (c.fab->wait_cq) {
      fi_cq_data_entry buf[16];
      size_t want = max < 16 ? max : 16;
      ssize_t r = fi_cq_sread(cq, buf, want, nullptr, slice > 0 ? slice : 1);
      if (r > 0) {
        n = c.convert(q, buf, static_cast<size_t>(r), out);
      } else if (r == -FI_EAVAIL) {
        out[0] = c.convert_error(q, cq);
        n = 1;
      }
    } else {
      // No wait object (or masked off): poll with a gentle backoff so a
      // provider progress thread on the same core is not starved.
      if (c.peer_pid && c.peer_process_gone())
        return {0, Status::Closed};
      n = c.reap(q, out, max);
      if (!n) {
        if (++spins < 64)
          sched_yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(spins < 1024 ? 20 : 200));
      }
    }
    if (n)
      return {n, Status::Ok};
    if (c.peer_closed)
      return {0, Status::Closed};
  }
}

const char *Operations::last_error() const noexcept {
  return impl_ ? impl_->last_error : "no connection";
}

} // namespace rdmalib
