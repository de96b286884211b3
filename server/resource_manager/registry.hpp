// The resource manager's state machine: nodes and their cores, leases from
// grant to end, and accounting. Plain C++, single-threaded by design: the
// loop thread owns it (HTTP threads and, later, the fabric reach it through
// the Loop's queue), so no lock guards it. Time comes from an injected clock,
// so tests drive expiry and heartbeats without sleeping.
//
// Every change is written to the Store first and applied in memory only if
// the write succeeded, so memory and file never disagree.
//
// Nothing that happens per lease or per heartbeat visits every node or every
// lease: free capacity, expiries, heartbeats, each node's leases and each
// user's holdings are indexed, and the indexes change with the state they
// follow (grant, renew, end, register, heartbeat, down, drain, removal).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "resource_manager/lease.hpp"
#include "resource_manager/node.hpp"
#include "resource_manager/placement.hpp"
#include "resource_manager/quota.hpp"
#include "resource_manager/store.hpp"

namespace rfaas::rm {

/// Milliseconds since the Unix epoch.
using Clock = std::function<uint64_t()>;
/// The system's wall clock.
uint64_t wall_clock_ms();

struct RegistryOptions {
  PlacementPolicy policy = PlacementPolicy::Spread;
  /// Lease duration when a request says 0, and the most a request may ask.
  uint64_t default_lease_ms = 60'000;
  uint64_t max_lease_ms = 3'600'000;
  /// Memory of a lease whose request says 0 MiB: a lease always names the
  /// memory its executors may use (the node enforces it).
  uint64_t default_memory_mib = 1024;
  /// A node without a heartbeat for this long is marked down.
  uint64_t heartbeat_timeout_ms = 15'000;
  /// Most nodes one lease may span.
  uint32_t max_nodes_per_lease = 16;
  /// Ended leases and accounting older than this many days are deleted
  /// (checked hourly by tick()); 0 keeps them forever.
  uint32_t retention_days = 0;
  /// Per-user limits from the configuration (quota.hpp); REST changes are
  /// stored and applied on top.
  QuotaConfig quotas;
};

/// How a request ended. Each maps onto one HTTP status and, later, one wire
/// error code.
enum class Outcome {
  Ok,
  Invalid,     ///< the request itself is wrong (400)
  NotFound,    ///< no such node or lease (404)
  Conflict,    ///< exists already, or in use (409)
  Forbidden,   ///< wrong node secret or another client's lease (403)
  Unavailable, ///< not enough free cores or memory (503 / resources_unavailable)
  /// The requester's quota does not allow it (429; on the wire
  /// resources_unavailable, the message names the quota).
  QuotaExceeded,
  StoreFailed, ///< the database refused the write; nothing changed (500)
};
const char *to_string(Outcome o);

struct Status {
  Outcome outcome = Outcome::Ok;
  std::string message;
  bool ok() const { return outcome == Outcome::Ok; }
};

template <class T> struct Result : Status { T value{}; };

/// A node with what its leases use.
struct NodeView {
  Node node;
  uint32_t used_cores = 0;
  uint64_t used_memory_mib = 0;
  size_t active_leases = 0;
  uint32_t free_cores() const { return node.cores > used_cores ? node.cores - used_cores : 0; }
};

/// Node counts and cores over every node, for /metrics.
struct NodeTotals {
  uint64_t up = 0, down = 0, drained = 0;
  uint64_t cores = 0, cores_leased = 0;
};

struct LeaseRequest {
  std::string client;
  uint32_t cores = 0;
  /// In total over the lease's parts; 0: RegistryOptions::default_memory_mib.
  uint64_t memory_mib = 0;
  /// 0: the default duration.
  uint64_t duration_ms = 0;
  /// 1: one node only; more lets the lease span up to this many nodes.
  uint32_t max_nodes = 1;
  /// Who asks, as authenticated (ClientAuth): the uid, kAnonymousOwner
  /// without authentication, and the SLURM job id (empty outside a job).
  uint32_t owner_uid = kAnonymousOwner;
  std::string job_id{};
};

/// A granted (or renewed) lease with what the client needs to use it: per
/// part, the node's address and the token its executor manager will verify.
struct Grant {
  Lease lease;
  std::vector<std::string> addresses;
  std::vector<LeaseToken> tokens;
  /// Only in the answer to grant(): the lease's secret, for its client alone
  /// (the registry keeps only its hash). Zero after renew().
  LeaseSecret secret{};
};

/// Something the nodes must hear: a lease ended (their executors for it end
/// and its token becomes a replay), or, with `why` Active, a lease was
/// renewed until `expiry_ms` (nodes end allocations at the expiry they know,
/// on their own clock). The fabric side delivers these.
struct LeaseEnded {
  uint64_t lease_id = 0;
  std::string node;
  /// With `why` Active the new expiry; for an end the lease's
  /// tokens_until_ms (0: not known), until which the node refuses its
  /// tokens as replays.
  uint64_t expiry_ms = 0;
  LeaseState why = LeaseState::Released;
};

/// Index entries looked at by the per-event paths, cumulative: counts, not
/// times, so tests can check that an event's cost does not grow with the
/// fleet.
struct Work {
  /// Capacity index entries looked at by grant()'s placement.
  uint64_t placement = 0;
  /// Leases looked at by tick() (due or not), mark_down() and
  /// register_node() (the node's own).
  uint64_t leases = 0;
  /// Nodes looked at by tick()'s heartbeat check.
  uint64_t nodes = 0;
};

struct Counters {
  uint64_t granted = 0;
  uint64_t refused = 0;
  /// Of `refused`: by a quota.
  uint64_t refused_quota = 0;
  uint64_t renewed = 0;
  uint64_t released = 0;
  uint64_t expired = 0;
  uint64_t revoked = 0;
  uint64_t node_down = 0;
};

class Registry {
public:
  /// Restores nodes and active leases from `store`. Nodes that were up get a
  /// full heartbeat timeout from now to show up again.
  Registry(Store &store, Clock clock, RegistryOptions options);
  /// The indexes point into the registry's own nodes: not copyable.
  Registry(const Registry &) = delete;
  Registry &operator=(const Registry &) = delete;

