// The executor manager's link to its resource manager: connect, register
// (proving the node secret with a MAC, never sending it), heartbeats, lease-
// ended notices in, accounting reports out; reconnect and register again when
// the resource manager goes away. Meanwhile the manager keeps serving its
// live allocations: nothing here waits for the resource manager, except one
// connection attempt (at most connect_ms, once per retry period).
//
// Driven by the manager's loop thread through poll(); not thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include "protocol/control_channel.hpp"
#include "protocol/rm_messages.hpp"
#include "resource_manager/lease_token.hpp"

namespace rfaas::manager {

struct RmLinkOptions {
  /// The resource manager's fabric address.
  rdmalib::Address resource_manager;
  /// This node as the resource manager knows it, and where clients reach it.
  std::string node;
  std::string address;
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
  rm::NodeSecret secret{};
  /// Longest one connection attempt may hold the loop (tcp;ofi_rxm connects
  /// lazily and took over 1.5 s on a loaded machine).
  std::chrono::milliseconds connect_timeout{5000};
  /// Pause between attempts while the resource manager cannot be reached,
  /// doubled after each failure up to 8 times this.
  std::chrono::milliseconds retry{1000};
};

class RmLink {
public:
  RmLink(rdmalib::Fabric &fabric, RmLinkOptions options);
  ~RmLink();

  /// One step: (re)connect when due, read what arrived, send a heartbeat when
  /// due and queued reports. Lease-ended notices are appended to `ended`.
  void poll(std::vector<protocol::LeaseEnded> &ended, uint32_t allocations);
  /// Queue an accounting report (sent once registered; kept across a
  /// reconnect, at most a few thousand).
  void report(const protocol::AccountingReport &r);
  bool registered() const { return state_ == State::Registered; }
  /// Says goodbye (the resource manager marks the node down at once).
  void close();

private:
  enum class State { Disconnected, Registering, Registered };
  void connect();
  void disconnect(const std::string &why);
  void flush();

  rdmalib::Fabric &fabric_;
  RmLinkOptions opt_;
  // The channel before the connection: its buffers outlive the close.
  protocol::ControlChannel channel_;
  rdmalib::Connection conn_;
  State state_ = State::Disconnected;
  std::chrono::steady_clock::time_point next_attempt_{};
  std::chrono::steady_clock::time_point register_deadline_{};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::chrono::milliseconds heartbeat_{1000};
  uint64_t sequence_ = 0;
  std::deque<std::vector<uint8_t>> outbox_;
  bool warned_ = false;
  int failures_ = 0;
};

} // namespace rfaas::manager
