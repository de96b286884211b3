// The rdmalib side of the ping-pong: one connection through rdmalib's public
// API only (Fabric, Listener, Connection, Operations, Buffer), with the buffer
// layout, receive slots and completion handling of raw_libfabric_endpoint.hpp.
// Shared by rdmalib_pingpong and raw_vs_rdmalib_pingpong (which runs it in the
// same processes as the raw endpoint). Includes no libfabric header.
//
// Waiting: --wait busy spins on Operations::poll; --wait block sleeps in
// Operations::wait. "auto" is busy: rdmalib's poll already yields the CPU on
// providers whose progress thread would otherwise starve (sockets).
#pragma once

#include <rdmalib/rdmalib.hpp>

#include "pingpong_loop.hpp"

namespace rdside {

using namespace pingpong;

/// Completions asked for per poll/wait: a batched poller, as rdmalib users are
/// encouraged to be. Diagnostic knob: RDMALIB_PINGPONG_POLL_BATCH=1..8.
inline constexpr size_t kBatch = 8;
inline size_t poll_batch() {
  static const size_t b = [] {
    const char *e = std::getenv("RDMALIB_PINGPONG_POLL_BATCH");
    if (!e)
      return kBatch;
    long v = std::strtol(e, nullptr, 10);
    if (v < 1 || v > static_cast<long>(kBatch))
      die("RDMALIB_PINGPONG_POLL_BATCH must be 1..%zu, not '%s'", kBatch, e);
    return static_cast<size_t>(v);
  }();
  return b;
}

/// Free what earlier runs killed at their deadline left in /dev/shm: on shm
/// every endpoint of both implementations is a 16 MiB region there, and a
/// SIGKILL (run-pingpong.sh's hard deadline) leaves it for good, so that a
/// campaign with a few killed runs fills the tmpfs. The rule the executor
/// manager applies when it starts: this user's regions that no process maps
/// and that have not changed for 30 s.
inline void reclaim_stale_regions() {
  const rdmalib::Fabric::ReclaimReport r = rdmalib::Fabric::reclaim_stale();
  if (!r.names.empty())
    std::fprintf(stderr,
                 "reclaimed %zu stale shared-memory region(s), %llu MiB, left by killed "
                 "processes\n",
                 r.names.size(), static_cast<unsigned long long>(r.bytes >> 20));
}

/// Send context of our own pings / replies.
inline constexpr uint64_t kSendContext = 0x5e4d;

/// Payload slots: [send | recv slot 0 | recv slot 1 | RMA target], as in the raw
/// benchmark. Receive slots are at least 64 bytes so that rdmalib's 16-byte
/// control messages (emulated immediates, goodbyes) always fit.
inline size_t slot_bytes_for(const Options &o) { return std::max<size_t>(max_size(o), 64); }

class Side {
public:
  Side(const Options &o, bool server)
      : o_(o), fabric_(device_config(o)), slot_bytes_(slot_bytes_for(o)),
        buf_(fabric_, 4 * slot_bytes_) {
    std::memset(buf_.data(), server ? kServerFill : kClientFill, buf_.bytes());
    caps_ = fabric_.capabilities();
    WaitPolicy w = o.wait == WaitPolicy::Auto ? WaitPolicy::Busy : o.wait;
    block_ = w == WaitPolicy::Block;
  }

  static rdmalib::DeviceConfig device_config(const Options &o) {
    rdmalib::DeviceConfig d;
    d.name = "pingpong";
    d.provider = o.provider;
    d.ip_address = o.host;
    // pingpong_common.hpp has checked the name (it is shared with the raw
    // baseline, which does not link rdmalib); this is the same vocabulary.
    if (!rdmalib::parse_endpoint_preference(o.endpoint, d.endpoint))
      throw std::invalid_argument(std::string("--endpoint must be one of ") +
                                  rdmalib::endpoint_preference_names());
    return d;
  }