  // ---- nodes --------------------------------------------------------------------
  /// Operator: a node that will register later. No secret: one is generated.
  /// The returned node carries the secret, to be handed to its executor manager.
  Result<Node> add_node(const std::string &name, const std::string &address, uint32_t cores,
                        uint64_t memory_mib, std::optional<NodeSecret> secret);
  /// Executor manager: (re-)registers; marks the node up. A known node must
  /// present its secret and gets its node and its drain flag back (its
  /// leases ended when it went down);
  /// an unknown one is created with the secret it presents. The node is
  /// told again the expiry of every active lease it holds a part of (it may
  /// have missed renewals while its link was down).
  /// `signed_ms` is the node's signed registration time: one not later than
  /// the last accepted one is a replay (Forbidden), also after a restart of
  /// the resource manager (it is stored). 0: not checked.
  Result<Node> register_node(const std::string &name, const std::string &address, uint32_t cores,
                             uint64_t memory_mib, const NodeSecret &secret, uint64_t signed_ms = 0);
  Status heartbeat(const std::string &name);
  /// Marks a node down now (its connection closed, or tick() found it
  /// silent) and ends, at once, every active lease that holds cores on it
  /// (LeaseState::NodeDown, whole leases even when they span other nodes):
  /// their cores are free and renewing them is refused with a message
  /// naming the node and `reason`, when given ("pilot job 12 ended:
  /// CANCELLED"). A node that comes back starts with no leases.
  Status mark_down(const std::string &name, const std::string &reason = "");
  /// Adds `reason` to what the refusal of a renewal says about leases that
  /// node `name` ended when it went down without one (its connection
  /// closed before its pilot job's end was known).
  void explain_down(const std::string &name, const std::string &reason);
  Status drain(const std::string &name, bool drained);
  /// Operator: gives node `name` a new secret (`secret`, or a generated one)
  /// and returns the node with it. Its leases and its registered connection
  /// stay; its next registration, and the tokens of grants and renewals from
  /// now on, use the new secret.
  Result<Node> rotate_secret(const std::string &name, std::optional<NodeSecret> secret);
  /// Removes a node. With active leases: Conflict, unless `revoke_leases`.
  Status remove_node(const std::string &name, bool revoke_leases);

