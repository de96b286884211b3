// The executor manager: one per node. Listens on the fabric, accepts clients
// (standalone mode: any client; with a resource manager: a client that proves
// a lease granted on this node, checked locally with the node secret) and the
// executors it started, grants allocations by starting an executor through its
// zygote, keeps accounting, and ends every allocation whose client or
// executor goes away.
//
// One class, one file per job:
//   manager.cpp      start-up and the loop (run)
//   clients.cpp      client intake: connection requests, admission, requests
//   allocations.cpp  granting an allocation, its lifecycle and its end
//   executors.cpp    the executors: zygote reports, signals, accounting links
//   leases.cpp       leases of the resource manager: proofs, ends, reports
//   zygote_link.*    the pipe to the zygote, which starts and confines executors
//                    (server/executor/zygote.cpp, sandbox.cpp)
//
// Everything runs on one thread: a poll() loop over the listener's fd, the
// zygote's event pipe and a signalfd, followed by a non-blocking poll of every
// open connection (which also drives progress on manual-progress fabrics, as
// executors' remote atomics into the accounting records need). Nothing a peer
// sends can stop the loop: malformed messages are answered with an error
// status or dropped, and every failure is logged and survived.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include "executor_manager/accounting.hpp"
#include "executor_manager/admission.hpp"
#include "executor_manager/config.hpp"
#include "executor_manager/rm_link.hpp"
#include "executor_manager/zygote_link.hpp"
#include "protocol/protocol.hpp"
#include "resource_manager/lease_token.hpp"

namespace rfaas::manager {

using protocol::AccountingCounters;

class Manager {
public:
  /// Opens the fabric and the listener and starts the zygote. `executor` is
  /// the path of the executor binary. Throws rdmalib::Error / ConfigError /
  /// std::runtime_error with the cause.
  Manager(ManagerConfig config, rdmalib::DeviceConfig device, std::string executor);
  ~Manager();

  /// The address clients connect to (real port).
  const rdmalib::Address &address() const;
  const std::string &provider() const;

  /// Serve until SIGINT or SIGTERM; then end every allocation and return 0.
  int run();

private:
  using Clock = std::chrono::steady_clock;
  struct Client;
  struct Allocation;
  struct PooledLink;

  /// A report of the zygote about an executor (executors.cpp).
  void executor_event(const ZygoteEvent &e);
  /// Take pending connection requests, waiting up to `first_wait` for the first.
  void accept_requests(std::chrono::milliseconds first_wait);
  void accept_one(rdmalib::ConnectionRequest &req);
  void poll_clients();
  void poll_executors();
  void handle_allocation_request(Client &c, const uint8_t *msg, size_t len);
  void reply(Client &c, protocol::ErrorCode status, uint64_t id, uint32_t workers,
             const std::string &message);
  void client_left(Client &c, bool graceful);
  // Admission hooks (admission.hpp): close a pending client, log counters.
  void close_pending(Admission::Ticket t);
  void admission_tick(Clock::time_point now);
  void tick();
  void finish(Allocation &a);
  /// Sends the client of `a`, whose executor ended without the client asking,
  /// a second AllocationResponse (ShuttingDown, with the cause): a client
  /// still waiting for its workers fails at once instead of at its own
  /// deadline. One that is past that wait never reads it.
  void tell_client_ended(const Allocation &a);
  void check_lease(Client &c, const uint8_t *msg, size_t len);
  void lease_ended(const protocol::LeaseEnded &e);
  /// A LeaseEnded notice with why Renewed: the lease's allocations may run
  /// until its new expiry.
  void lease_renewed(const protocol::LeaseEnded &e);
  /// Ends, by this node's clock, the allocations of leases past their
  /// latest known expiry: they end even while the resource manager, which
  /// would tell us, cannot be reached.
  void expire_leases();
  /// The ended-lease file (resource_manager.ended_leases_file): read at
  /// start, so that a restarted manager refuses the tokens of leases that
  /// ended before, and appended to as leases end.
  void load_ended_leases();
  /// Appends to the ended-lease file's buffer; flush_ended() writes it.
  void remember_ended(uint64_t lease_id, uint64_t kept_until_ms);
  void flush_ended();
  void report_lease(uint64_t lease_id, bool final);
  /// Posts Shutdown (LeaseInvalid) on the executor's accounting link, or
  /// leaves it for a later pass while the link is not up or its send area
  /// busy (Allocation::lease_end_untold). False when the executor cannot be
  /// told (the link failed or is gone): end it without a grace period.
  bool tell_lease_ended(Allocation &a);
  void signal_executor(Allocation &a, int sig);
  /// Its executor's accounting link is up (accepted, or bound from the
  /// pool): advertise the accounting record, tell it a lease end it missed.
  void executor_linked(Allocation &a);
  /// A pooled executor's link presenting `secret`, not yet connected; null
  /// when no pooled executor has that secret (forged, or spent).
  PooledLink *find_pooled_link(const protocol::Token &secret);
  /// The zygote gave the pooled executor `pid` to `a` ("started ...
  /// pooled") and the client has its answer: the link it connected while
  /// pooled now serves `a`, and its secret is spent.
  void bind_pooled_link(Allocation &a, pid_t pid);
  /// Look at every pooled executor's link: one that ended, or that did not
  /// come up within executor_start_ms, is discarded with its executor
  /// (ZygoteLink::unpool), so that no allocation is bound to it.
  void poll_pooled_links();
  /// Some pooled executor's accounting link still owes it the answer to its
  /// hello (left in the background: only polls post it again), so the loop
  /// must poll again within a millisecond rather than sleep.
  bool pooled_answer_pending() const;
  /// The zygote died, or could not be started again (`what`): it is
  /// restarted at once the first time, then after a back-off that doubles
  /// from kZygoteBackoffStep up to kZygoteBackoffMax while it keeps failing
  /// (a failure kZygoteBurstGap after the previous one starts afresh), so
  /// that a zygote that fails at once every time is not restarted in a loop.
  /// Logged at error once per burst, the rest at debug.
  void zygote_failed(const std::string &what);
  /// Restart the zygote when its back-off is over (run's loop).
  void restart_zygote();
  static constexpr std::chrono::milliseconds kZygoteBackoffStep{200};
  static constexpr std::chrono::milliseconds kZygoteBackoffMax{10000};
  static constexpr std::chrono::milliseconds kZygoteBurstGap{60000};

