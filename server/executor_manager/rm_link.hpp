// The executor manager's link to its resource manager: connect, register
// (proving the node secret with a MAC, never sending it), heartbeats, lease-
// ended notices in, accounting reports out; reconnect and register again when
// the resource manager goes away. Meanwhile the manager keeps serving its
// live allocations and its clients: nothing here waits for the resource
// manager.
//
// Why nothing waits: a stopped or dead resource manager does not read, and
// on some providers (shm) a send to such a peer finds no room or never
// completes. The manager's one loop serves every client and allocation of
// the node, so a send that waited there would stall them all. Hence:
//  * messages are posted with a post deadline of zero: a post that finds no
//    room leaves the message queued here, to be posted on a later poll();
//  * one message is in flight at a time; the next goes once its completion
//    came; a message that failed stays queued and goes again after the next
//    registration (the resource manager keeps the latest report per lease
//    and node, and ignores anything after a final one, so a repeat is
//    harmless);
//  * the resource manager counts as lost when a message found no room or
//    waited for its completion for longer than stall_timeout, when the link
//    reports its end, or when a registration is not answered in time: the
//    link is dropped and a new one set up;
//  * connection attempts, and the closing of a dropped link, run on a thread
//    of their own (rdmalib has no asynchronous connect; on reliable-datagram
//    providers an attempt to reach a stopped peer lasts the whole
//    connect_timeout). The loop only looks whether the attempt finished.
//
// Outgoing queue (accounting reports), bounded by kMaxQueuedReports: a
// report is cumulative, so a new report for a lease replaces that lease's
// queued report that has not left yet (a final one replaces a periodic one).
// When the queue is full, the oldest periodic report goes (the lease's next
// periodic report brings its totals again); final reports are never dropped
// (there is at most one per lease). Heartbeats are not queued: one is posted
// when due and the link is free. Lease-ended notices come in and are handed
// to the manager as they arrive.
//
// Driven by the manager's loop thread through poll(); not thread-safe (the
// connection thread touches only its own attempt).
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include "executor_manager/report_outbox.hpp"
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
  /// Longest one connection attempt may take (on the connection thread;
  /// tcp;ofi_rxm connects lazily and took over 1.5 s on a loaded machine).
  std::chrono::milliseconds connect_timeout{5000};
  /// Pause between attempts while the resource manager cannot be reached,
  /// doubled after each failure up to 8 times this.
  std::chrono::milliseconds retry{1000};
  /// A message that finds no room, or waits for its completion, this long
  /// means the resource manager is lost (stopped, or gone without the
  /// provider saying so): the link is set up again. At least 3 heartbeat
  /// periods are allowed in any case.
  std::chrono::milliseconds stall_timeout{3000};
};

/// What the link did, for logs and tests.
struct RmLinkCounters {
  /// Accounting reports the resource manager's side took (send completed).
  uint64_t reports_sent = 0;
  /// Periodic reports dropped because the queue was full.
  uint64_t reports_dropped = 0;
  /// Links dropped because the resource manager stopped taking messages.
  uint64_t stalls = 0;
};

class RmLink {
public:
  /// Maximum accounting reports queued (see the file comment for the policy).
  static constexpr size_t kMaxQueuedReports = 4096;

  RmLink(rdmalib::Fabric &fabric, RmLinkOptions options);
  /// close(), then waits for a connection attempt under way (it is
  /// cancelled: within about 100 ms).
  ~RmLink();

  /// One step, never waiting for the resource manager: start a connection
  /// attempt when due or take a finished one, read what arrived, post a
  /// heartbeat when due and queued reports while the link takes them.
  /// Lease-ended notices (and renewals) are appended to `ended`.
  void poll(std::vector<protocol::LeaseEnded> &ended, uint32_t allocations);
  /// Queue an accounting report (sent once registered; kept across a
  /// reconnect; the policy when full is in the file comment).
  void report(const protocol::AccountingReport &r);
  bool registered() const { return state_ == State::Registered; }
  /// Reports waiting to be sent (the one in flight included).
  size_t queued() const { return outbox_.size(); }
  /// Whether notices came within the last 50 ms: leases end back to back
  /// (a client leasing and releasing at full rate), and the owner should
  /// poll again within a few milliseconds rather than its idle tens.
  bool notices_flowing() const {
    return std::chrono::steady_clock::now() - last_notice_ < std::chrono::milliseconds(50);
  }
  /// Whether a full LeasesEnded (kMaxLeasesEndedEntries) came within the
  /// last 5 ms: more wait at the resource manager, which sends the next
  /// message only once this one was read (on shm the send waits for the
  /// reader), so the owner should look again within a millisecond.
  bool notices_backed_up() const {
    return std::chrono::steady_clock::now() - last_full_notices_ < std::chrono::milliseconds(5);
  }
  const RmLinkCounters &counters() const { return counters_; }
  /// Says goodbye when registered (the resource manager marks the node down
  /// at once), waiting at most 200 ms for it to leave: for the manager's
  /// stop, after its loop ended. Cancels a connection attempt under way.
  void close();

private:
  enum class State { Disconnected, Connecting, Registering, Registered };
  /// What is in flight on the link's one send area.
  enum class InFlight { None, Register, Heartbeat, Report };
  struct Attempt;

  void start_attempt();
  void finish_attempt();
  void register_node();
  void disconnect(const std::string &why);
  /// Posts the send area's first `size` bytes as `what`; false when the link
  /// was dropped.
  bool post(size_t size, InFlight what, const char *name);
  /// Reads, confirms and posts until nothing moves; false when the link was
  /// dropped.
  bool exchange(std::vector<protocol::LeaseEnded> &ended, uint32_t allocations);
  bool handle(const protocol::ControlMessage &m, std::vector<protocol::LeaseEnded> &ended);
  void join_attempt();

  rdmalib::Fabric &fabric_;
  RmLinkOptions opt_;
  // The channel before the connection: its buffers outlive the close.
  protocol::ControlChannel channel_;
  rdmalib::Connection conn_;
  State state_ = State::Disconnected;
  std::unique_ptr<Attempt> attempt_;
  // A dropped link, closed by the next attempt's thread (closing may wait
  // up to a few hundred ms for a goodbye to leave).
  protocol::ControlChannel old_channel_;
  rdmalib::Connection old_conn_;
  std::chrono::steady_clock::time_point next_attempt_{};
  /// When the attempt under way started (an attempt that does not return
  /// is reported once: a provider call that ignores its deadline).
  std::chrono::steady_clock::time_point attempt_started_{};
  bool attempt_warned_ = false;
  /// close() was called (its summary is logged once).
  bool closed_ = false;
  std::chrono::steady_clock::time_point register_deadline_{};
  std::chrono::steady_clock::time_point next_heartbeat_{};
  std::chrono::milliseconds heartbeat_{1000};
  uint64_t sequence_ = 0;
  uint64_t last_timestamp_ = 0;
  ReportOutbox outbox_;
  InFlight in_flight_ = InFlight::None;
  /// When the message in flight was posted, or when a post first found no
  /// room (stalled_ then true).
  std::chrono::steady_clock::time_point waiting_since_{};
  bool stalled_ = false;
  /// When the last lease-ended notice was read.
  std::chrono::steady_clock::time_point last_notice_{};
  std::chrono::steady_clock::time_point last_full_notices_{};
  bool warned_ = false;
  bool drop_warned_ = false;
  int failures_ = 0;
  RmLinkCounters counters_;
};

} // namespace rfaas::manager
