// ControlChannel: the control messages of one rdmalib Connection, sent and
// received the same way by every rFaaS peer (client, executor, executor
// manager, resource manager).
//
// What it owns: one registered buffer attached to the connection, divided into
// a ring of `receives` receive slots (each posted on the connection) and one
// send area. What it does not own: the Connection. Declare the channel before
// its Connection in a class, so that the channel (its buffer) is destroyed
// after the connection is closed: closing may still land completions into the
// posted receives.
//
// Receiving: every control message that arrives is checked (peek), copied out
// of its receive slot and the slot is posted again at once, so the ring never
// runs dry while the owner looks at a message. A message that arrived before
// the link closed is still handed over (its slot then cannot be posted
// again); the close is reported by the next call. The copy is what next(),
// poll(), take() and await() hand back; it stays valid until the next call
// that receives on this channel.
//
// Data completions: the owner may have its own traffic on the same queues
// (result writes, write-with-immediate notifications, RDMA reads). Whatever
// the channel reads that is not its own (a send completion with another
// context, a RemoteWriteImm, a receive outside its ring) goes to the data
// handler given to on_data(), or, without one, is kept in order for
// take_deferred(): it is never lost. A RemoteWriteImm that consumed one of the
// channel's receives (Capabilities::write_consumes_receive) has that receive
// posted again before the handler sees it.
//
// The hot path does not go through the channel: a worker that busy-polls its
// completion queue keeps doing so itself and passes only the receive
// completions it finds to owns()/take() (and consumed receives to recycle()),
// which read no completion queue.
//
// Deadlines: every blocking call takes an absolute steady-clock deadline and
// returns ChannelStatus::Timeout once it passed; none blocks longer.
//
// Shutdown detection: a Shutdown message from the peer ends in
// ChannelStatus::Shutdown (the message is in goodbye()), a disconnect, a
// failed receive or a PeerClosed completion in ChannelStatus::Closed; both are
// sticky (shut_down(), closed()).
//
// Thread-safety: none. Like rdmalib::Operations, a channel is used by one
// thread at a time; different channels may be driven from different threads.
// Calls never throw except the constructor (setup errors, with the cause).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <rdmalib/buffer.hpp>
#include <rdmalib/connection.hpp>
#include <rdmalib/fabric.hpp>
#include <rdmalib/operations.hpp>

#include "protocol/protocol.hpp"

namespace rfaas::protocol {

using ControlClock = std::chrono::steady_clock;

/// Sizes and contexts of a ControlChannel.
struct ControlOptions {
  /// Receives kept posted. The connection's recv_depth must be at least this.
  uint32_t receives = 4;
  /// Bytes of each receive slot: the largest message the peer may send.
  size_t receive_size = kControlMessageMax;
  /// Bytes of the send area: the largest message this side sends.
  size_t send_size = kControlMessageMax;
  /// Receive slot i is posted with context receive_context + i.
  uint64_t receive_context = 0;
  /// Context of the channel's own sends; the owner's posts must use others.
  uint64_t send_context = 1ull << 61;
  /// How long the blocking calls (send(), next(), await()...) poll before
  /// they sleep (rdmalib's hybrid Operations::wait). 0: they sleep at once,
  /// right for a peer whose answer may take milliseconds; a client that
  /// expects its answer within tens of microseconds (a resource manager's
  /// grant) saves the two scheduler wake-ups of a sleep by spinning first.
  std::chrono::microseconds spin{0};
};

/// Outcome of a channel call.
enum class ChannelStatus : uint8_t {
  Ok = 0,
  /// The deadline passed (or, for poll(), nothing is there yet).
  Timeout,
  /// The peer closed the connection, or a receive failed.
  Closed,
  /// The peer sent Shutdown (see goodbye()).
  Shutdown,
  /// A message arrived that does not decode (see the WireResult).
  BadMessage,
  /// A well-formed message of another type than the one awaited.
  Unexpected,
  /// The channel's send could not be encoded, posted, or completed.
  SendFailed,
};

const char *to_string(ChannelStatus s) noexcept;

/// A control message as received: the header is checked, the bytes are a
/// copy (valid until the next receiving call on the channel).
struct ControlMessage {
  ChannelStatus status = ChannelStatus::Timeout;
  /// The header (filled when at least 8 bytes arrived).
  Header header;
  /// peek()'s verdict on the header; BadMessage when it is not ok.
  WireResult wire;
  const uint8_t *data = nullptr;
  size_t size = 0;
};

class ControlChannel {
public:
  ControlChannel() noexcept = default;
  /// Register the buffer on `fabric`, attach it to `conn` and post every
  /// receive. Throws rdmalib::Error (registration, attach) or
  /// std::runtime_error (a receive cannot be posted: `conn` is then closed,
  /// so that no receive posted into this channel's buffer outlives it).
  ControlChannel(rdmalib::Fabric &fabric, rdmalib::Connection &conn, const ControlOptions &options);
  ControlChannel(ControlChannel &&) noexcept = default;
  ControlChannel &operator=(ControlChannel &&) noexcept = default;
  ControlChannel(const ControlChannel &) = delete;
  ControlChannel &operator=(const ControlChannel &) = delete;

