// The verbs backend's data path: ibv_post_send / ibv_post_recv and
// ibv_poll_cq for the front end's contract (frontend/contract.hpp), inline so
// that they compile into the public calls of frontend/operations.cpp. The
// slow and rare paths (failed completions, a full queue, sleeping on the
// completion channel) are in operations.cpp. Included at the end of
// backend.hpp.
#pragma once

#include <arpa/inet.h>

namespace rdmalib::detail {

namespace vbd {

constexpr int kPollBatch = 16;
constexpr int kRecvBatch = 16;

inline uint32_t lkey_of(const LocalRef &r) noexcept {
  return r.desc ? static_cast<const ibv_mr *>(r.desc)->lkey : 0;
}

inline ibv_sge sge_of(const LocalRef &r) noexcept {
  return ibv_sge{reinterpret_cast<uint64_t>(r.ptr), static_cast<uint32_t>(r.len), lkey_of(r)};
}

// An RDMA work request (write, write with immediate, read) of the `len` bytes
// of `sge` at the peer's (addr, key). A zero-length one carries no scatter
// entry: not every device reads an entry of length 0 as an empty transfer.
inline ibv_send_wr rdma_wr(ibv_sge &sge, size_t len, ibv_wr_opcode op, uint64_t addr, uint64_t key,
                           unsigned send_flags) noexcept {
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = op;
  wr.send_flags = send_flags;
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = static_cast<uint32_t>(key);
  return wr;
}

} // namespace vbd

inline vb::Slot *ConnectionImpl::take_send_slot(uint64_t ctx, OpKind kind) noexcept {
  vb::Slot *s = sq.take();
  if (RDMALIB_LIKELY(s != nullptr)) {
    s->user = ctx;
    s->kind = kind;
  }
  return s;
}

inline Status ConnectionImpl::post_one(ibv_send_wr &wr, vb::Slot *slot) noexcept {
  ibv_send_wr *bad = nullptr;
  int ret = ibv_post_send(qp, &wr, &bad);
  if (RDMALIB_LIKELY(ret == 0))
    return Status::Ok;
  return post_send_failed(wr, bad, slot, ret);
}

inline uint32_t ConnectionImpl::inline_flag(bool inline_) const noexcept {
  return inline_ ? IBV_SEND_INLINE : 0;
}

inline Status ConnectionImpl::post_send(const LocalRef &src, uint64_t ctx, bool inline_) noexcept {
  vb::Slot *s = take_send_slot(ctx, OpKind::Send);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ibv_sge sge = vbd::sge_of(src);
  ibv_send_wr wr{};
  wr.wr_id = sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = src.len ? 1 : 0;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | inline_flag(inline_);
  return post_one(wr, s);
}

inline Status ConnectionImpl::post_recv(const LocalRef *dst, const uint64_t *ctx, size_t n,
                                        size_t &done) noexcept {
  done = 0;
  ibv_recv_wr wrs[vbd::kRecvBatch];
  ibv_sge sges[vbd::kRecvBatch];
  vb::Slot *taken[vbd::kRecvBatch];
  while (done < n) {
    size_t batch = 0;
    const size_t want = n - done < size_t(vbd::kRecvBatch) ? n - done : size_t(vbd::kRecvBatch);
    while (batch < want) {
      vb::Slot *s = rq.take();
      if (!s)
        break;
      const LocalRef &d = dst[done + batch];
      s->user = ctx[done + batch];
      s->buf = d.ptr;
      s->kind = OpKind::Recv;
      sges[batch] = vbd::sge_of(d);
      wrs[batch].wr_id = rq.wr_id(s);
      wrs[batch].sg_list = &sges[batch];
      wrs[batch].num_sge = d.len ? 1 : 0;
      wrs[batch].next = nullptr;
      if (batch)
        wrs[batch - 1].next = &wrs[batch];
      taken[batch] = s;
      ++batch;
    }
    if (batch == 0)
      return Status::Again; // every receive slot is posted
    ibv_recv_wr *bad = nullptr;
    int ret = ibv_post_recv(qp, wrs, &bad);
    if (RDMALIB_UNLIKELY(ret != 0)) {
      size_t ok = bad ? static_cast<size_t>(bad - wrs) : 0;
      for (size_t i = ok; i < batch; ++i)
        rq.put(taken[i]);
      done += ok;
      return post_recv_failed(ret);
    }
    done += batch;
  }
  return Status::Ok;
}

inline Status ConnectionImpl::post_write(const LocalRef &src, uint64_t addr, uint64_t key,
                                         uint64_t ctx, bool inline_) noexcept {
  vb::Slot *s = take_send_slot(ctx, OpKind::Write);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ibv_sge sge = vbd::sge_of(src);
  ibv_send_wr wr = vbd::rdma_wr(sge, src.len, IBV_WR_RDMA_WRITE, addr, key,
                                IBV_SEND_SIGNALED | inline_flag(inline_));
  wr.wr_id = sq.wr_id(s);
  return post_one(wr, s);
}

inline Status ConnectionImpl::post_write_imm(const LocalRef &src, uint64_t addr, uint64_t key,
                                             uint32_t imm, uint64_t ctx, bool inline_) noexcept {
  vb::Slot *s = take_send_slot(ctx, OpKind::WriteImm);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ibv_sge sge = vbd::sge_of(src);
  ibv_send_wr wr = vbd::rdma_wr(sge, src.len, IBV_WR_RDMA_WRITE_WITH_IMM, addr, key,
                                IBV_SEND_SIGNALED | inline_flag(inline_));
  wr.wr_id = sq.wr_id(s);
  // The immediate travels in network byte order; the API's value is host order.
  wr.imm_data = htonl(imm);
  return post_one(wr, s);
}

inline Status ConnectionImpl::post_write_notify(const LocalRef &src, uint64_t addr, uint64_t key,
                                                uint32_t imm, uint64_t ctx, bool inline_) noexcept {
  // An unsignaled write, then a notification send, in one post. RC executes
  // them in order, so the data is in place when the notification's receive
  // completes at the target. The slot (and the caller's completion) is the
  // notification's.
  vb::Slot *s = take_send_slot(ctx, OpKind::WriteImm);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  const size_t idx = static_cast<size_t>(s - sq.slots.data());
  auto *m = reinterpret_cast<ControlMessage *>(ctl_mem.data() + idx * sizeof(ControlMessage));
  *m = control_message(ControlType::Notify, imm, static_cast<uint32_t>(src.len));
  ibv_sge sge = vbd::sge_of(src);
  ibv_sge msge{reinterpret_cast<uint64_t>(m), sizeof(ControlMessage), ctl_mr->lkey};
  ibv_send_wr wr[2]{};
  wr[0] = vbd::rdma_wr(sge, src.len, IBV_WR_RDMA_WRITE, addr, key, inline_flag(inline_));
  wr[0].wr_id = vb::kInternalWrId;
  wr[0].next = &wr[1];
  wr[1].wr_id = sq.wr_id(s);
  wr[1].sg_list = &msge;
  wr[1].num_sge = 1;
  wr[1].opcode = IBV_WR_SEND;
  wr[1].send_flags = IBV_SEND_SIGNALED;
  return post_one(wr[0], s);
}

inline Status ConnectionImpl::post_read(const LocalRef &dst, uint64_t addr, uint64_t key,
                                        uint64_t ctx) noexcept {
  vb::Slot *s = take_send_slot(ctx, OpKind::Read);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ibv_sge sge = vbd::sge_of(dst);
  ibv_send_wr wr = vbd::rdma_wr(sge, dst.len, IBV_WR_RDMA_READ, addr, key, IBV_SEND_SIGNALED);
  wr.wr_id = sq.wr_id(s);
  return post_one(wr, s);
}

inline Status ConnectionImpl::post_atomic(OpKind kind, const LocalRef &result, uint64_t addr,
                                          uint64_t key, uint64_t operand, uint64_t compare,
                                          uint64_t ctx) noexcept {
  vb::Slot *s = take_send_slot(ctx, kind);
  if (RDMALIB_UNLIKELY(!s))
    return Status::Again;
  ibv_sge sge{reinterpret_cast<uint64_t>(result.ptr), sizeof(uint64_t), vbd::lkey_of(result)};
  ibv_send_wr wr{};
  wr.wr_id = sq.wr_id(s);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic.remote_addr = addr;
  wr.wr.atomic.rkey = static_cast<uint32_t>(key);
  if (kind == OpKind::FetchAdd) {
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.compare_add = operand;
  } else {
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    wr.wr.atomic.compare_add = compare;
    wr.wr.atomic.swap = operand;
  }
  return post_one(wr, s);
}

inline size_t ConnectionImpl::convert(Queue q, const ibv_wc *wc, size_t n,
                                      Completion *out) noexcept {
  vb::SlotPool &pool = q == Queue::Send ? sq : rq;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    const ibv_wc &w = wc[i];
    if (RDMALIB_UNLIKELY(w.wr_id == vb::kInternalWrId)) {
      // The unsignaled write of an emulated write_imm only completes when it
      // failed; the notification after it is flushed and reports to the user.
      internal_failed(w);
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
        } else if (RDMALIB_UNLIKELY(decode_control(s.buf, w.byte_len, o))) {
          if (o.kind == OpKind::PeerClosed) {
            peer_close_reported = true;
            on_peer_closed();
          }
        } else if (w.wc_flags & IBV_WC_WITH_IMM) {
          o.imm = ntohl(w.imm_data); // a send-with-immediate from a non-rdmalib peer
        }
      }
    } else {
      failed(q, w, s, o);
    }
    pool.put(&s);
  }
  return k;
}

inline size_t ConnectionImpl::reap_plain(Queue q, Completion *out, size_t max) noexcept {
  ibv_cq *cq = q == Queue::Send ? send_cq.get() : recv_cq.get();
  if (RDMALIB_UNLIKELY(!cq))
    return 0;
  ibv_wc wc[vbd::kPollBatch];
  size_t total = 0;
  while (total < max) {
    int want = static_cast<int>(max - total < size_t(vbd::kPollBatch) ? max - total
                                                                      : size_t(vbd::kPollBatch));
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

} // namespace rdmalib::detail
