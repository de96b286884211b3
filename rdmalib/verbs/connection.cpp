// Connection on verbs: an RC queue pair set up by rdma_cm, with its own rdma_cm
// event channel (so that a peer's disconnect is observable per connection),
// one completion queue and completion channel per direction, and slot pools
// that map work completions back to callers' contexts.
#include "backend.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <unistd.h>

#include <spdlog/spdlog.h>

#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>

namespace rdmalib {

namespace detail {

void ConnectionImpl::check_device(const char *side) const {
  if (id->verbs != fab->ctx)
    throw Error(ErrorKind::Backend,
                std::string("rdmalib verbs: ") + side + " " + remote.to_string() +
                    " goes through " +
                    (id->verbs ? ibv_get_device_name(id->verbs->device) : "no RDMA device") +
                    ", but this Fabric opened " + fab->device_name +
                    "; set the device config's ip_address to an address of " + fab->device_name);
}

void ConnectionImpl::create_resources() {
  const uint32_t send_depth = options.send_depth ? options.send_depth : 64;
  recv_depth = options.recv_depth ? options.recv_depth
                                  : (fab->config.default_receive_buffer_size
                                         ? fab->config.default_receive_buffer_size
                                         : 32);
  // An emulated write-with-immediate puts two work requests (the unsignaled
  // write and the notification) on the send queue for one slot; an unsignaled
  // write that fails still produces a completion.
  const uint32_t wr_per_slot = fab->emulate_imm ? 2 : 1;

  ibv_comp_channel *ch = ibv_create_comp_channel(fab->ctx);
  if (!ch)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_create_comp_channel", errno);
  send_channel.reset(ch);
  ch = ibv_create_comp_channel(fab->ctx);
  if (!ch)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_create_comp_channel", errno);
  recv_channel.reset(ch);
  vb::set_nonblocking(send_channel->fd, "a completion channel");
  vb::set_nonblocking(recv_channel->fd, "a completion channel");
  send_cq.create(fab->ctx, static_cast<int>(send_depth * wr_per_slot), send_channel.get(),
                 "send queue");
  recv_cq.create(fab->ctx, static_cast<int>(recv_depth), recv_channel.get(), "receive queue");

  sq.init(send_depth, 0);
  rq.init(recv_depth, send_depth);

  if (fab->emulate_imm) {
    ctl_mem.assign(send_depth * sizeof(ControlMessage), 0);
    ibv_mr *mr = ibv_reg_mr(fab->pd.get(), ctl_mem.data(), ctl_mem.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
      vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: ibv_reg_mr (notification buffers)",
                      errno);
    ctl_mr.reset(mr);
  }

  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq.get();
  attr.recv_cq = recv_cq.get();
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = send_depth * wr_per_slot;
  attr.cap.max_recv_wr = recv_depth;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.cap.max_inline_data = static_cast<uint32_t>(fab->caps.max_inline);
  if (rdma_create_qp(id.get(), fab->pd.get(), &attr))
    vb::throw_errno(ErrorKind::Backend,
                    "rdmalib verbs: rdma_create_qp (send " + std::to_string(attr.cap.max_send_wr) +
                        ", recv " + std::to_string(recv_depth) + ") on " + fab->device_name,
                    errno);
  qp = id->qp;
}

void ConnectionImpl::close() noexcept {
  if (wait_epoll >= 0)
    ::close(wait_epoll);
  wait_epoll = -2;
  if (!id && !qp)
    return;
  if (open && !peer_closed && id) {
    // Sends a DREQ (the peer sees RDMA_CM_EVENT_DISCONNECTED) and moves our
    // QP to the error state, flushing what is still posted.
    rdma_disconnect(id.get());
  }
  open = false;
  local_closed = true;
  if (qp && id) {
    rdma_destroy_qp(id.get());
    qp = nullptr;
  }
  recv_cq.reset();
  send_cq.reset();
  recv_channel.reset();
  send_channel.reset();
  ctl_mr.reset();
  id.reset();
  events.reset();
}

} // namespace detail

namespace detail {

void ConnectionImpl::connect(const Address &remote, const void *private_data, size_t private_len,
                             const Deadline &deadline) {
  ConnectionImpl *c = this;
  const std::string where = remote.to_string();
  const auto timeout = deadline.remaining();

  rdma_event_channel *ch = rdma_create_event_channel();
  if (!ch)
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_event_channel", errno);
  c->events.reset(ch);
  vb::set_nonblocking(ch->fd, "the rdma_cm event channel");
  vb::AddrInfo dst = vb::resolve(remote, false);
  // Bind the source address when the device config has one: with two devices
  // on one host, rdma_cm would otherwise route a local destination through
  // the destination's own device.
  vb::AddrInfo src;
  if (!fab->config.ip_address.empty())
    src = vb::resolve(Address{fab->config.ip_address, 0}, true);

  auto fail_event = [&](const rdma_cm_event &ev, const char *step) {
    std::string text =
        "rdmalib verbs: connect to " + where + " failed during " + step + ": " + vb::event_text(ev);
    switch (ev.event) {
    case RDMA_CM_EVENT_REJECTED:
    case RDMA_CM_EVENT_UNREACHABLE:
      throw Error(ErrorKind::Refused, text, ev.status < 0 ? -ev.status : ev.status);
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
      throw Error(ErrorKind::NotFound, text, ev.status < 0 ? -ev.status : ev.status);
    default:
      throw Error(ErrorKind::Backend, text, ev.status < 0 ? -ev.status : ev.status);
    }
  };
  auto wait_for = [&](rdma_cm_event_type want, const char *step, std::vector<uint8_t> *pdata) {
    rdma_cm_event ev{};
    if (!vb::next_cm_event(ch, deadline, ev, pdata))
      throw Error(ErrorKind::Timeout, "rdmalib verbs: connect to " + where + " timed out after " +
                                          std::to_string(timeout.count()) + " ms during " + step);
    if (ev.event != want)
      fail_event(ev, step);
  };

  // Address resolution waits for the neighbour (ARP) entry, and the kernel
  // re-checks a pending entry only when its own timeout expires: one long
  // attempt would sit out the whole deadline on a cold neighbour cache. So
  // resolve with short, growing attempts on a fresh id each, until the deadline.
  for (int attempt_ms = 100;; attempt_ms = std::min(attempt_ms * 2, 2000)) {
    rdma_cm_id *raw = nullptr;
    c->id.reset();
    if (rdma_create_id(ch, &raw, c, RDMA_PS_TCP))
      vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_create_id", errno);
    c->id.reset(raw);
    int ms = std::max(1, std::min(attempt_ms, deadline.remaining_ms()));
    if (rdma_resolve_addr(c->id.get(), src ? src->ai_src_addr : nullptr, dst->ai_dst_addr, ms))
      vb::throw_errno(ErrorKind::NotFound, "rdmalib verbs: rdma_resolve_addr " + where, errno);
    rdma_cm_event ev{};
    if (!vb::next_cm_event(ch, deadline, ev, nullptr))
      throw Error(ErrorKind::Timeout, "rdmalib verbs: connect to " + where + " timed out after " +
                                          std::to_string(timeout.count()) +
                                          " ms during address resolution");
    if (ev.event == RDMA_CM_EVENT_ADDR_RESOLVED)
      break;
    const bool retry = ev.event == RDMA_CM_EVENT_ADDR_ERROR &&
                       (ev.status == -ETIMEDOUT || ev.status == -ENODATA) && !deadline.passed();
    if (!retry) {
      if (ev.event == RDMA_CM_EVENT_ADDR_ERROR && ev.status == -ETIMEDOUT)
        throw Error(ErrorKind::Timeout, "rdmalib verbs: connect to " + where + " timed out after " +
                                            std::to_string(timeout.count()) +
                                            " ms during address resolution (no neighbour entry)");
      fail_event(ev, "address resolution");
    }
  }
  c->check_device("route to");
  if (rdma_resolve_route(c->id.get(), deadline.remaining_ms(60000) + 1))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_resolve_route " + where, errno);
  wait_for(RDMA_CM_EVENT_ROUTE_RESOLVED, "route resolution", nullptr);

  c->create_resources();

  uint8_t framed[vb::kPrivateHeader + vb::kMaxPrivateData];
  vb::frame_private(private_data, private_len, framed);
  rdma_conn_param param{};
  param.private_data = framed;
  param.private_data_len = static_cast<uint8_t>(vb::kPrivateHeader + private_len);
  param.responder_resources = fab->rd_atomic;
  param.initiator_depth = fab->rd_atomic;
  param.retry_count = 7;
  param.rnr_retry_count = 7; // 7 = retry forever: the peer may post receives late
  if (rdma_connect(c->id.get(), &param))
    vb::throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_connect " + where, errno);
  std::vector<uint8_t> reply;
  wait_for(RDMA_CM_EVENT_ESTABLISHED, "connection establishment", &reply);
  c->peer_private = vb::unframe_private(reply, "the server at " + where);
}

} // namespace detail

} // namespace rdmalib