  bool valid() const noexcept { return ops_.valid(); }
  rdmalib::Operations ops() const noexcept { return ops_; }
  const ControlOptions &options() const noexcept { return opt_; }

  /// Where not-own completions go (see the file comment). Without a handler
  /// they are kept for take_deferred().
  void on_data(std::function<void(const rdmalib::Completion &)> handler) {
    handler_ = std::move(handler);
  }
  /// The kept data completions, oldest first; the channel forgets them.
  std::vector<rdmalib::Completion> take_deferred() { return std::move(deferred_); }

  // ---- sending -----------------------------------------------------------------

  /// The send area (options().send_size bytes), for messages encoded in place
  /// (AllocationRequest with its descriptors): then call send_encoded().
  uint8_t *send_area() noexcept { return area(); }
  /// Send the first `size` bytes of the send area and wait until the send
  /// completed (the area may be reused). Ok, Timeout, Closed or SendFailed.
  /// `deadline` also bounds the post when the connection's post deadline
  /// would outlast it (a peer that vanished: see Operations::set_post_deadline).
  ChannelStatus send_encoded(size_t size, ControlClock::time_point deadline) noexcept;
  /// Encode `m` into the send area and send it as send_encoded() does.
  template <class M> ChannelStatus send(const M &m, ControlClock::time_point deadline) noexcept {
    size_t size = 0;
    if (ChannelStatus s = stage(m, deadline, size); s != ChannelStatus::Ok)
      return s;
    return send_encoded(size, deadline);
  }
  /// Encode and post `m` without waiting for its completion, for loops that
  /// must not block (the manager). The completion is reaped by the next call
  /// that sends or polls; a failure then shows as SendFailed from poll().
  template <class M> ChannelStatus post(const M &m) noexcept {
    size_t size = 0;
    if (ChannelStatus s = stage(m, ControlClock::now(), size); s != ChannelStatus::Ok)
      return s;
    return post_encoded(size);
  }

  /// True when no send is in flight, so the send area may be written; reaps a
  /// finished send without blocking (a failure then shows as SendFailed from
  /// poll()). For owners that queue messages and post one at a time.
  bool send_idle() noexcept;
  /// Post the first `size` bytes of the send area without waiting, like
  /// post(); the area must be free (send_idle()). Ok, Closed, SendFailed, or
  /// Timeout when the provider had no room within the connection's post
  /// deadline (nothing was posted; post again after polling).
  ChannelStatus post_encoded(size_t size) noexcept;

  // ---- receiving -----------------------------------------------------------------

  /// Wait for the next control message until `deadline`. status is Ok (a
  /// message), Shutdown (the peer's goodbye), BadMessage (header unreadable;
  /// the bytes are still given), Closed or Timeout.
  ControlMessage next(ControlClock::time_point deadline) noexcept;
  /// Like next() without blocking: Timeout when nothing is there. Also reaps
  /// the completion of a post(); SendFailed when it failed.
  ControlMessage poll() noexcept;
  /// Wait for a message of type R and decode it into `out`. Ok, or Shutdown,
  /// Closed, Timeout, BadMessage, Unexpected (the message is then dropped);
  /// `wire` (when given) holds the decode result.
  template <class R>
  ChannelStatus await(R &out, ControlClock::time_point deadline, WireResult *wire = nullptr) {
    ControlMessage m = next(deadline);
    return decode_as(m, out, wire);
  }
  /// Send `m`, then await a reply of type R. A send that fails, or that finds
  /// the link already closed, does not end the wait: a peer that refuses may
  /// answer and hang up before this side sees its send complete, or before
  /// this side even sends (a refusal of an earlier message that has no answer
  /// of its own); its answer is still in the receive ring. A closed link
  /// without a reply ends in Closed.
  template <class M, class R>
  ChannelStatus send_and_await(const M &m, R &reply, ControlClock::time_point deadline,
                               WireResult *wire = nullptr) {
    return after_send(send(m, deadline), reply, deadline, wire);
  }
  /// send_and_await() for a message already encoded in the send area.
  template <class R>
  ChannelStatus send_encoded_and_await(size_t size, R &reply, ControlClock::time_point deadline,
                                       WireResult *wire = nullptr) {
    return after_send(send_encoded(size, deadline), reply, deadline, wire);
  }