  void establish_server(Oob &oob) {
    rdmalib::Listener listener(fabric_, rdmalib::Address{o_.host, 0});
    // The listener's own host, not --host: on two hosts the client's --host is
    // its own address. Without --host (a provider not addressed by IP, such
    // as efa) it is the provider's whole endpoint name, and the port is 0.
    const rdmalib::Address at = listener.address();
    const std::string host = at.host_text();
    oob.send_blob(std::vector<uint8_t>(host.begin(), host.end()));
    oob.send_value<uint16_t>(at.port);
    watchdog().what = "the client's connection request";
    auto req = listener.next_request(std::chrono::milliseconds(watchdog().remaining_ms()));
    const auto &pd = req.private_data();
    if (pd.size() < sizeof(rdmalib::RemoteBuffer))
      die("the client's private data has %zu bytes, expected a RemoteBuffer", pd.size());
    std::memcpy(&peer_, pd.data(), sizeof peer_);
    const rdmalib::RemoteBuffer &mine = buf_.remote();
    conn_ = req.accept(&mine, sizeof mine, std::chrono::milliseconds(watchdog().remaining_ms()));
    ready();
  }

  void establish_client(Oob &oob) {
    std::vector<uint8_t> host = oob.recv_blob("the server's listening address");
    uint16_t port = oob.recv_value<uint16_t>("the server's listening port");
    const rdmalib::RemoteBuffer &mine = buf_.remote();
    watchdog().what = "the connection to the server";
    conn_ = rdmalib::Connection::connect(
        fabric_, rdmalib::Address::from_host_text(std::string(host.begin(), host.end()), port),
        &mine, sizeof mine, std::chrono::milliseconds(watchdog().remaining_ms()));
    const auto &pd = conn_.peer_private_data();
    if (pd.size() < sizeof(rdmalib::RemoteBuffer))
      die("the server's private data has %zu bytes, expected a RemoteBuffer", pd.size());
    std::memcpy(&peer_, pd.data(), sizeof peer_);
    ready();
  }

  const rdmalib::Fabric &fabric() const { return fabric_; }
  const char *endpoint_name() const {
    return caps_.endpoint == rdmalib::EndpointType::Connected ? "msg" : "rdm";
  }
  const char *wait_policy() const { return block_ ? "block" : "busy"; }

  char *send_buf() { return buf_.data(); }
  char *slot_buf(int slot) { return buf_.data() + slot_offset(slot); }
  char *target_buf() { return buf_.data() + target_offset(); }
  size_t slot_offset(int slot) const { return (1 + slot) * slot_bytes_; }
  size_t target_offset() const { return 3 * slot_bytes_; }

  // ---- data path -------------------------------------------------------------------

  void post_recv(int slot) {
    rdmalib::Status st =
        ops_.post_recv(buf_.local_bytes(slot_offset(slot), slot_bytes_), uint64_t(slot));
    if (st != rdmalib::Status::Ok)
      die("post_recv: %s: %s", rdmalib::to_string(st), ops_.last_error());
  }

  /// Send `size` bytes from `offset` in our buffer (0: the send buffer).
  void send(size_t size, size_t offset = 0) {
    rdmalib::Status st = ops_.send(buf_.local_bytes(offset, size), kSendContext);
    if (st != rdmalib::Status::Ok)
      die("send: %s: %s", rdmalib::to_string(st), ops_.last_error());
    ++tx_posted_;
  }

  /// Write `size` bytes from `offset` in our buffer into the peer's target.
  void write_imm(size_t size, uint32_t imm, size_t offset = 0) {
    rdmalib::Status st =
        ops_.write_imm(buf_.local_bytes(offset, size), peer_, target_offset(), imm, kSendContext);
    if (st != rdmalib::Status::Ok)
      die("write_imm: %s: %s", rdmalib::to_string(st), ops_.last_error());
    ++tx_posted_;
  }

  RxEvent wait_rx(const char *what) {
    watchdog().what = what;
    while (rx_head_ == rx_tail_) {
      if (fetch(rdmalib::Queue::Recv) == 0 && block_)
        watchdog().check();
      // As raw_libfabric_pingpong: the transmit's completion is reaped while
      // the reply is awaited (busy polling).
      if (!block_ && rx_head_ == rx_tail_ && tx_done_ < tx_posted_)
        fetch(rdmalib::Queue::Send);
      spin_check();
    }
    return rxq_[rx_head_++ % kRxQueue];
  }

