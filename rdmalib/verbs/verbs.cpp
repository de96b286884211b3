// Helpers of the verbs backend: RAII deleters, error text, address
// resolution, rdma_cm event waiting and private data framing.
#include "backend.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "common/logging.hpp"
#include <spdlog/spdlog.h>

namespace rdmalib::vb {

void EventChannelDeleter::operator()(rdma_event_channel *p) const noexcept {
  if (p)
    rdma_destroy_event_channel(p); // returns void
}

void CmIdDeleter::operator()(rdma_cm_id *p) const noexcept {
  if (p && rdma_destroy_id(p))
    rdmalib::logger().warn("rdmalib verbs: rdma_destroy_id failed: {}", std::strerror(errno));
}

void CompChannelDeleter::operator()(ibv_comp_channel *p) const noexcept {
  if (p) {
    int ret = ibv_destroy_comp_channel(p);
    if (ret)
      rdmalib::logger().warn("rdmalib verbs: ibv_destroy_comp_channel failed: {}",
                             std::strerror(ret > 0 ? ret : errno));
  }
}

void MrDeleter::operator()(ibv_mr *p) const noexcept {
  if (p) {
    int ret = ibv_dereg_mr(p);
    if (ret)
      rdmalib::logger().warn("rdmalib verbs: ibv_dereg_mr failed: {}", std::strerror(ret));
  }
}

void PdDeleter::operator()(ibv_pd *p) const noexcept {
  if (p) {
    int ret = ibv_dealloc_pd(p);
    if (ret)
      rdmalib::logger().warn("rdmalib verbs: ibv_dealloc_pd failed (a memory region or queue pair "
                             "outlived its Fabric?): {}",
                             std::strerror(ret));
  }
}

void AddrInfoDeleter::operator()(rdma_addrinfo *p) const noexcept {
  if (p)
    rdma_freeaddrinfo(p);
}

void DeviceListDeleter::operator()(ibv_context **p) const noexcept {
  if (p)
    rdma_free_devices(p);
}

void Cq::create(ibv_context *ctx, int entries, ibv_comp_channel *channel, const char *what) {
  reset();
  cq_ = ibv_create_cq(ctx, entries, nullptr, channel, 0);
  if (!cq_)
    throw_errno(ErrorKind::Backend,
                std::string("rdmalib verbs: ibv_create_cq (") + what + ", " +
                    std::to_string(entries) + " entries)",
                errno);
}

void Cq::event_received() noexcept {
  // Acknowledging takes a mutex inside libibverbs: do it in batches.
  if (++unacked_ >= 64) {
    ibv_ack_cq_events(cq_, unacked_);
    unacked_ = 0;
  }
}

void Cq::reset() noexcept {
  if (!cq_)
    return;
  if (unacked_)
    ibv_ack_cq_events(cq_, unacked_);
  unacked_ = 0;
  int ret = ibv_destroy_cq(cq_);
  if (ret)
    rdmalib::logger().warn("rdmalib verbs: ibv_destroy_cq failed: {}", std::strerror(ret));
  cq_ = nullptr;
}

std::string errno_text(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

void throw_errno(ErrorKind kind, const std::string &what, int err) {
  throw Error(kind, what + ": " + errno_text(err), err);
}

Address sockaddr_address(const sockaddr *sa) {
  Address a;
  char host[INET6_ADDRSTRLEN] = "?";
  if (!sa)
    return Address{"?", 0};
  if (sa->sa_family == AF_INET) {
    auto *in = reinterpret_cast<const sockaddr_in *>(sa);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    a.port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto *in6 = reinterpret_cast<const sockaddr_in6 *>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    a.port = ntohs(in6->sin6_port);
  }
  a.host = host;
  return a;
}

AddrInfo resolve(const Address &a, bool passive) {
  if (a.opaque())
    throw Error(ErrorKind::Config,
                "rdmalib verbs: " + a.to_string() +
                    " is a libfabric endpoint name; librdmacm reaches peers by IP address "
                    "(host:port)");
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  if (passive)
    hints.ai_flags = RAI_PASSIVE;
  std::string port = std::to_string(a.port);
  const char *host = a.host.empty() ? nullptr : a.host.c_str();
  rdma_addrinfo *res = nullptr;
  if (rdma_getaddrinfo(host, port.c_str(), &hints, &res) || !res) {
    // rdma_getaddrinfo reports getaddrinfo's codes (negative) or sets errno.
    int err = errno;
    throw Error(ErrorKind::NotFound,
                "rdmalib verbs: cannot resolve \"" + a.to_string() +
                    "\": " + (err ? errno_text(err) : std::string("unknown host")),
                err);
  }
  return AddrInfo(res);
}

void set_nonblocking(int fd, const char *what) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw_errno(ErrorKind::Backend, std::string("rdmalib verbs: fcntl(O_NONBLOCK) on ") + what,
                errno);
}

std::string event_text(const rdma_cm_event &ev) {
  std::string s = rdma_event_str(ev.event);
  if (ev.status) {
    // Negative values are errnos; for REJECTED it is the CM reject reason
    // (8 = invalid service id: nobody listens on that port; 28 = consumer
    // defined: the peer rejected, or rdma_cm's own address validation failed).
    s += " (status " + std::to_string(ev.status);
    if (ev.status < 0)
      s += ": " + std::string(std::strerror(-ev.status));
    else if (ev.event == RDMA_CM_EVENT_REJECTED && ev.status == 8)
      s += ": nobody listens on that port";
    else if (ev.event == RDMA_CM_EVENT_REJECTED && ev.status == 28)
      s += ": rejected by the peer";
    s += ")";
  }
  return s;
}

bool next_cm_event(rdma_event_channel *ch, const Deadline &deadline, rdma_cm_event &out,
                   std::vector<uint8_t> *private_data) {
  for (;;) {
    rdma_cm_event *ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) == 0) {
      out = *ev;
      if (private_data) {
        private_data->clear();
        // Connection events carry the peer's private data; the pointer is
        // only valid until the event is acknowledged.
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
            ev->event == RDMA_CM_EVENT_REJECTED) {
          const auto *p = static_cast<const uint8_t *>(ev->param.conn.private_data);
          if (p && ev->param.conn.private_data_len)
            private_data->assign(p, p + ev->param.conn.private_data_len);
        }
      }
      out.param.conn.private_data = nullptr;
      rdma_ack_cm_event(ev);
      return true;
    }
    int err = errno;
    if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
      throw_errno(ErrorKind::Backend, "rdmalib verbs: rdma_get_cm_event", err);
    if (deadline.passed())
      return false;
    pollfd pfd{ch->fd, POLLIN, 0};
    int ret = ::poll(&pfd, 1, deadline.remaining_ms(1000));
    if (ret < 0 && errno != EINTR)
      throw_errno(ErrorKind::Backend, "rdmalib verbs: poll on the rdma_cm event channel", errno);
  }
}

