// ControlChannel: see control_channel.hpp.
#include "protocol/control_channel.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace rfaas::protocol {

namespace {

int ms_left(ControlClock::time_point deadline) noexcept {
  auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - ControlClock::now()).count();
  if (left <= 0)
    return 0;
  return left > 0x7FFFFFFF ? 0x7FFFFFFF : static_cast<int>(left);
}

} // namespace

const char *to_string(ChannelStatus s) noexcept {
  switch (s) {
  case ChannelStatus::Ok:
    return "ok";
  case ChannelStatus::Timeout:
    return "timeout";
  case ChannelStatus::Closed:
    return "closed";
  case ChannelStatus::Shutdown:
    return "peer shut down";
  case ChannelStatus::BadMessage:
    return "bad message";
  case ChannelStatus::Unexpected:
    return "unexpected message";
  case ChannelStatus::SendFailed:
    return "send failed";
  }
  return "?";
}

ControlChannel::ControlChannel(rdmalib::Fabric &fabric, rdmalib::Connection &conn,
                               const ControlOptions &options)
    : opt_(options) {
  if (opt_.receives == 0 || opt_.receive_size < sizeof(Header) || opt_.send_size == 0)
    throw std::invalid_argument("ControlChannel: receives, receive_size and send_size must be set");
  buf_ = rdmalib::Buffer<char>(fabric, size_t(opt_.receives) * opt_.receive_size + opt_.send_size,
                               rdmalib::AccessLocal);
  conn.attach(buf_.region());
  ops_ = conn.ops();
  current_.resize(opt_.receive_size);
  for (uint64_t i = 0; i < opt_.receives; ++i)
    if (!repost(i)) {
      std::string why = ops_.last_error();
      // The receives posted so far point into buf_, which goes with this
      // throw: the connection closes first (cancelling them), or a message
      // that arrives later is written into freed memory. A shared
      // reliable-datagram endpoint whose receive queue was full did exactly
      // that under a fleet of 1,000 links (heap corruption, then SIGSEGV).
      conn.close();
      throw std::runtime_error("ControlChannel: cannot post a receive: " + why);
    }
}

bool ControlChannel::repost(uint64_t slot) noexcept {
  return ops_.post_recv(buf_.local_bytes(slot * opt_.receive_size, opt_.receive_size),
                        opt_.receive_context + slot) == rdmalib::Status::Ok;
}

bool ControlChannel::recycle(const rdmalib::Completion &c) noexcept {
  if (!owns(c))
    return true;
  return repost(c.context - opt_.receive_context);
}

void ControlChannel::to_owner(const rdmalib::Completion &c) {
  if (handler_)
    handler_(c);
  else
    deferred_.push_back(c);
}

bool ControlChannel::on_send_completion(const rdmalib::Completion &c) noexcept {
  if (c.context != opt_.send_context) {
    to_owner(c);
    return false;
  }
  send_pending_ = false;
  sent_ok_ = c.status == rdmalib::Status::Ok;
  send_failed_ = !sent_ok_;
  return true;
}

bool ControlChannel::send_idle() noexcept {
  rdmalib::Completion c;
  while (send_pending_ && ops_.valid() && ops_.poll(rdmalib::Queue::Send, &c, 1) == 1)
    on_send_completion(c);
  return !send_pending_;
}

ChannelStatus ControlChannel::post_encoded(size_t size) noexcept {
  refused_ = false;
  if (send_pending_ || size > opt_.send_size) {
    posted_ = false;
    return ChannelStatus::SendFailed;
  }
  sent_ok_ = false;
  posted_ = false;
  if (closed_)
    return ChannelStatus::Closed;
  rdmalib::Status st = ops_.send(buf_.local_bytes(size_t(opt_.receives) * opt_.receive_size, size),
                                 opt_.send_context);
  refused_ = st != rdmalib::Status::Ok;
  if (st == rdmalib::Status::Closed)
    return ChannelStatus::Closed;
  // No room within the connection's post deadline (a peer that does not
  // read): nothing was posted, and an owner with a queue of its own may
  // post again later.
  if (st == rdmalib::Status::Timeout || st == rdmalib::Status::Again)
    return ChannelStatus::Timeout;
  if (st != rdmalib::Status::Ok)
    return ChannelStatus::SendFailed;
  send_pending_ = true;
  posted_ = true;
  return ChannelStatus::Ok;
}

ChannelStatus ControlChannel::finish_pending(ControlClock::time_point deadline) noexcept {
  while (send_pending_) {
    rdmalib::Completion c;
    rdmalib::WaitResult w = ops_.wait(rdmalib::Queue::Send, &c, 1, ms_left(deadline), opt_.spin);
    if (w.status == rdmalib::Status::Timeout) {
      if (ControlClock::now() < deadline)
        continue;
      return ChannelStatus::Timeout;
    }
    if (w.status != rdmalib::Status::Ok) {
      // The receive side decides whether the link is closed: a reply may
      // still be waiting in the receive queue.
      send_pending_ = false;
      return w.status == rdmalib::Status::Closed ? ChannelStatus::Closed
                                                 : ChannelStatus::SendFailed;
    }
    if (on_send_completion(c)) {
      send_failed_ = false; // reported here, not again by poll()
      return sent_ok_ ? ChannelStatus::Ok : ChannelStatus::SendFailed;
    }
  }
  return ChannelStatus::Ok;
}

