#include "resource_manager/registry.hpp"

#include <algorithm>
#include <chrono>

#include <sodium.h>
#include <spdlog/spdlog.h>

namespace rfaas::rm {

namespace {

std::shared_ptr<spdlog::logger> log() {
  auto l = spdlog::get("resource_manager");
  return l ? l : spdlog::default_logger();
}

template <class T> Result<T> error(Status s) {
  Result<T> r;
  r.outcome = s.outcome;
  r.message = std::move(s.message);
  return r;
}
template <class T> Result<T> error(Outcome o, std::string message) {
  return error<T>(Status{o, std::move(message)});
}
template <class T> Result<T> success(T value) {
  Result<T> r;
  r.value = std::move(value);
  return r;
}

/// Node names travel in fixed wire fields (64 bytes with the terminator) and
/// in URLs, so they are short and plain.
std::string check_node_name(const std::string &name) {
  if (name.empty() || name.size() > 63)
    return "node name must be 1..63 characters, got " + std::to_string(name.size());
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
      return "node name \"" + name + "\" may contain only letters, digits, '-', '_' and '.'";
  return {};
}

std::string check_capacity(const std::string &address, uint32_t cores, uint64_t memory_mib) {
  if (address.empty() || address.size() > 255)
    return "node address must be 1..255 characters";
  if (cores == 0 || cores > 4096)
    return "node cores must be 1..4096, got " + std::to_string(cores);
  if (memory_mib == 0)
    return "node memory_mib must be > 0";
  return {};
}

} // namespace

uint64_t wall_clock_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

const char *to_string(Outcome o) {
  switch (o) {
  case Outcome::Ok:
    return "ok";
  case Outcome::Invalid:
    return "invalid";
  case Outcome::NotFound:
    return "not_found";
  case Outcome::Conflict:
    return "conflict";
  case Outcome::Forbidden:
    return "forbidden";
  case Outcome::Unavailable:
    return "resources_unavailable";
  case Outcome::QuotaExceeded:
    return "quota_exceeded";
  case Outcome::StoreFailed:
    return "store_failed";
  }
  return "unknown";
}

Registry::Registry(Store &store, Clock clock, RegistryOptions options)
    : store_(store), clock_(std::move(clock)), options_(options), quotas_(options_.quotas) {
  ensure_sodium();
  const uint64_t now = clock_();
  // Limits an operator set through REST win over the configuration's.
  for (const auto &[key, limits] : store_.load_quotas()) {
    if (key.empty())
      quotas_.set_rest_default(limits);
    else
      quotas_.set_rest_user(key, limits);
  }
  for (Node &n : store_.load_nodes()) {
    if (n.state == NodeState::Up)
      n.last_heartbeat_ms = now; // a grace period to reconnect after our restart
    NodeEntry e;
    e.owner.assign(n.cores, 0);
    e.node = std::move(n);
    nodes_.emplace(e.node.name, std::move(e));
  }
  id_floor_ = store_.max_lease_id();
  // Leases first, so that each node is indexed once with what they hold.
  for (Lease &l : store_.load_leases(LeaseState::Active)) {
    for (const LeasePart &p : l.parts) {
      auto it = nodes_.find(p.node);
      if (it == nodes_.end())
        throw StoreError("lease " + std::to_string(l.id) + " holds cores on node " + p.node +
                         ", which is not in the database");
      for (uint32_t c : p.cores) {
        if (c >= it->second.owner.size())
          it->second.owner.resize(c + 1, 0);
        if (it->second.owner[c] != 0)
          throw StoreError("core " + std::to_string(c) + " of node " + p.node +
                           " is held by leases " + std::to_string(it->second.owner[c]) + " and " +
                           std::to_string(l.id) + " in the database");
      }
    }
    occupy(std::move(l));
  }
  for (auto &[name, e] : nodes_) {
    unlink(e);
    link(e);
    if (e.node.state == NodeState::Up)
      heard(e);
  }
}

void Registry::unlink(NodeEntry &e) {
  if (!e.linked)
    return;
  (e.node.state == NodeState::Up ? totals_.up : totals_.down) -= 1;
  totals_.drained -= e.node.drained;
  totals_.cores -= e.node.cores;
  totals_.cores_leased -= e.held;
  e.linked = false;
}

void Registry::link(NodeEntry &e) {
  if (e.linked)
    unlink(e);
  (e.node.state == NodeState::Up ? totals_.up : totals_.down) += 1;
  totals_.drained += e.node.drained;
  totals_.cores += e.node.cores;
  totals_.cores_leased += e.held;
  e.linked = true;
  changed(e);
  if (e.node.state == NodeState::Up && !e.node.drained)
    capacity_.update(e.node.name, e.free_cores(), e.free_memory_mib());
  else
    capacity_.remove(e.node.name);
}

void Registry::heard(NodeEntry &e) {
  changed(e);
  if (e.listening) {
    by_heartbeat_.splice(by_heartbeat_.end(), by_heartbeat_, e.heard);
    return;
  }
  e.heard = by_heartbeat_.insert(by_heartbeat_.end(), &e);
  e.listening = true;
}

void Registry::changed(NodeEntry &e) {
  if (e.changed)
    return;
  e.changed = true;
  changed_nodes_.push_back(e.node.name);
}

void Registry::not_listening(NodeEntry &e) {
  if (!e.listening)
    return;
  by_heartbeat_.erase(e.heard);
  e.listening = false;
}

// ---- nodes ------------------------------------------------------------------------

Status Registry::persist_node(const Node &node) {
  try {
    store_.put_node(node);
    return {};
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
}

Result<Node> Registry::add_node(const std::string &name, const std::string &address, uint32_t cores,
                                uint64_t memory_mib, std::optional<NodeSecret> secret) {
  if (auto why = check_node_name(name); !why.empty())
    return error<Node>(Outcome::Invalid, why);
  if (auto why = check_capacity(address, cores, memory_mib); !why.empty())
    return error<Node>(Outcome::Invalid, why);
  if (nodes_.count(name))
    return error<Node>(Outcome::Conflict, "node " + name + " exists already");
  Node n;
  n.name = name;
  n.address = address;
  n.cores = cores;
  n.memory_mib = memory_mib;
  n.secret = secret ? *secret : generate_secret();
  n.state = NodeState::Down; // until its executor manager registers
  if (auto s = persist_node(n); !s.ok())
    return error<Node>(s);
  NodeEntry &e = nodes_[name];
  e.node = n;
  e.owner.assign(cores, 0);
  link(e);
  log()->info("node {} added ({} cores, {} MiB, {})", name, cores, memory_mib, address);
  return success(n);
}

Result<Node> Registry::register_node(const std::string &name, const std::string &address,
                                     uint32_t cores, uint64_t memory_mib, const NodeSecret &secret,
                                     uint64_t signed_ms) {
  if (auto why = check_node_name(name); !why.empty())
    return error<Node>(Outcome::Invalid, why);
  if (auto why = check_capacity(address, cores, memory_mib); !why.empty())
    return error<Node>(Outcome::Invalid, why);
  const uint64_t now = clock_();
  auto it = nodes_.find(name);
  Node n;
  if (it != nodes_.end()) {
    if (sodium_memcmp(it->second.node.secret.data(), secret.data(), secret.size()) != 0)
      return error<Node>(Outcome::Forbidden, "node " + name +
                                                 " is registered with another secret (check the "
                                                 "executor manager's secret file)");
    n = it->second.node;
    if (signed_ms != 0 && signed_ms <= n.registration_signed_ms)
      return error<Node>(Outcome::Forbidden,
                         "node " + name + ": registration replayed (timestamp " +
                             std::to_string(signed_ms) + " not newer than the last accepted, " +
                             std::to_string(n.registration_signed_ms) + ")");
  } else {
    n.name = name;
    n.secret = secret;
  }
  if (signed_ms != 0)
    n.registration_signed_ms = signed_ms;
  n.address = address;
  n.cores = cores;
  n.memory_mib = memory_mib;
  n.state = NodeState::Up;
  n.registered_ms = now;
  n.last_heartbeat_ms = now;
  if (auto s = persist_node(n); !s.ok())
    return error<Node>(s);
  NodeEntry &e = nodes_[name];
  unlink(e);
  e.node = n;
  if (e.owner.size() < cores)
    e.owner.resize(cores, 0);
  // Its core count may have changed: which held cores are its own again.
  e.held_below = 0;
  for (uint32_t c = 0; c < cores; ++c)
    e.held_below += e.owner[c] != 0;
  link(e);
  heard(e);
  for (uint64_t id : e.leases) {
    ++work_.leases;
    events_.push_back(LeaseEnded{id, name, active_.at(id).expiry_ms, LeaseState::Active});
  }
  log()->info("node {} registered ({} cores, {} MiB, {}){}", name, cores, memory_mib, address,
              it != nodes_.end() ? " again" : "");
  return success(n);
}

Status Registry::heartbeat(const std::string &name) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return fail(Outcome::NotFound, "node " + name + " is not registered; register first");
  NodeEntry &e = it->second;
  Node &n = e.node;
  const uint64_t now = clock_();
  if (n.state == NodeState::Down) {
    if (n.registered_ms == 0)
      return fail(Outcome::NotFound, "node " + name + " never registered; register first");
    Node up = n;
    up.state = NodeState::Up;
    up.last_heartbeat_ms = now;
    if (auto s = persist_node(up); !s.ok())
      return s;
    log()->info("node {} is up again", name);
    unlink(e);
    n.state = NodeState::Up;
    link(e);
  }
  // Heartbeats themselves are not written: only state changes are.
  n.last_heartbeat_ms = now;
  heard(e);
  return {};
}

Status Registry::mark_down(const std::string &name, const std::string &reason) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return fail(Outcome::NotFound, "no node " + name);
  if (it->second.node.state == NodeState::Down)
    return {};
  NodeEntry &e = it->second;
  Node down = e.node;
  down.state = NodeState::Down;
  if (auto s = persist_node(down); !s.ok())
    return s;
  unlink(e);
  e.node = down;
  link(e);
  not_listening(e);
  // Its executors are gone or unreachable: its leases end now, so their
  // clients learn it at their next renewal and the cores of their other
  // nodes serve someone else.
  const std::vector<uint64_t> holding(e.leases.begin(), e.leases.end());
  work_.leases += holding.size();
  size_t ended = 0;
  for (uint64_t id : holding) {
    if (Status s = end_lease(id, LeaseState::NodeDown); !s.ok()) {
      log()->error("node {} is down but its lease {} could not end: {}", name, id, s.message);
      continue;
    }
    ++ended;
    down_cause_[id] = reason.empty() ? name : name + " (" + reason + ")";
    down_order_.push_back(id);
    while (down_order_.size() > 4096) {
      down_cause_.erase(down_order_.front());
      down_order_.pop_front();
    }
  }
  log()->warn("node {} is down; {} lease(s) on it ended", name, ended);
  return {};
}