  // ---- for owners that poll the queues themselves ---------------------------------

  /// True for a Recv completion on one of the channel's receive slots.
  bool owns(const rdmalib::Completion &c) const noexcept {
    return c.context - opt_.receive_context < opt_.receives;
  }
  /// Process a receive completion the owner read (owns(c) must hold): copy,
  /// repost, classify, as next() does.
  ControlMessage take(const rdmalib::Completion &c) noexcept;
  /// Post again the receive slot a RemoteWriteImm consumed (no-op for a
  /// context outside the ring). False if the post failed.
  bool recycle(const rdmalib::Completion &c) noexcept;

  // ---- state ---------------------------------------------------------------------

  bool closed() const noexcept { return closed_; }
  /// True when the link ended because a receive failed (for example a message
  /// longer than the posted receive) rather than by the peer's goodbye or
  /// disconnect; last_error() says why. A server logs it and drops the peer.
  bool failed() const noexcept { return failed_; }
  bool shut_down() const noexcept { return shut_down_; }
  /// The peer's Shutdown (valid when shut_down()).
  const Shutdown &goodbye() const noexcept { return goodbye_; }
  const char *last_error() const noexcept { return ops_.valid() ? ops_.last_error() : ""; }

private:
  /// Encode `m` into the send area once the previous send has left it (a
  /// failed previous send does not stop this one); `size` is the encoded size.
  template <class M>
  ChannelStatus stage(const M &m, ControlClock::time_point deadline, size_t &size) noexcept {
    if (ChannelStatus s = finish_pending(deadline);
        s != ChannelStatus::Ok && s != ChannelStatus::SendFailed)
      return s;
    WireResult r = encode(m, area(), opt_.send_size);
    if (!r) {
      posted_ = false;
      refused_ = false;
      return ChannelStatus::SendFailed;
    }
    size = r.size;
    return ChannelStatus::Ok;
  }
  uint8_t *area() noexcept {
    return reinterpret_cast<uint8_t *>(buf_.data()) + size_t(opt_.receives) * opt_.receive_size;
  }
  bool repost(uint64_t slot) noexcept;
  /// Wait for the completion of the send in flight, if any.
  ChannelStatus finish_pending(ControlClock::time_point deadline) noexcept;
  /// A completion the channel does not own.
  void to_owner(const rdmalib::Completion &c);
  /// Handle one Send-queue completion; true when it was ours.
  bool on_send_completion(const rdmalib::Completion &c) noexcept;
  /// Handle one Recv-queue completion; status Timeout means "not a message".
  ControlMessage on_recv_completion(const rdmalib::Completion &c) noexcept;

  template <class R>
  ChannelStatus after_send(ChannelStatus s, R &reply, ControlClock::time_point deadline,
                           WireResult *wire) {
    // A deadline that passed, or a message that never reached the provider
    // (not encoded, too large), ends the wait here. A failed completion may
    // still be answered: the receive side decides.
    if (s == ChannelStatus::Timeout || (s != ChannelStatus::Ok && !posted_ && !refused_))
      return s;
    if (s != ChannelStatus::Ok && !posted_) {
      // The provider refused the post: the link is gone. An answer the peer
      // sent before it hung up is already here; take it, wait for nothing.
      ControlMessage m = poll();
      return m.status == ChannelStatus::Timeout ? s : decode_as(m, reply, wire);
    }
    return await(reply, deadline, wire);
  }
  template <class R> ChannelStatus decode_as(const ControlMessage &m, R &out, WireResult *wire) {
    if (m.status != ChannelStatus::Ok) {
      if (wire)
        *wire = m.wire;
      return m.status;
    }
    if (m.header.type != R::kType) {
      if (wire)
        *wire = {WireError::UnexpectedType, 0, R::kName};
      return ChannelStatus::Unexpected;
    }
    WireResult r = decode(m.data, m.size, out);
    if (wire)
      *wire = r;
    return r ? ChannelStatus::Ok : ChannelStatus::BadMessage;
  }

  ControlOptions opt_;
  rdmalib::Buffer<char> buf_;
  rdmalib::Operations ops_;
  std::vector<uint8_t> current_;
  std::vector<rdmalib::Completion> deferred_;
  std::function<void(const rdmalib::Completion &)> handler_;
  Shutdown goodbye_;
  bool send_pending_ = false;
  /// The last send was posted (whatever its completion said).
  bool posted_ = false;
  /// The provider refused to post the last send (the link is closed or gone).
  bool refused_ = false;
  bool sent_ok_ = false;
  bool send_failed_ = false;
  bool closed_ = false;
  bool failed_ = false;
  bool shut_down_ = false;
};

} // namespace rfaas::protocol