ChannelStatus ControlChannel::send_encoded(size_t size,
                                           ControlClock::time_point deadline) noexcept {
  if (ChannelStatus s = finish_pending(deadline);
      s != ChannelStatus::Ok && s != ChannelStatus::SendFailed)
    return s;
  if (size > opt_.send_size) {
    posted_ = false;
    refused_ = false;
    return ChannelStatus::SendFailed;
  }
  // The send's deadline bounds its post too: a post to a peer that vanished
  // can find no room for the connection's whole post deadline (5 s by
  // default; tcp;ofi_rxm answers "try again" while it reconnects).
  const std::chrono::milliseconds saved = ops_.post_deadline();
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - ControlClock::now());
  if (left < saved)
    ops_.set_post_deadline(left);
  ChannelStatus s = post_encoded(size);
  ops_.set_post_deadline(saved);
  // A post refused for want of room fails the send as any refused post
  // does (after_send() then looks for an answer that arrived before).
  if (s == ChannelStatus::Timeout)
    s = ChannelStatus::SendFailed;
  if (s != ChannelStatus::Ok)
    return s;
  return finish_pending(deadline);
}

ControlMessage ControlChannel::on_recv_completion(const rdmalib::Completion &c) noexcept {
  ControlMessage m;
  if (c.status != rdmalib::Status::Ok || c.kind == rdmalib::OpKind::PeerClosed) {
    closed_ = true;
    failed_ = c.kind != rdmalib::OpKind::PeerClosed;
    m.status = ChannelStatus::Closed;
    return m;
  }
  if (c.kind == rdmalib::OpKind::Recv && owns(c))
    return take(c);
  if (c.kind == rdmalib::OpKind::RemoteWriteImm && owns(c) && !recycle(c)) {
    closed_ = true;
    m.status = ChannelStatus::Closed;
    return m;
  }
  to_owner(c);
  m.status = ChannelStatus::Timeout; // not a message: keep going
  return m;
}

ControlMessage ControlChannel::take(const rdmalib::Completion &c) noexcept {
  ControlMessage m;
  const uint64_t slot = c.context - opt_.receive_context;
  // The completion's length is 0 on some providers: trust the header, and
  // take the whole slot when the length is missing.
  size_t len = c.length ? std::min<size_t>(c.length, opt_.receive_size) : opt_.receive_size;
  std::memcpy(current_.data(), buf_.data() + slot * opt_.receive_size, len);
  // The repost fails when the link is gone: the peer hung up after this
  // message (a refusal is answered, then the link closed). The message
  // arrived whole and is handed over; the next call reports the close.
  if (!repost(slot))
    closed_ = true;
  m.data = current_.data();
  m.size = len;
  m.wire = peek(m.data, m.size, m.header);
  if (!m.wire) {
    m.status = ChannelStatus::BadMessage;
    return m;
  }
  if (m.header.type == MessageType::Shutdown) {
    shut_down_ = true;
    if (!decode(m.data, m.size, goodbye_))
      goodbye_ = Shutdown{};
    m.status = ChannelStatus::Shutdown;
    return m;
  }
  m.status = ChannelStatus::Ok;
  return m;
}

ControlMessage ControlChannel::next(ControlClock::time_point deadline) noexcept {
  ControlMessage m;
  if (closed_) {
    m.status = ChannelStatus::Closed;
    return m;
  }
  for (;;) {
    rdmalib::Completion c;
    rdmalib::WaitResult w = ops_.wait(rdmalib::Queue::Recv, &c, 1, ms_left(deadline), opt_.spin);
    if (w.status == rdmalib::Status::Timeout) {
      if (ControlClock::now() < deadline)
        continue;
      m.status = ChannelStatus::Timeout;
      return m;
    }
    if (w.status != rdmalib::Status::Ok) {
      closed_ = true;
      m.status = ChannelStatus::Closed;
      return m;
    }
    m = on_recv_completion(c);
    if (m.status != ChannelStatus::Timeout)
      return m;
  }
}

ControlMessage ControlChannel::poll() noexcept {
  ControlMessage m;
  if (send_pending_) {
    rdmalib::Completion c;
    while (send_pending_ && ops_.poll(rdmalib::Queue::Send, &c, 1) == 1)
      on_send_completion(c);
  }
  if (send_failed_) {
    send_failed_ = false;
    m.status = ChannelStatus::SendFailed;
    return m;
  }
  if (closed_) {
    m.status = ChannelStatus::Closed;
    return m;
  }
  rdmalib::Completion c;
  while (ops_.poll(rdmalib::Queue::Recv, &c, 1) == 1) {
    m = on_recv_completion(c);
    if (m.status != ChannelStatus::Timeout)
      return m;
  }
  m.status = ChannelStatus::Timeout;
  return m;
}

} // namespace rfaas::protocol