  // ---- leases -------------------------------------------------------------------
  Result<Grant> grant(const LeaseRequest &request);
  /// Forgets lease `lease_id`, granted in this pass, whose write the store
  /// could not make durable (Store::commit_batch reported it): its client
  /// is refused, so its cores and quota are free at once instead of held
  /// by nobody until its expiry. Nothing is written and no node is told
  /// (no node has seen its token). No effect on a lease not active.
  void withdraw_grant(uint64_t lease_id);
  /// Extends an active lease to now + duration (0: default); new tokens.
  /// `client` and `secret` must be those of the grant (Forbidden otherwise).
  /// Its nodes are told the new expiry (a LeaseEnded event with why Active).
  Result<Grant> renew(uint64_t lease_id, const std::string &client, const LeaseSecret &secret,
                      uint64_t duration_ms);
  Status release(uint64_t lease_id, const std::string &client, const LeaseSecret &secret);
  /// Operator: ends a lease now; its nodes are told to end its executors.
  Status revoke(uint64_t lease_id);

  /// Periodic: expires leases past their expiry and marks silent nodes down.
  /// Returns how many leases expired.
  size_t tick();

  // ---- quotas -------------------------------------------------------------------
  const Quotas &quotas() const { return quotas_; }
  /// What the active leases of `user` hold now: a tally kept by grant and
  /// every end of a lease, O(1).
  QuotaUsage quota_usage(const QuotaUser &user) const;
  /// Operator: sets the default limits (`key` empty; absent fields keep the
  /// configuration's) or the override of user `key` (QuotaUser::key()),
  /// stored so that a restart keeps it. Leases already granted stay.
  Status set_quota(const std::string &key, const QuotaLimits &limits);
  /// Operator: drops a REST override (`key` empty: the default's); the
  /// configuration's limits apply again. NotFound when there was none.
  Status remove_quota(const std::string &key);

  // ---- accounting ---------------------------------------------------------------
  /// A node's report for its part of a lease (any state: the final report
  /// arrives after the end).
  Status record_accounting(AccountingRecord record);

  // ---- views --------------------------------------------------------------------
  /// Every node, by name (a copy: O(nodes)).
  std::vector<NodeView> nodes() const;
  /// One node: a map lookup.
  std::optional<NodeView> node(const std::string &name) const;
  size_t node_count() const { return nodes_.size(); }
  /// Counts over every node, kept up to date as nodes change (O(1)).
  NodeTotals node_totals() const { return totals_; }
  std::vector<Lease> active_leases() const;
  std::optional<Lease> active_lease(uint64_t id) const;
  const Counters &counters() const { return counters_; }
  const Work &work() const { return work_; }
  size_t active_count() const { return active_.size(); }
  /// Takes the lease-ended notifications not yet delivered.
  std::vector<LeaseEnded> take_events();
  /// The nodes changed since the last call (all of them on the first), each
  /// once, by name: its view now, or none when it was removed. O(changed):
  /// what the loop publishes for GET /nodes instead of copying every node.
  std::vector<std::pair<std::string, std::optional<NodeView>>> take_changed_nodes();
  /// An active lease that changed: granted or renewed (`lease` set) or
  /// ended (`lease` none).
  struct LeaseChange {
    uint64_t id = 0;
    uint64_t granted_ms = 0;
    std::optional<Lease> lease;
  };
  /// The active leases granted, renewed or ended since the last call (every
  /// active one on the first). O(changed); for GET /leases.
  std::vector<LeaseChange> take_changed_leases();
  Store &store() { return store_; }
  uint64_t now() const { return clock_(); }
  const RegistryOptions &options() const { return options_; }

private:
  struct NodeEntry {
    Node node;
    /// Per core index: the lease holding it, 0 if free. May be longer than
    /// node.cores when a node re-registered with fewer cores while leases
    /// still held the higher ones.
    std::vector<uint64_t> owner;
    uint64_t used_memory_mib = 0;
    /// Cores held (owner != 0), and of them those below node.cores.
    uint32_t held = 0;
    uint32_t held_below = 0;
    /// The active leases with a part here.
    std::set<uint64_t> leases;
    /// Its place in by_heartbeat_ while it is up.
    std::list<NodeEntry *>::iterator heard;
    bool listening = false;
    /// Listed in changed_nodes_ (see changed()).
    bool changed = false;
    /// Whether totals_ and capacity_ count it (see unlink/link).
    bool linked = false;
    uint32_t free_cores() const { return node.cores - held_below; }
    uint64_t free_memory_mib() const {
      return node.memory_mib > used_memory_mib ? node.memory_mib - used_memory_mib : 0;
    }
  };

