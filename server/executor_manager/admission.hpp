// Admission control for the executor manager's client connections.
//
// A connection is "pending" from the moment the manager considers its
// ClientHello until the client has been granted an allocation (or goes away).
// Pending connections cost the manager an endpoint, descriptors and memory
// while the peer has proven nothing, so their number is bounded twice:
//
// * per peer address (admission.max_pending_per_peer): a new connection from
//   a peer that already holds that many is refused (ConnectReply
//   resources_unavailable); a single flooding host only hurts itself;
// * in total (admission.max_pending): when every place is taken, the oldest
//   pending connection of the peer holding the most is closed to make room,
//   so a flood spread over a few hosts can never keep a new peer out.
//
// Each setup step has a short deadline: accepting the connection and sending
// an answer wait at most deadlines_ms.connect, and a pending connection that
// has not obtained an allocation within admission.request_ms is closed.
//
// Every refusal and eviction is counted and logged, at most one line per
// reason and second (the others are summed into the next line), so that a
// flood cannot flood the log. counters() and describe() give the totals; the
// manager logs them periodically (admission.stats_interval_s) and at shutdown.
//
// Pure bookkeeping: no network, no clock of its own (callers pass the time),
// so that it is testable without a fabric.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "executor_manager/config.hpp"

namespace rfaas::manager {

class Admission {
public:
  using Clock = std::chrono::steady_clock;
  /// Identifies one pending connection; never 0.
  using Ticket = uint64_t;

  struct Counters {
    uint64_t admitted = 0;         // pending connections opened
    uint64_t granted = 0;          // left the pending state with an allocation
    uint64_t refused_per_peer = 0; // refused: the peer held max_pending_per_peer
    uint64_t evicted_full = 0;     // closed to make room at max_pending
    uint64_t evicted_deadline = 0; // closed: no allocation within request_ms
    uint64_t failed_setup = 0;     // accept or reply failed or timed out
    uint64_t bad_input = 0;        // malformed hellos and messages
    uint64_t peak_pending = 0;     // most pending connections at once
  };

  explicit Admission(const AdmissionConfig &config);

  /// Whether a new connection from `peer` (host part of its address) may be
  /// admitted; false when the peer is at its limit (counted, logged).
  bool may_admit(const std::string &peer, Clock::time_point now);

  /// When every place is taken: the pending connection to close before a new
  /// one is admitted (oldest of the peer holding the most), else 0. The caller
  /// closes it and calls evicted(); the eviction is counted and logged here.
  Ticket victim(Clock::time_point now);

  /// A connection from `peer` became pending.
  Ticket admitted(const std::string &peer, Clock::time_point now);
  /// It obtained an allocation: no longer pending.
  void granted(Ticket t);
  /// It closed (or was closed) while pending. Unknown tickets are ignored.
  void released(Ticket t);

  /// Pending connections older than request_ms, oldest first (counted and
  /// logged here); the caller closes each and calls released().
  std::vector<Ticket> expired(Clock::time_point now);

  /// An accept or a reply failed or missed its deadline.
  void setup_failed(const std::string &peer, const std::string &why, Clock::time_point now);

  /// A peer sent something malformed (a hello, a message): counted and
  /// logged with the same rate limit, so that garbage cannot flood the log.
  void bad_input(const std::string &what, Clock::time_point now);

  /// Something a client without an allocation did that is worth a warning
  /// (a refused request, a dropped link): logged with the same rate limit,
  /// not counted.
  void peer_event(const std::string &what, Clock::time_point now);

  size_t pending() const noexcept { return pending_.size(); }
  size_t pending_from(const std::string &peer) const;
  const Counters &counters() const noexcept { return counters_; }
  /// One line: every counter and the number pending now.
  std::string describe() const;

  /// The counter line, when stats_interval_s passed since the last one and
  /// a counter or the number pending changed; empty otherwise.
  std::string periodic(Clock::time_point now);

  /// Log lines held back by the rate limit, flushed now (at shutdown).
  void flush(Clock::time_point now);

private:
  struct Entry {
    std::string peer;
    Clock::time_point since;
  };
  /// One rate-limited log line: the first event of a quiet second is logged,
  /// the rest are counted and summed into the next logged line.
  struct Throttle {
    Clock::time_point last{};
    uint64_t suppressed = 0;
    std::string last_text;
  };
  void note(Throttle &t, const std::string &text, Clock::time_point now);
  void forget_peer(const std::string &peer);

  AdmissionConfig cfg_;
  Ticket next_ = 1;
  std::map<Ticket, Entry> pending_; // ordered by ticket = by age
  std::map<std::string, uint32_t> per_peer_;
  Counters counters_;
  Counters reported_;
  size_t reported_pending_ = 0;
  Clock::time_point last_report_ = Clock::now();
  Throttle refused_log_, full_log_, deadline_log_, failed_log_, bad_log_, peer_log_;
};

} // namespace rfaas::manager
