#include "executor_manager/rm_link.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

namespace proto = rfaas::protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr size_t kMaxQueuedReports = 4096;

uint64_t wall_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

} // namespace

RmLink::RmLink(rdmalib::Fabric &fabric, RmLinkOptions options)
    : fabric_(fabric), opt_(std::move(options)) {}

RmLink::~RmLink() { close(); }

void RmLink::close() {
  if (state_ == State::Disconnected)
    return;
  proto::Shutdown bye;
  bye.reason = proto::ErrorCode::ShuttingDown;
  // Bounded: a resource manager that does not take it is left behind.
  channel_.send(bye, Clock::now() + milliseconds(200));
  conn_.close();
  state_ = State::Disconnected;
}

void RmLink::disconnect(const std::string &why) {
  spdlog::warn("resource manager {}: {}; reconnecting (allocations keep running)",
               opt_.resource_manager.to_string(), why);
  conn_.close();
  state_ = State::Disconnected;
  next_attempt_ = Clock::now() + opt_.retry;
}

void RmLink::connect() {
  // Back off while the resource manager stays away: each attempt may hold
  // the loop for the connect timeout (reliable-datagram providers cannot
  // tell "nobody listens" from "slow").
  auto pause = opt_.retry * (1 << std::min(failures_, 3));
  next_attempt_ = Clock::now() + pause;
  proto::ClientHello hello;
  uint8_t pd[sizeof hello];
  proto::encode(hello, pd, sizeof pd);
  rdmalib::ConnectionOptions copts;
  copts.recv_depth = 10;
  copts.check_peer_before_poll = true; // polled by the manager's one loop
  try {
    conn_ = rdmalib::Connection::connect(fabric_, opt_.resource_manager, pd, sizeof pd,
                                         opt_.connect_timeout, copts);
    proto::ControlOptions o;
    o.receives = 8;
    channel_ = proto::ControlChannel(fabric_, conn_, o);
  } catch (const std::exception &e) {
    if (!warned_)
      spdlog::warn("cannot reach the resource manager at {}: {}; retrying (every {} to {} ms)",
                   opt_.resource_manager.to_string(), e.what(), opt_.retry.count(),
                   (opt_.retry * 8).count());
    warned_ = true;
    ++failures_;
    conn_.close();
    return;
  }
  static uint64_t last_timestamp = 0;
  proto::NodeRegister reg;
  reg.cores = opt_.cores;
  reg.memory_mib = opt_.memory_mib;
  // Strictly newer than the last registration: the resource manager refuses
  // a timestamp it has seen (a replay).
  reg.timestamp_ms = std::max(wall_ms(), last_timestamp + 1);
  last_timestamp = reg.timestamp_ms;
  proto::set_text(reg.node, opt_.node);
  proto::set_text(reg.address, opt_.address);
  rm::LeaseToken proof = rm::registration_proof(
      rm::RegistrationClaim{opt_.node, opt_.address, opt_.cores, opt_.memory_mib, reg.timestamp_ms},
      opt_.secret);
  std::memcpy(reg.proof.bytes, proof.data(), proof.size());
  if (channel_.post(reg) != proto::ChannelStatus::Ok)
    return disconnect(std::string("cannot send NodeRegister: ") + channel_.last_error());
  state_ = State::Registering;
  register_deadline_ = Clock::now() + milliseconds(5000);
}

void RmLink::report(const proto::AccountingReport &r) {
  if (outbox_.size() >= kMaxQueuedReports)
    outbox_.pop_front(); // the oldest goes: a later report supersedes it anyway
  outbox_.push_back(proto::to_bytes(r));
}

void RmLink::flush() {
  while (state_ == State::Registered && !outbox_.empty() && channel_.send_idle()) {
    const std::vector<uint8_t> &next = outbox_.front();
    std::memcpy(channel_.send_area(), next.data(), next.size());
    if (channel_.post_encoded(next.size()) != proto::ChannelStatus::Ok)
      return disconnect("cannot send an accounting report");
    outbox_.pop_front();
  }
}

void RmLink::poll(std::vector<proto::LeaseEnded> &ended, uint32_t allocations) {
  const auto now = Clock::now();
  if (state_ == State::Disconnected) {
    if (now >= next_attempt_)
      connect();
    return;
  }
  for (int i = 0; i < 16; ++i) {
    proto::ControlMessage m = channel_.poll();
    if (m.status == proto::ChannelStatus::Timeout)
      break;
    if (m.status != proto::ChannelStatus::Ok)
      return disconnect(std::string("link ended (") + proto::to_string(m.status) + ")");
    if (m.header.type == proto::MessageType::NodeRegistered) {
      proto::NodeRegistered r;
      if (!proto::decode(m.data, m.size, r))
        return disconnect("malformed NodeRegistered");
      if (r.status != proto::ErrorCode::Ok) {
        spdlog::error("the resource manager refused this node's registration: {}: {}",
                      proto::to_string(r.status), proto::get_text(r.message));
        conn_.close();
        state_ = State::Disconnected;
        next_attempt_ = now + std::max(opt_.retry, milliseconds(5000));
        return;
      }
      heartbeat_ = milliseconds(r.heartbeat_ms);
      next_heartbeat_ = now + heartbeat_;
      state_ = State::Registered;
      warned_ = false;
      failures_ = 0;
      int64_t skew = static_cast<int64_t>(r.now_ms) - static_cast<int64_t>(wall_ms());
      spdlog::info("registered with the resource manager {} as node {} (clock skew {} ms)",
                   opt_.resource_manager.to_string(), opt_.node, skew);
    } else if (m.header.type == proto::MessageType::LeaseEnded) {
      proto::LeaseEnded e;
      if (proto::decode(m.data, m.size, e))
        ended.push_back(e);
      else
        spdlog::warn("dropping a malformed LeaseEnded from the resource manager");
    } else {
      spdlog::warn("the resource manager sent an unexpected {}", proto::to_string(m.header.type));
    }
  }
  if (state_ == State::Registering && now > register_deadline_)
    return disconnect("no answer to NodeRegister within 5 s");
  if (state_ == State::Registered && now >= next_heartbeat_ && channel_.send_idle()) {
    proto::Heartbeat hb;
    hb.sequence = ++sequence_;
    hb.allocations = allocations;
    if (channel_.post(hb) != proto::ChannelStatus::Ok)
      return disconnect("cannot send a heartbeat");
    next_heartbeat_ = now + heartbeat_;
  }
  flush();
}

} // namespace rfaas::manager