  Status end_lease(uint64_t lease_id, LeaseState why);
  /// Forbidden unless `client` and `secret` are those the lease was granted to.
  Status check_owner(const Lease &lease, const std::string &client,
                     const LeaseSecret &secret) const;
  /// Why `lease_id` cannot be renewed or released: not active, and how it
  /// ended when this registry knows.
  Status not_active(uint64_t lease_id) const;
  /// Indexes an active lease (its cores, expiry, nodes and owner's tally)
  /// and takes it into active_.
  void occupy(Lease lease);
  /// The reverse: out of every index and out of active_.
  void vacate(std::unordered_map<uint64_t, Lease>::iterator it);
  /// Before a change to a node: takes it out of totals_ and capacity_.
  void unlink(NodeEntry &e);
  /// After it: counts it in totals_ and, up and not drained, in capacity_.
  void link(NodeEntry &e);
  /// Moves the node to the back of by_heartbeat_ (it was heard now), or takes
  /// it off (down or removed).
  void heard(NodeEntry &e);
  void not_listening(NodeEntry &e);
  /// Lists the node for take_changed_nodes(): link() and heard() call it,
  /// as every change to what a node view shows goes through one of them.
  void changed(NodeEntry &e);
  /// Adds (`sign` 1) or takes back (-1) a lease's cores, memory and count in
  /// its owner's tally.
  void tally(const Lease &lease, int sign);
  Grant make_grant(const Lease &lease) const;
  static NodeView view_of(const NodeEntry &e);
  Status persist_node(const Node &node);
  static Status fail(Outcome o, std::string message) { return Status{o, std::move(message)}; }

  Store &store_;
  /// The highest lease id the database held when this registry opened.
  uint64_t id_floor_ = 0;
  Clock clock_;
  RegistryOptions options_;
  std::map<std::string, NodeEntry> nodes_;
  std::unordered_map<uint64_t, Lease> active_;
  /// The last kRecentlyEnded leases to end, oldest first in recent_order_:
  /// each node's final accounting report arrives just after its lease ends,
  /// and answering it from here spares a database look-up per lease.
  static constexpr size_t kRecentlyEnded = 4096;
  std::unordered_map<uint64_t, Lease> recently_ended_;
  std::deque<uint64_t> recent_order_;
  /// Up, undrained nodes by free capacity: placement's search.
  CapacityIndex capacity_;
  NodeTotals totals_;
  /// Active leases by expiry: tick() looks only at those due.
  std::set<std::pair<uint64_t, uint64_t>> by_expiry_;
  /// Up nodes, least recently heard first: tick() looks only at the front.
  /// Heartbeats arrive in clock order, so the list stays ordered by
  /// last_heartbeat_ms (a wall clock stepped back delays the down verdict
  /// of the nodes behind a newer one by at most that step).
  std::list<NodeEntry *> by_heartbeat_;
  /// What the active leases hold, per owner uid and, for leases without a
  /// known owner, per client name (quota_usage's rule). Users holding
  /// nothing have no entry.
  std::unordered_map<uint32_t, QuotaUsage> usage_by_uid_;
  std::unordered_map<std::string, QuotaUsage> usage_by_client_;
  Work work_;
  std::deque<LeaseEnded> events_;
  /// Names for take_changed_nodes(), each once (NodeEntry::changed), and
  /// those of nodes removed since.
  std::vector<std::string> changed_nodes_;
  /// Lease id and grant time, for take_changed_leases() (a lease may be
  /// listed more than once).
  std::vector<std::pair<uint64_t, uint64_t>> changed_leases_;
  Counters counters_;
  Quotas quotas_;
  /// Lease id -> the node whose going down ended it, for the refusal of a
  /// later renewal (bounded: the oldest are forgotten, then the lease's
  /// nodes are named instead).
  std::unordered_map<uint64_t, std::string> down_cause_;
  std::deque<uint64_t> down_order_;
  /// When tick() last pruned the history (retention_days).
  uint64_t last_prune_ms_ = 0;
};

} // namespace rfaas::rm