  void wait_tx(const char *what) {
    watchdog().what = what;
    while (tx_done_ < tx_posted_) {
      if (fetch(rdmalib::Queue::Send) == 0 && block_)
        watchdog().check();
      spin_check();
    }
  }

  /// Whether a RemoteWriteImm consumed one of our receives (to be reposted).
  bool write_consumes_receive() const { return caps_.write_consumes_receive; }

  void close() { conn_.close(); }

private:
  static constexpr unsigned kRxQueue = 16;

  void ready() {
    conn_.attach(buf_.region());
    ops_ = conn_.ops();
    post_recv(0);
    post_recv(1);
  }

  size_t fetch(rdmalib::Queue q) {
    // c_ is a member: a local array of Completion would be value-initialised on
    // every spin (~30 instructions), a cost of this benchmark, not of rdmalib.
    rdmalib::Completion *c = c_;
    size_t n = 0;
    const size_t batch = poll_batch();
    if (block_) {
      rdmalib::WaitResult r = ops_.wait(q, c, batch, 100);
      if (r.status == rdmalib::Status::Timeout)
        return 0;
      if (r.status != rdmalib::Status::Ok)
        die("wait: %s: %s", rdmalib::to_string(r.status), ops_.last_error());
      n = r.count;
    } else {
      n = ops_.poll(q, c, batch);
    }
    for (size_t i = 0; i < n; ++i)
      record(c[i]);
    return n;
  }

  void record(const rdmalib::Completion &c) {
    if (c.status != rdmalib::Status::Ok)
      die("completion (kind %d, context %llu) failed: %s: %s", static_cast<int>(c.kind),
          static_cast<unsigned long long>(c.context), rdmalib::to_string(c.status),
          ops_.last_error());
    switch (c.kind) {
    case rdmalib::OpKind::Recv:
    case rdmalib::OpKind::RemoteWriteImm: {
      RxEvent ev;
      ev.remote_write = c.kind == rdmalib::OpKind::RemoteWriteImm;
      bool owns_slot = !ev.remote_write || caps_.write_consumes_receive;
      ev.slot = owns_slot && c.context < 2 ? static_cast<int>(c.context) : -1;
      ev.data = c.imm;
      ev.len = c.length;
      if (rx_tail_ - rx_head_ >= kRxQueue)
        die("receive event queue overflow (the peer sent more than expected)");
      rxq_[rx_tail_++ % kRxQueue] = ev;
      break;
    }
    case rdmalib::OpKind::PeerClosed:
      die("the peer closed the connection in the middle of a measurement");
    default:
      ++tx_done_;
    }
  }

  const Options &o_;
  rdmalib::Fabric fabric_;
  rdmalib::Capabilities caps_;
  size_t slot_bytes_;
  rdmalib::Buffer<char> buf_;
  rdmalib::RemoteBuffer peer_{};
  rdmalib::Connection conn_;
  rdmalib::Operations ops_;
  bool block_ = false;

  uint64_t tx_posted_ = 0, tx_done_ = 0;
  rdmalib::Completion c_[kBatch];
  RxEvent rxq_[kRxQueue];
  uint64_t rx_head_ = 0, rx_tail_ = 0;
};

// ---- the ping-pong's posts (pingpong_loop.hpp) -------------------------------------

/// A ping or reply of `size` bytes from our send buffer.
inline void post(Side &side, Mode mode, size_t size, uint64_t seq) {
  if (mode == Mode::Send)
    side.send(size);
  else
    side.write_imm(size, static_cast<uint32_t>(seq));
}

/// The reply of an echo: the bytes the ping left, from where they landed.
inline void post_echo(Side &side, Mode mode, size_t size, uint64_t seq, const RxEvent &ping) {
  if (mode == Mode::Send)
    side.send(size, side.slot_offset(ping.slot));
  else
    side.write_imm(size, static_cast<uint32_t>(seq), side.target_offset());
}

} // namespace rdside