void frame_private(const void *data, size_t len, uint8_t *out) noexcept {
  out[0] = static_cast<uint8_t>(kPrivateMagic >> 8);
  out[1] = static_cast<uint8_t>(kPrivateMagic & 0xff);
  out[2] = static_cast<uint8_t>(len >> 8);
  out[3] = static_cast<uint8_t>(len & 0xff);
  if (len)
    std::memcpy(out + kPrivateHeader, data, len);
}

std::vector<uint8_t> unframe_private(const std::vector<uint8_t> &raw, const std::string &who) {
  if (raw.size() < kPrivateHeader || ((uint16_t(raw[0]) << 8) | raw[1]) != kPrivateMagic)
    throw Error(ErrorKind::Backend, "rdmalib verbs: " + who +
                                        " sent private data without rdmalib's header "
                                        "(not an rdmalib peer?)");
  size_t len = (size_t(raw[2]) << 8) | raw[3];
  if (len > raw.size() - kPrivateHeader)
    throw Error(ErrorKind::Backend, "rdmalib verbs: " + who + " sent a private data header of " +
                                        std::to_string(len) + " bytes but only " +
                                        std::to_string(raw.size() - kPrivateHeader) + " arrived");
  return std::vector<uint8_t>(raw.begin() + kPrivateHeader,
                              raw.begin() + kPrivateHeader + static_cast<long>(len));
}

void SlotPool::init(uint32_t count, uint32_t wr_base) {
  slots.assign(count, Slot{});
  base = wr_base;
  in_use = 0;
  free_head = count ? 0 : UINT32_MAX;
  for (uint32_t i = 0; i < count; ++i)
    slots[i].next_free = i + 1 < count ? i + 1 : UINT32_MAX;
}

} // namespace rdmalib::vb
