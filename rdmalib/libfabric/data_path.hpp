// The libfabric backend's data path: the posts, completion reading and
// conversion of the front end's contract (frontend/contract.hpp), inline so
// that they compile into the public calls of frontend/operations.cpp. The
// slow and rare paths (errors, progress for a full queue, sleeping) are in
// operations.cpp. Included at the end of backend.hpp.
#pragma once

#include <rdma/fi_atomic.h>
#include <rdma/fi_rma.h>

namespace rdmalib::detail {

inline ssize_t ConnectionImpl::post_receive(void *buf, size_t len, void *desc, lf::OpSlot *s,
                                            uint64_t flags) noexcept {
  s->buf = buf;
  s->cap = len;
  const lf::RecvOverflow &ov = fab->overflow;
  if (RDMALIB_UNLIKELY(sh)) {
    // Only the handshake's answer comes to a link's own receive on the
    // shared endpoint, tagged with its id alone (no pool bit).
    if (!flags && !ov.base)
      return fi_trecv(ep.get(), buf, len, desc, FI_ADDR_UNSPEC, link_id, 0, s);
    iovec iov[3] = {{buf, len}, {ov.base, ov.scratch}, {ov.base + ov.scratch, ov.guard}};
    void *descs[3] = {desc, nullptr, nullptr};
    fi_msg_tagged msg{iov, descs, ov.iovs, FI_ADDR_UNSPEC, link_id, 0, s, 0};
    return fi_trecvmsg(ep.get(), &msg, flags);
  }
  if (RDMALIB_LIKELY(!ov.base)) {
    // The single repost after each message takes the provider's plainest
    // entry point.
    if (!flags)
      return fi_recv(ep.get(), buf, len, desc, FI_ADDR_UNSPEC, s);
    iovec iov{buf, len};
    fi_msg msg{&iov, &desc, 1, FI_ADDR_UNSPEC, s, 0};
    return fi_recvmsg(ep.get(), &msg, flags);
  }
  rx_iov[0] = iovec{buf, len};
  rx_descs[0] = desc;
  rx_msg.context = s;
  return fi_recvmsg(ep.get(), &rx_msg, flags);
}

// On a freshly accepted shared link every transmit is held until the peer
// confirmed the handshake (hold_tx), so that nothing arrives before the peer
// can name its source; the arguments make the HeldOp that keeps it.
#define RDMALIB_LF_HOLD(...)                                                                       \
  if (RDMALIB_UNLIKELY(hold_tx)) {                                                                 \
    Status hst;                                                                                    \
    if (hold(lf::HeldOp(__VA_ARGS__), hst))                                                        \
      return hst;                                                                                  \
  }
// Every transmit first posts what an emulated write-with-immediate still
// owes (pending_count is 0 but for a full queue), so that nothing overtakes
// a notification.
#define RDMALIB_LF_FLUSH()                                                                         \
  if (RDMALIB_UNLIKELY(pending_count) && !flush_pending())                                         \
    return Status::Again;

inline Status ConnectionImpl::post_send(const LocalRef &src, uint64_t ctx, bool inline_) noexcept {
  RDMALIB_LF_HOLD(OpKind::Send, inline_, false, src, 0, 0, 0, 0, ctx);
  RDMALIB_LF_FLUSH();
  if (RDMALIB_UNLIKELY(sh) && src.len > lf::kPoolMessage)
    return post_send_large(src, ctx);
  lf::OpSlot *s = take_slot(ctx, OpKind::Send, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ssize_t ret;
  if (RDMALIB_UNLIKELY(sh)) {
    iovec iov{src.ptr, src.len};
    void *desc = src.desc;
    fi_msg_tagged msg{&iov, &desc, 1, peer, pool_tag(), 0, s, 0};
    ret = inline_ ? fi_tsendmsg(ep.get(), &msg, FI_INJECT | FI_COMPLETION)
                  : fi_tsend(ep.get(), src.ptr, src.len, src.desc, peer, pool_tag(), s);
  } else if (!inline_) {
    ret = fi_send(ep.get(), src.ptr, src.len, src.desc, peer, s);
  } else {
    iovec iov{src.ptr, src.len};
    void *desc = src.desc;
    fi_msg msg{&iov, &desc, 1, peer, s, 0};
    ret = fi_sendmsg(ep.get(), &msg, FI_INJECT | FI_COMPLETION);
  }
  return posted(ret, s, "send");
}

inline Status ConnectionImpl::post_recv(const LocalRef *dst, const uint64_t *ctx, size_t n,
                                        size_t &done) noexcept {
  done = 0;
  if (RDMALIB_UNLIKELY(sh))
    return post_recv_pooled(dst, ctx, n, done);
  if (RDMALIB_LIKELY(n == 1)) {
    // The repost after each message: no batch, no FI_MORE.
    lf::OpSlot *s = take_slot(ctx[0], OpKind::Recv, false);
    if (RDMALIB_UNLIKELY(!s))
      return Status::Again;
    Status st = posted(post_receive(dst->ptr, dst->len, dst->desc, s, 0), s, "post_recv");
    done = st == Status::Ok;
    return st;
  }
  // As many as the pool has room for; FI_MORE lets the provider batch the
  // doorbell, and the last of the batch flushes it.
  const size_t room = rx_free.limit - rx_free.used;
  const size_t batch = n < room ? n : room;
  for (size_t i = 0; i < batch; ++i) {
    lf::OpSlot *s = take_slot(ctx[i], OpKind::Recv, false);
    if (RDMALIB_UNLIKELY(!s))
      return Status::Again;
    uint64_t more = i + 1 < batch ? FI_MORE : 0;
    Status st = posted(post_receive(dst[i].ptr, dst[i].len, dst[i].desc, s, more), s, "post_recv");
    if (RDMALIB_UNLIKELY(st != Status::Ok))
      return st;
    ++done;
  }
  return done == n ? Status::Ok : Status::Again;
}

inline Status ConnectionImpl::post_write(const LocalRef &src, uint64_t addr, uint64_t key,
                                         uint64_t ctx, bool inline_) noexcept {
  RDMALIB_LF_HOLD(OpKind::Write, inline_, false, src, addr, key, 0, 0, ctx);
  return post_rma_write(OpKind::Write, src, addr, key, ctx, inline_);
}

inline Status ConnectionImpl::post_rma_write(OpKind kind, const LocalRef &src, uint64_t addr,
                                             uint64_t key, uint64_t ctx, bool inline_) noexcept {
  RDMALIB_LF_FLUSH();
  lf::OpSlot *s = take_slot(ctx, kind, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ssize_t ret;
  if (!inline_) {
    ret = fi_write(ep.get(), src.ptr, src.len, src.desc, peer, addr, key, s);
  } else {
    iovec iov{src.ptr, src.len};
    void *desc = src.desc;
    fi_rma_iov rma{addr, src.len, key};
    fi_msg_rma msg{&iov, &desc, 1, peer, &rma, 1, s, 0};
    ret = fi_writemsg(ep.get(), &msg, FI_INJECT | FI_COMPLETION);
  }
  return posted(ret, s, "write");
}

inline Status ConnectionImpl::post_write_imm(const LocalRef &src, uint64_t addr, uint64_t key,
                                             uint32_t imm, uint64_t ctx, bool inline_) noexcept {
  RDMALIB_LF_HOLD(OpKind::WriteImm, inline_, false, src, addr, key, 0, 0, ctx, imm);
  RDMALIB_LF_FLUSH();
  lf::OpSlot *s = take_slot(ctx, OpKind::WriteImm, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  // On a shared endpoint the upper half names the target's link.
  const uint64_t data = imm | (static_cast<uint64_t>(peer_link) << 32);
  ssize_t ret;
  if (!inline_) {
    ret = fi_writedata(ep.get(), src.ptr, src.len, src.desc, data, peer, addr, key, s);
  } else {
    iovec iov{src.ptr, src.len};
    void *desc = src.desc;
    fi_rma_iov rma{addr, src.len, key};
    fi_msg_rma msg{&iov, &desc, 1, peer, &rma, 1, s, data};
    ret = fi_writemsg(ep.get(), &msg, FI_INJECT | FI_COMPLETION | FI_REMOTE_CQ_DATA);
  }
  return posted(ret, s, "write_imm");
}

inline Status ConnectionImpl::post_write_notify(const LocalRef &src, uint64_t addr, uint64_t key,
                                                uint32_t imm, uint64_t ctx, bool inline_) noexcept {
  // The write carries the caller's context; its notification follows, in
  // the order the endpoint guarantees (send after write), and is rdmalib's
  // own. When the provider cannot take the notification at once, it is
  // owed (PendingNotify) and posted before anything else.
  RDMALIB_LF_HOLD(OpKind::WriteImm, inline_, true, src, addr, key, 0, 0, ctx, imm);
  if (RDMALIB_UNLIKELY(pending_count == pending.size()))
    return flush_pending() ? post_write_notify(src, addr, key, imm, ctx, inline_) : Status::Again;
  Status st = post_rma_write(OpKind::WriteImm, src, addr, key, ctx, inline_);
  if (RDMALIB_UNLIKELY(st != Status::Ok))
    return st;
  const uint32_t length = static_cast<uint32_t>(src.len);
  if (RDMALIB_LIKELY(!pending_count)) {
    ssize_t ret = post_notify(imm, length);
    if (RDMALIB_LIKELY(ret == 0))
      return Status::Ok;
    if (ret != -FI_EAGAIN) {
      post_failed(ret, "write_imm (notification)");
      // The write is posted and completes for the caller; the target will
      // not learn of it: the link is unusable.
      peer_closed = true;
      ended_here = true;
      return Status::Ok;
    }
  }
  pending[(pending_head + pending_count++) % pending.size()] = lf::PendingNotify{imm, length};
  detour = true;
  if (sh)
    list_owed();
  return Status::Ok;
}

inline Status ConnectionImpl::post_read(const LocalRef &dst, uint64_t addr, uint64_t key,
                                        uint64_t ctx) noexcept {
  RDMALIB_LF_HOLD(OpKind::Read, false, false, dst, addr, key, 0, 0, ctx);
  RDMALIB_LF_FLUSH();
  lf::OpSlot *s = take_slot(ctx, OpKind::Read, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  return posted(fi_read(ep.get(), dst.ptr, dst.len, dst.desc, peer, addr, key, s), s, "read");
}

inline Status ConnectionImpl::post_atomic(OpKind kind, const LocalRef &result, uint64_t addr,
                                          uint64_t key, uint64_t operand, uint64_t compare,
                                          uint64_t ctx) noexcept {
  RDMALIB_LF_HOLD(kind, false, false, result, addr, key, operand, compare, ctx);
  RDMALIB_LF_FLUSH();
  lf::OpSlot *s = take_slot(ctx, kind, false);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  uint64_t *area = this->operand(s);
  area[0] = operand;
  area[1] = compare;
  void *desc = ctl_desc();
  // Quirks::atomic_operands_by_value: the provider reads the operands from
  // the pointer values themselves.
  const bool by_value = fab->quirks.atomic_operands_by_value;
  const void *buf =
      by_value ? reinterpret_cast<const void *>(static_cast<uintptr_t>(operand)) : area;
  ssize_t ret;
  if (kind == OpKind::FetchAdd) {
    ret = fi_fetch_atomic(ep.get(), buf, 1, desc, result.ptr, result.desc, peer, addr, key,
                          FI_UINT64, FI_SUM, s);
  } else {
    const void *cmp =
        by_value ? reinterpret_cast<const void *>(static_cast<uintptr_t>(compare)) : area + 1;
    ret = fi_compare_atomic(ep.get(), buf, 1, desc, cmp, desc, result.ptr, result.desc, peer, addr,
                            key, FI_UINT64, FI_CSWAP, s);
  }
  return posted(ret, s, kind == OpKind::FetchAdd ? "fetch_add" : "compare_swap");
}

#undef RDMALIB_LF_HOLD
#undef RDMALIB_LF_FLUSH

inline size_t ConnectionImpl::convert(Queue q, const fi_cq_data_entry *e, size_t n,
                                      Completion *out) noexcept {
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const fi_cq_data_entry &en = e[i];
    auto *s = static_cast<lf::OpSlot *>(en.op_context);
    if (q == Queue::Send) {
      if (RDMALIB_UNLIKELY(!s))
        continue;
      if (RDMALIB_LIKELY(!s->internal))
        out[k++] = Completion{s->user, 0, 0, s->kind, Status::Ok};
      put_slot(s);
      continue;
    }
    // Receive side. A native write-with-immediate shows as remote write +
    // remote CQ data (sockets also flags the sender's own completion with
    // FI_REMOTE_CQ_DATA, hence both bits); it owns a posted receive only on
    // FI_RX_CQ_DATA providers.
    //
    // Completions are written field by field where they land: one built
    // aside and copied was stored in pieces and read back in one wide load,
    // a store-forwarding stall on every message (~1-2 % of a shm round trip,
    // measured in the same process against this form).
    if ((en.flags & FI_REMOTE_CQ_DATA) && (en.flags & FI_REMOTE_WRITE)) {
      Completion &c = out[k++];
      c.context = 0;
      c.length = static_cast<uint32_t>(en.len);
      c.imm = static_cast<uint32_t>(en.data);
      c.kind = OpKind::RemoteWriteImm;
      c.status = Status::Ok;
      if (fab->rx_cq_data && s) {
        c.context = s->user;
        put_slot(s);
      }
      continue;
    }
    if (RDMALIB_UNLIKELY(!s))
      continue;
    if (RDMALIB_UNLIKELY(s->internal)) {
      // Handshake receives are consumed by wait_internal, never here.
      put_slot(s);
      continue;
    }
    Completion &c = out[k++];
    c.context = s->user;
    c.length = static_cast<uint32_t>(en.len);
    c.imm = 0;
    c.kind = OpKind::Recv;
    c.status = Status::Ok;
    if (RDMALIB_UNLIKELY(en.len > s->cap)) {
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
    } else if (RDMALIB_UNLIKELY(decode_control(s->buf, en.len, c)) &&
               c.kind == OpKind::PeerClosed) {
      set_error("the peer %s closed the connection", remote.to_string().c_str());
      peer_closed = true;
      peer_close_reported = true;
    }
    put_slot(s);
  }
  return k;
}

inline size_t ConnectionImpl::reap(Queue q, Completion *out, size_t max) noexcept {
  if (RDMALIB_UNLIKELY(hold_tx)) {
    settle_held();
    // Held transmits that failed with the link: reported by this poll,
    // which ready_links may not name again.
    if (q == Queue::Send && !tx_stash.empty())
      return tx_stash.pop(out, max);
  }
  if (RDMALIB_UNLIKELY(pending_count))
    flush_pending();
  if (RDMALIB_UNLIKELY(answer_pending))
    retry_answer();
  if (RDMALIB_UNLIKELY(answer_failed) && q == Queue::Recv && max > 0) {
    // Reported once, as a failed receive carrying the reason (last_error).
    answer_failed = false;
    out[0] = Completion{0, 0, 0, OpKind::Recv, Status::Error};
    return 1;
  }
  if (RDMALIB_UNLIKELY(peer_dead))
    return 0;
  if (sh)
    return reap_shared(q, out, max);
  return reap_plain(q, out, max);
}

inline size_t ConnectionImpl::reap_plain(Queue q, Completion *out, size_t max) noexcept {
  fid_cq *cq = q == Queue::Send ? txcq.get() : rxcq.get();
  // One read: on tcp every fi_cq_read is a progress pass with syscalls, so a
  // second read after a hit costs microseconds per message.
  fi_cq_data_entry buf[16];
  ssize_t r = fi_cq_read(cq, buf, max < 16 ? max : 16);
  if (RDMALIB_LIKELY(r == -FI_EAGAIN))
    return 0;
  if (RDMALIB_LIKELY(r > 0)) {
    size_t n = convert(q, buf, static_cast<size_t>(r), out);
    if (RDMALIB_LIKELY(n))
      return n;
  }
  return reap_more(q, cq, r, out, max);
}

} // namespace rdmalib::detail