void Registry::explain_down(const std::string &name, const std::string &reason) {
  for (auto &[lease, cause] : down_cause_)
    if (cause == name)
      cause = name + " (" + reason + ")";
}

Status Registry::drain(const std::string &name, bool drained) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return fail(Outcome::NotFound, "no node " + name);
  Node n = it->second.node;
  n.drained = drained;
  if (auto s = persist_node(n); !s.ok())
    return s;
  unlink(it->second);
  it->second.node = n;
  link(it->second);
  log()->info("node {} {}", name, drained ? "drained: no new leases" : "takes leases again");
  return {};
}

Result<Node> Registry::rotate_secret(const std::string &name, std::optional<NodeSecret> secret) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return error<Node>(Outcome::NotFound, "no node " + name);
  Node n = it->second.node;
  n.secret = secret ? *secret : generate_secret();
  if (sodium_memcmp(n.secret.data(), it->second.node.secret.data(), n.secret.size()) == 0)
    return error<Node>(Outcome::Invalid, "node " + name + " has this secret already");
  if (auto s = persist_node(n); !s.ok())
    return error<Node>(s);
  it->second.node = n;
  log()->info("node {}: secret rotated; its executor manager needs the new one", name);
  return success(n);
}

Status Registry::remove_node(const std::string &name, bool revoke_leases) {
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return fail(Outcome::NotFound, "no node " + name);
  const std::vector<uint64_t> holding(it->second.leases.begin(), it->second.leases.end());
  if (!holding.empty() && !revoke_leases)
    return fail(Outcome::Conflict, "node " + name + " has " + std::to_string(holding.size()) +
                                       " active lease(s); drain it and wait, or remove with "
                                       "force=true to revoke them");
  for (uint64_t id : holding)
    if (auto s = end_lease(id, LeaseState::Revoked); !s.ok())
      return s;
  try {
    store_.remove_node(name);
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
  unlink(it->second);
  capacity_.remove(name);
  not_listening(it->second);
  if (!it->second.changed)
    changed_nodes_.push_back(name);
  nodes_.erase(it);
  log()->info("node {} removed", name);
  return {};
}

// ---- leases -----------------------------------------------------------------------

void Registry::occupy(Lease lease) {
  for (const LeasePart &p : lease.parts) {
    NodeEntry &e = nodes_.at(p.node);
    unlink(e);
    for (uint32_t c : p.cores) {
      if (c >= e.owner.size())
        e.owner.resize(c + 1, 0);
      if (e.owner[c] == 0) {
        ++e.held;
        e.held_below += c < e.node.cores;
      }
      e.owner[c] = lease.id;
    }
    e.used_memory_mib += p.memory_mib;
    e.leases.insert(lease.id);
    link(e);
  }
  by_expiry_.emplace(lease.expiry_ms, lease.id);
  changed_leases_.emplace_back(lease.id, lease.granted_ms);
  tally(lease, 1);
  const uint64_t id = lease.id;
  active_.emplace(id, std::move(lease));
}

void Registry::vacate(std::unordered_map<uint64_t, Lease>::iterator it) {
  const Lease &lease = it->second;
  for (const LeasePart &p : lease.parts) {
    auto n = nodes_.find(p.node);
    if (n == nodes_.end())
      continue;
    NodeEntry &e = n->second;
    unlink(e);
    for (uint32_t c : p.cores)
      if (c < e.owner.size() && e.owner[c] == lease.id) {
        e.owner[c] = 0;
        --e.held;
        e.held_below -= c < e.node.cores;
      }
    e.used_memory_mib -= std::min(e.used_memory_mib, p.memory_mib);
    // Cores above a shrunk node's count are dropped once free.
    while (e.owner.size() > e.node.cores && e.owner.back() == 0)
      e.owner.pop_back();
    e.leases.erase(lease.id);
    link(e);
  }
  by_expiry_.erase({lease.expiry_ms, lease.id});
  changed_leases_.emplace_back(lease.id, lease.granted_ms);
  tally(lease, -1);
  const uint64_t id = lease.id;
  if (recent_order_.size() >= kRecentlyEnded) {
    recently_ended_.erase(recent_order_.front());
    recent_order_.pop_front();
  }
  if (recently_ended_.emplace(id, std::move(it->second)).second)
    recent_order_.push_back(id);
  active_.erase(it);
}

void Registry::tally(const Lease &lease, int sign) {
  // A lease counts against its owner's uid when known, else its client
  // name: the same rule grant() applies to a request.
  const std::optional<uint32_t> owner = known_owner(lease.owner_uid);
  auto apply = [&](auto &map, const auto &key) {
    QuotaUsage &u = map[key];
    if (sign > 0) {
      u.cores += lease.total_cores();
      u.memory_mib += lease.total_memory_mib();
      ++u.leases;
      return;
    }
    u.cores -= std::min<uint64_t>(u.cores, lease.total_cores());
    u.memory_mib -= std::min(u.memory_mib, lease.total_memory_mib());
    u.leases -= std::min<uint64_t>(u.leases, 1);
    if (u.leases == 0)
      map.erase(key);
  };
  if (owner)
    apply(usage_by_uid_, *owner);
  else
    apply(usage_by_client_, lease.client);
}

Grant Registry::make_grant(const Lease &lease) const {
  Grant g;
  g.lease = lease;
  for (size_t i = 0; i < lease.parts.size(); ++i) {
    const Node &n = nodes_.at(lease.parts[i].node).node;
    g.addresses.push_back(n.address);
    g.tokens.push_back(compute_token(lease.claim(i), n.secret));
  }
  return g;
}

Result<Grant> Registry::grant(const LeaseRequest &request) {
  LeaseRequest r = request;
  // A lease for "0 MiB" would leave its executors without a limit on the
  // node; it gets the configured default instead.
  if (r.memory_mib == 0)
    r.memory_mib = options_.default_memory_mib;
  auto refuse = [&](Outcome o, std::string why) {
    ++counters_.refused;
    log()->debug("lease for {} ({} cores, {} MiB) refused: {}", r.client, r.cores, r.memory_mib,
                 why);
    return error<Grant>(o, std::move(why));
  };
  if (r.client.empty() || r.client.size() > 255)
    return refuse(Outcome::Invalid, "client identity must be 1..255 characters");
  if (r.cores == 0)
    return refuse(Outcome::Invalid, "a lease needs at least one core");
  if (r.max_nodes == 0 || r.max_nodes > options_.max_nodes_per_lease)
    return refuse(Outcome::Invalid,
                  "max_nodes must be 1.." + std::to_string(options_.max_nodes_per_lease));
  if (r.duration_ms > options_.max_lease_ms)
    return refuse(Outcome::Invalid, "duration " + std::to_string(r.duration_ms) +
                                        " ms exceeds the maximum of " +
                                        std::to_string(options_.max_lease_ms) + " ms");
  const QuotaUser user{known_owner(r.owner_uid), r.client};
  auto refuse_quota = [&](std::string why) {
    ++counters_.refused_quota;
    log()->info("lease for {} ({} cores, {} MiB) refused: {}", user.describe(), r.cores,
                r.memory_mib, why);
    return refuse(Outcome::QuotaExceeded, std::move(why));
  };
  if (std::string why = quotas_.count_request(user, clock_()); !why.empty())
    return refuse_quota(std::move(why));
  if (std::string why = quotas_.check_holding(user, quota_usage(user), r.cores, r.memory_mib);
      !why.empty())
    return refuse_quota(std::move(why));
  auto shares = capacity_.place(r.cores, r.memory_mib, r.max_nodes, options_.policy);
  work_.placement += capacity_.last_examined();
  if (!shares)
    return refuse(
        Outcome::Unavailable,
        "no " +
            std::string(r.max_nodes > 1 ? "set of up to " + std::to_string(r.max_nodes) + " nodes"
                                        : "node") +
            " has " + std::to_string(r.cores) + " free cores and " + std::to_string(r.memory_mib) +
            " MiB free (" + std::to_string(capacity_.size()) + " node(s) up and not drained)");
  const uint64_t now = clock_();
  Lease l;
  // Above every id the database held at start and every id given since:
  // new, with no look-up. Past 2^53-1 ids start again from 1 and must be
  // checked (ended leases stay in the store for accounting).
  l.id = generate_lease_id(id_floor_);
  if (l.id <= id_floor_) {
    try {
      while (active_.count(l.id) || store_.lease_exists(l.id))
        l.id = generate_lease_id();
    } catch (const StoreError &e) {
      return refuse(Outcome::StoreFailed, e.what());
    }
  }
  l.client = r.client;
  l.owner_uid = r.owner_uid;
  l.job_id = r.job_id;
  const LeaseSecret secret = generate_lease_secret();
  l.secret_hash = hash_lease_secret(secret);
  l.granted_ms = now;
  l.expiry_ms = now + (r.duration_ms ? r.duration_ms : options_.default_lease_ms);
  l.tokens_until_ms = l.expiry_ms;
  for (const PlacementShare &s : *shares) {
    LeasePart p;
    p.node = s.node;
    p.memory_mib = s.memory_mib;
    const NodeEntry &e = nodes_.at(s.node);
    for (uint32_t c = 0; c < e.node.cores && p.cores.size() < s.cores; ++c)
      if (c >= e.owner.size() || e.owner[c] == 0)
        p.cores.push_back(c);
    if (p.cores.size() != s.cores) // placement and owner table disagree: a bug
      return refuse(Outcome::StoreFailed,
                    "internal error: node " + s.node + " has fewer free cores than placement saw");
    l.parts.push_back(std::move(p));
  }
  try {
    store_.put_lease(l, true);
  } catch (const StoreError &e) {
    return refuse(Outcome::StoreFailed, e.what());
  }
  occupy(l);
  ++counters_.granted;
  // Per lease: debug (GET /metrics counts them; info would be a line per
  // lease at full rate).
  log()->debug("lease {} granted to {} ({}): {} cores, {} MiB on {} node(s), until {}", l.id,
               l.client, describe_owner(l.owner_uid, l.job_id), l.total_cores(),
               l.total_memory_mib(), l.parts.size(), l.expiry_ms);
  Grant g = make_grant(l);
  g.secret = secret;
  return success(std::move(g));
}

void Registry::withdraw_grant(uint64_t lease_id) {
  auto it = active_.find(lease_id);
  if (it == active_.end())
    return;
  // Per lease: debug (the store logs the refused grants once per pass;
  // on a full disk this runs at the rate of grants).
  log()->debug("lease {} of {} withdrawn: its grant could not be stored, and its client was told "
               "so",
               lease_id, it->second.client);
  vacate(it);
  // It never was a lease: nothing may report on it.
  recently_ended_.erase(lease_id);
}

Status Registry::check_owner(const Lease &l, const std::string &client,
                             const LeaseSecret &secret) const {
  const std::string lease = "lease " + std::to_string(l.id);
  if (sodium_is_zero(l.secret_hash.data(), l.secret_hash.size()))
    return fail(Outcome::Forbidden, lease +
                                        " was granted before lease secrets existed: it cannot be "
                                        "renewed or released, only revoked by an operator");
  // The client name is public (GET /leases shows it): the secret, compared
  // in constant time, is what proves the caller holds the grant.
  const bool secret_ok = lease_secret_matches(secret, l.secret_hash);
  const bool client_ok = l.client == client;
  if (!secret_ok)
    return fail(Outcome::Forbidden, lease + ": wrong lease secret (only the client it was granted "
                                            "to can renew or release it)");
  if (!client_ok)
    return fail(Outcome::Forbidden, lease + " belongs to another client");
  return {};
}

Result<Grant> Registry::renew(uint64_t lease_id, const std::string &client,
                              const LeaseSecret &secret, uint64_t duration_ms) {
  auto it = active_.find(lease_id);
  if (it == active_.end())
    return error<Grant>(not_active(lease_id));
  if (Status s = check_owner(it->second, client, secret); !s.ok())
    return error<Grant>(std::move(s));
  if (duration_ms > options_.max_lease_ms)
    return error<Grant>(Outcome::Invalid, "duration " + std::to_string(duration_ms) +
                                              " ms exceeds the maximum of " +
                                              std::to_string(options_.max_lease_ms) + " ms");
  Lease l = it->second;
  l.expiry_ms = clock_() + (duration_ms ? duration_ms : options_.default_lease_ms);
  // The tokens of the grant and of earlier renewals stay valid until their
  // own expiries when this one is shorter. Not known stays not known.
  if (l.tokens_until_ms != 0)
    l.tokens_until_ms = std::max(l.tokens_until_ms, l.expiry_ms);
  try {
    store_.update_lease(l);
  } catch (const StoreError &e) {
    return error<Grant>(Outcome::StoreFailed, e.what());
  }
  by_expiry_.erase({it->second.expiry_ms, l.id});
  by_expiry_.emplace(l.expiry_ms, l.id);
  changed_leases_.emplace_back(l.id, l.granted_ms);
  it->second = l;
  ++counters_.renewed;
  for (const LeasePart &p : l.parts)
    events_.push_back(LeaseEnded{l.id, p.node, l.expiry_ms, LeaseState::Active});
  return success(make_grant(l));
}

Status Registry::not_active(uint64_t lease_id) const {
  const std::string lease = "lease " + std::to_string(lease_id);
  if (auto it = down_cause_.find(lease_id); it != down_cause_.end())
    return fail(Outcome::NotFound,
                lease + " ended: node " + it->second + " went down (ask for a new lease)");
  std::optional<Lease> l;
  try {
    l = store_.load_lease(lease_id);
  } catch (const StoreError &) {
    // Only the message is at stake: fall through to the plain one.
  }
  if (!l || l->state == LeaseState::Active)
    return fail(Outcome::NotFound, lease + " is not active (ended or unknown)");
  if (l->state == LeaseState::NodeDown) {
    std::string nodes;
    for (const LeasePart &p : l->parts)
      nodes += (nodes.empty() ? "" : ", ") + p.node;
    return fail(Outcome::NotFound,
                lease + " ended: a node it held cores on (" + nodes + ") went down");
  }
  return fail(Outcome::NotFound, lease + " is not active (" + to_string(l->state) + ")");
}

Status Registry::end_lease(uint64_t lease_id, LeaseState why) {
  auto it = active_.find(lease_id);
  if (it == active_.end())
    return not_active(lease_id);
  Lease l = it->second;
  l.state = why;
  l.ended_ms = clock_();
  try {
    store_.update_lease(l);
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
  vacate(it);
  for (const LeasePart &p : l.parts)
    events_.push_back(LeaseEnded{l.id, p.node, l.tokens_until_ms, why});
  switch (why) {
  case LeaseState::Released:
    ++counters_.released;
    break;
  case LeaseState::Expired:
    ++counters_.expired;
    break;
  case LeaseState::Revoked:
    ++counters_.revoked;
    break;
  case LeaseState::NodeDown:
    ++counters_.node_down;
    break;
  case LeaseState::Active:
    break;
  }
  log()->debug("lease {} of {} {}", l.id, l.client, to_string(why));
  return {};
}

Status Registry::release(uint64_t lease_id, const std::string &client, const LeaseSecret &secret) {
  auto it = active_.find(lease_id);
  if (it != active_.end())
    if (Status s = check_owner(it->second, client, secret); !s.ok())
      return s;
  return end_lease(lease_id, LeaseState::Released);
}

Status Registry::revoke(uint64_t lease_id) { return end_lease(lease_id, LeaseState::Revoked); }

size_t Registry::tick() {
  const uint64_t now = clock_();
  // Collected first: a lease whose end cannot be stored stays active (and
  // first in line) for the next tick.
  std::vector<uint64_t> due;
  for (const auto &[expiry, id] : by_expiry_) {
    ++work_.leases;
    if (expiry > now)
      break;
    due.push_back(id);
  }
  size_t expired = 0;
  for (uint64_t id : due)
    if (end_lease(id, LeaseState::Expired).ok())
      ++expired;
  std::vector<std::string> silent;
  for (const NodeEntry *e : by_heartbeat_) {
    ++work_.nodes;
    if (now - std::min(now, e->node.last_heartbeat_ms) <= options_.heartbeat_timeout_ms)
      break;
    silent.push_back(e->node.name);
  }
  for (const std::string &name : silent)
    mark_down(name);
  quotas_.forget_idle(now);
  constexpr uint64_t kDay = 86'400'000, kHour = 3'600'000;
  if (options_.retention_days > 0 && now - std::min(now, last_prune_ms_) >= kHour) {
    last_prune_ms_ = now;
    const uint64_t keep = options_.retention_days * kDay;
    if (now > keep) {
      try {
        auto [leases, records] = store_.prune_history(now - keep);
        if (leases || records)
          log()->info("retention ({} days): {} ended lease(s) and {} accounting record(s) "
                      "deleted",
                      options_.retention_days, leases, records);
      } catch (const StoreError &e) {
        log()->error("retention: pruning the history failed: {}", e.what());
      }
    }
  }
  return expired;
}

// ---- quotas -----------------------------------------------------------------------

QuotaUsage Registry::quota_usage(const QuotaUser &user) const {
  if (user.uid) {
    auto it = usage_by_uid_.find(*user.uid);
    return it == usage_by_uid_.end() ? QuotaUsage{} : it->second;
  }
  auto it = usage_by_client_.find(user.client);
  return it == usage_by_client_.end() ? QuotaUsage{} : it->second;
}

Status Registry::set_quota(const std::string &key, const QuotaLimits &limits) {
  try {
    store_.put_quota(key, limits);
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
  if (key.empty())
    quotas_.set_rest_default(limits);
  else
    quotas_.set_rest_user(key, limits);
  log()->info("quota of {} set",
              key.empty() ? std::string("the default") : QuotaUser::from_key(key).describe());
  return {};
}

Status Registry::remove_quota(const std::string &key) {
  const bool known =
      key.empty() ? quotas_.rest_default().has_value() : quotas_.rest_users().count(key) > 0;
  const std::string who =
      key.empty() ? std::string("the default") : QuotaUser::from_key(key).describe();
  if (!known)
    return fail(Outcome::NotFound, "no quota set through the API for " + who);
  try {
    store_.remove_quota(key);
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
  if (key.empty())
    quotas_.remove_rest_default();
  else
    quotas_.remove_rest_user(key);
  log()->info("quota of {} removed: the configuration's applies", who);
  return {};
}

// ---- accounting -------------------------------------------------------------------

Status Registry::record_accounting(AccountingRecord r) {
  std::optional<Lease> l;
  if (auto it = active_.find(r.lease_id); it != active_.end())
    l = it->second;
  else if (auto e = recently_ended_.find(r.lease_id); e != recently_ended_.end())
    l = e->second;
  else {
    try {
      l = store_.load_lease(r.lease_id);
    } catch (const StoreError &e) {
      return fail(Outcome::StoreFailed, e.what());
    }
  }
  if (!l)
    return fail(Outcome::NotFound, "accounting for unknown lease " + std::to_string(r.lease_id));
  if (std::none_of(l->parts.begin(), l->parts.end(),
                   [&](const LeasePart &p) { return p.node == r.node; }))
    return fail(Outcome::Forbidden,
                "lease " + std::to_string(r.lease_id) + " holds nothing on node " + r.node);
  r.client = l->client;
  r.owner_uid = l->owner_uid;
  r.job_id = l->job_id;
  if (r.reported_ms == 0)
    r.reported_ms = clock_();
  try {
    // A final report is the last word for its lease on that node: a node
    // told of the lease's end again (after a restart) reports it again,
    // possibly with nothing, and must not overwrite it (put_accounting
    // keeps a stored final record).
    store_.put_accounting(r);
  } catch (const StoreError &e) {
    return fail(Outcome::StoreFailed, e.what());
  }
  return {};
}

// ---- views ------------------------------------------------------------------------

NodeView Registry::view_of(const NodeEntry &e) {
  NodeView v;
  v.node = e.node;
  v.used_cores = e.held;
  v.used_memory_mib = e.used_memory_mib;
  v.active_leases = e.leases.size();
  return v;
}

std::vector<NodeView> Registry::nodes() const {
  std::vector<NodeView> out;
  out.reserve(nodes_.size());
  for (const auto &[name, e] : nodes_)
    out.push_back(view_of(e));
  return out;
}

std::optional<NodeView> Registry::node(const std::string &name) const {
  // A lookup, not a copy of every node: the fabric side asks this for each
  // registration and each lease-ended notice.
  auto it = nodes_.find(name);
  if (it == nodes_.end())
    return std::nullopt;
  return view_of(it->second);
}

std::vector<Lease> Registry::active_leases() const {
  std::vector<Lease> out;
  for (const auto &[id, l] : active_)
    out.push_back(l);
  std::sort(out.begin(), out.end(),
            [](const Lease &a, const Lease &b) { return a.granted_ms < b.granted_ms; });
  return out;
}

std::optional<Lease> Registry::active_lease(uint64_t id) const {
  auto it = active_.find(id);
  if (it == active_.end())
    return std::nullopt;
  return it->second;
}

std::vector<std::pair<std::string, std::optional<NodeView>>> Registry::take_changed_nodes() {
  std::vector<std::pair<std::string, std::optional<NodeView>>> out;
  out.reserve(changed_nodes_.size());
  for (std::string &name : changed_nodes_) {
    auto it = nodes_.find(name);
    std::optional<NodeView> view;
    if (it != nodes_.end()) {
      // A name removed and added again is listed twice: one view is enough.
      if (!it->second.changed)
        continue;
      it->second.changed = false;
      view = view_of(it->second);
    }
    out.emplace_back(std::move(name), std::move(view));
  }
  changed_nodes_.clear();
  return out;
}

std::vector<Registry::LeaseChange> Registry::take_changed_leases() {
  std::vector<LeaseChange> out;
  out.reserve(changed_leases_.size());
  for (auto [id, granted_ms] : changed_leases_) {
    auto it = active_.find(id);
    out.push_back(LeaseChange{
        id, granted_ms, it == active_.end() ? std::nullopt : std::optional<Lease>(it->second)});
  }
  changed_leases_.clear();
  return out;
}

std::vector<LeaseEnded> Registry::take_events() {
  std::vector<LeaseEnded> out(events_.begin(), events_.end());
  events_.clear();
  return out;
}

} // namespace rfaas::rm