  ManagerConfig cfg_;
  rdmalib::DeviceConfig device_;
  std::string executor_path_;
  // Opened before fabric_: providers start threads when the fabric opens
  // (sockets' progress thread), and a thread that has SIGTERM unblocked takes
  // the signal instead of the signalfd, ending the process without a clean
  // shutdown. Blocking first makes every later thread inherit the mask.
  int signal_fd_ = -1;
  rdmalib::Fabric fabric_;
  rdmalib::Listener listener_;
  ZygoteLink zygote_;

  std::vector<bool> core_used_;
  uint32_t memory_used_ = 0;
  std::vector<std::unique_ptr<Client>> clients_;
  Admission admission_;
  size_t pending_peak_since_trim_ = 0; // most pending connections since the last malloc_trim
  std::map<uint64_t, std::unique_ptr<Allocation>> allocations_;
  /// Executors started, and how many of them came from the zygote's pool
  /// (logged when the manager stops).
  uint64_t executors_started_ = 0, executors_pooled_ = 0;
  /// Pooled executors' accounting links, connected (or awaited) before
  /// their allocation, by pid (executor_pool in docs/runtime.md).
  std::map<pid_t, std::unique_ptr<PooledLink>> pooled_links_;
  /// Allocations whose accounting link was connected while their executor
  /// was pooled (logged when the manager stops).
  uint64_t links_ahead_ = 0;
  /// The zygote's restarts (zygote_failed).
  bool zygote_restart_due_ = false;
  Clock::time_point zygote_restart_at_{}, zygote_last_failure_{};
  unsigned zygote_failures_ = 0;
  std::chrono::milliseconds zygote_backoff_{0};

  // With a resource manager (resource_manager.enabled) only.
  std::unique_ptr<RmLink> rm_;
  std::unique_ptr<rm::TokenVerifier> verifier_;
  /// Per lease: accounting of its ended allocations, in microseconds.
  struct LeaseUse {
    AccountingCounters totals;
    uint64_t memory_mib = 0;
    bool ended = false;
  };
  std::map<uint64_t, LeaseUse> lease_use_;
  /// Per lease with a verified client here: the latest expiry (wall-clock
  /// ms) its tokens or the resource manager's renewal notices named.
  std::map<uint64_t, uint64_t> lease_expiry_;
  /// No lease of lease_expiry_ expires before this (wall-clock ms; UINT64_MAX
  /// when none is watched). Lowered by every insertion or renewal that
  /// brings an expiry earlier, recomputed by each look through them; a lease
  /// that ends otherwise may leave it early, which costs one look too many.
  uint64_t earliest_expiry_ms_ = UINT64_MAX;
  /// The ended-lease file, open for appending (closed when it cannot be written).
  std::ofstream ended_out_;
  bool ended_unflushed_ = false;
  /// When live allocations' accounting was last reported.
  Clock::time_point last_periodic_report_{};
  /// When the loop last looked for connection requests.
  Clock::time_point last_accept_look_{};
  /// Messages, connection requests and zygote reports handled (events_),
  /// the count at the end of the previous round, and when the loop last saw
  /// one or an allocation or client in transition: its poll interval.
  uint64_t events_ = 0, events_seen_ = 0;
  Clock::time_point last_activity_{};
  /// Every allocation serving, every client with its allocation.
  bool settled() const;
  /// Right after accepting client `c`: poll the clients, without sleeping,
  /// until `c` sent its AllocationRequest (and was answered) or left, for
  /// at most kAwaitRequest.
  void await_request(const Client *c);
  /// How long await_request() waits: librfaas sends its request right
  /// after connecting (~0.1-0.5 ms here).
  static constexpr std::chrono::milliseconds kAwaitRequest{3};
  void report_live_leases();
};

} // namespace rfaas::manager
