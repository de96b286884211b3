#include "executor_manager/manager_state.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <unordered_map>
#include <utility>
#include <vector>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

using std::chrono::milliseconds;

namespace {

uint64_t wall_now_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

} // namespace

void Manager::check_lease(Client &c, const uint8_t *msg, size_t len) {
  proto::LeaseProof proof;
  proto::WireResult r = proto::decode(msg, len, proof);
  std::string why;
  if (!r) {
    why = "bad LeaseProof: " + proto::describe(r);
  } else if (proof.lease_id != c.lease_id) {
    why = "lease_invalid: the LeaseProof names another lease than the ClientHello";
  } else {
    rm::LeaseClaim claim{proof.lease_id,  verifier_->node(),
                         proof.cores,     proof.memory_mib,
                         proof.expiry_ms, std::string(proto::get_text(proof.client)),
                         proof.owner_uid};
    rm::LeaseToken token;
    std::memcpy(token.data(), c.token.bytes, token.size());
    const uint64_t now_ms =
        static_cast<uint64_t>(std::chrono::duration_cast<milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
    rm::TokenVerdict v = verifier_->verify(claim, token, now_ms);
    if (v == rm::TokenVerdict::Ok) {
      // A renewed lease's newer token carries its later expiry.
      uint64_t &expiry = lease_expiry_[proof.lease_id];
      expiry = std::max(expiry, proof.expiry_ms);
      earliest_expiry_ms_ = std::min(earliest_expiry_ms_, expiry);
      c.lease_ok = true;
      c.lease_cores = proof.cores;
      c.lease_memory_mib = proof.memory_mib;
      c.lease_owner_uid = proof.owner_uid;
      spdlog::info("client {}: lease {} of {} ({}) verified ({} core(s), {} MiB)", c.peer,
                   proof.lease_id, claim.client, rm::describe_owner(proof.owner_uid, ""),
                   proof.cores, proof.memory_mib);
      return;
    }
    why = rm::reason_text(v);
  }
  spdlog::warn("client {}: refusing lease {}: {}", c.peer, c.lease_id, why);
  reply(c, r ? proto::ErrorCode::LeaseInvalid : proto::reply_code(r.error), 0, 0, why);
  client_left(c, false);
}

void Manager::lease_renewed(const proto::LeaseEnded &e) {
  // Only leases with a client here are watched; a later client presents
  // the renewed token itself. The resource manager's word is the latest: a
  // renewal may also shorten a lease.
  auto it = lease_expiry_.find(e.lease_id);
  if (it == lease_expiry_.end())
    return;
  // Info: an operator reading why an allocation ended (or did not) at some
  // time needs the expiry this node went by.
  spdlog::info("lease {} renewed until {} (the resource manager's notice)", e.lease_id,
               e.expiry_ms);
  it->second = e.expiry_ms;
  // A renewal may bring the expiry forward: the skip in expire_leases()
  // must not pass over it.
  earliest_expiry_ms_ = std::min(earliest_expiry_ms_, e.expiry_ms);
}

void Manager::expire_leases() {
  const uint64_t now_ms = wall_now_ms();
  // The loop comes here every millisecond while notices flow, and a busy
  // node watches thousands of leases: look through them only once one may
  // have expired.
  if (now_ms < earliest_expiry_ms_)
    return;
  std::vector<std::pair<uint64_t, uint64_t>> due; // lease id, expiry
  earliest_expiry_ms_ = UINT64_MAX;
  for (const auto &[id, expiry] : lease_expiry_)
    if (expiry > now_ms) {
      earliest_expiry_ms_ = std::min(earliest_expiry_ms_, expiry);
    } else {
      due.emplace_back(id, expiry);
    }
  for (const auto &[id, expiry] : due) {
    spdlog::warn("lease {} expired at {} by this node's clock ({} ms ago) without a renewal "
                 "reaching this node{}: ending its allocations",
                 id, expiry, now_ms - expiry,
                 rm_->registered() ? "" : " (the resource manager is not reachable)");
    // The latest expiry of its tokens is not known here (a renewal may not
    // have reached this node): 0 keeps its end for the verifier's retention.
    proto::LeaseEnded e;
    e.lease_id = id;
    e.expiry_ms = 0;
    e.why = proto::LeaseEndReason::Expired;
    lease_ended(e);
  }
}

void Manager::lease_ended(const proto::LeaseEnded &e) {
  const uint64_t now_ms = wall_now_ms();
  // A notice told again (after a registration) is written once, and again
  // only when it changes the entry's date.
  if (const uint64_t until = verifier_->mark_ended(e.lease_id, e.expiry_ms, now_ms))
    remember_ended(e.lease_id, until);
  lease_expiry_.erase(e.lease_id);
  // Usage is reported only for a lease that had an allocation here: most
  // leases a busy client takes and releases never reach this node, and a
  // report of nothing would cost the resource manager a message and a row
  // for each (and this table an entry). One with allocations is marked
  // ended before they are told below: an allocation that finishes meanwhile
  // reports its lease's final use.
  auto use = lease_use_.find(e.lease_id);
  const bool used = use != lease_use_.end();
  const bool allocated = std::any_of(allocations_.begin(), allocations_.end(), [&](const auto &kv) {
    return kv.second->lease_id == e.lease_id;
  });
  if (used)
    use->second.ended = true;
  else if (allocated)
    lease_use_[e.lease_id].ended = true;
  auto now = Clock::now();
  for (auto &kv : allocations_) {
    Allocation &a = *kv.second;
    if (a.lease_id != e.lease_id)
      continue;
    if (!a.client_gone) {
      spdlog::info("lease {} {}: ending allocation {:x}", e.lease_id, proto::to_string(e.why),
                   a.id);
      a.client_gone = true;
      // The executor is told why (its workers pass LeaseInvalid on to the
      // client, who would otherwise see only its connections close) and
      // ends within its 100 ms poll; SIGTERM follows if it does not. An
      // executor whose accounting link is not up yet (it connects up to
      // 100 ms after its library loaded, off the cold-start path) is told
      // as it connects: a lease revoked right after the first invocation
      // must still reach the client as LeaseInvalid, not as a closed link.
      bool told = false;
      if (!a.exited) {
        a.lease_end_untold = true;
        told = tell_lease_ended(a);
      }
      a.lease_told = told;
      a.term_at = told ? now + milliseconds(cfg_.shutdown_grace_ms) : now;
      a.kill_at = a.term_at + milliseconds(cfg_.shutdown_grace_ms);
    }
  }
  // A client of this lease that has not asked for an allocation yet learns
  // why in the answer to its request. Nothing is sent unasked: the client
  // posts its receives only once its connect() returned, so a message sent
  // right after our accept may find none, and a close right after it would
  // leave the client with nothing but the close. A client that never asks is
  // closed at the admission request deadline.
  for (auto &c : clients_)
    if (!c->closed && c->lease_id == e.lease_id) {
      if (c->requested) {
        client_left(*c, false);
        continue;
      }
      c->lease_ok = false;
      c->lease_ended = "lease_invalid: lease " + std::to_string(e.lease_id) + " ended (" +
                       proto::to_string(e.why) + ")";
    }
  if (!allocated && used)
    report_lease(e.lease_id, true);
}

bool Manager::tell_lease_ended(Allocation &a) {
  if (a.exec_done) { // its link is gone: it cannot be told
    a.lease_end_untold = false;
    return false;
  }
  // Not connected yet, or the channel's one send area still busy (the
  // record's advertisement, posted as the link came up): a later pass tells
  // it (poll_executors).
  if (!a.exec_connected || !a.exec_channel.send_idle())
    return true;
  proto::Shutdown bye;
  bye.allocation_id = a.id;
  bye.reason = proto::ErrorCode::LeaseInvalid;
  proto::ChannelStatus st = a.exec_channel.post(bye);
  if (st == proto::ChannelStatus::Timeout)
    return true; // no room at the provider now: again next pass
  a.lease_end_untold = false;
  return st == proto::ChannelStatus::Ok;
}

void Manager::report_lease(uint64_t lease_id, bool final) {
  auto it = lease_use_.find(lease_id);
  if (it == lease_use_.end())
    return;
  proto::AccountingReport r;
  r.lease_id = lease_id;
  r.allocation_us = it->second.totals.allocation_ns / 1000;
  r.hot_polling_us = it->second.totals.hot_polling_ns / 1000;
  r.execution_us = it->second.totals.execution_ns / 1000;
  r.memory_mib = it->second.memory_mib;
  r.final = final ? 1 : 0;
  rm_->report(r);
  if (final)
    lease_use_.erase(it);
}

// The resource manager keeps the latest report per lease and node: each one
// is cumulative, the ended allocations' totals plus the live ones' so far.
void Manager::report_live_leases() {
  std::map<uint64_t, LeaseUse> live;
  for (const auto &kv : allocations_) {
    const Allocation &a = *kv.second;
    if (!a.lease_id || a.exited)
      continue;
    proto::AccountingCounters t = a.accounting.totals(a.has_record ? a.record.data() : nullptr);
    LeaseUse &u = live[a.lease_id];
    u.totals.allocation_ns += t.allocation_ns;
    u.totals.hot_polling_ns += t.hot_polling_ns;
    u.totals.execution_ns += t.execution_ns;
    u.memory_mib = std::max<uint64_t>(u.memory_mib, a.memory_mib);
  }
  for (const auto &kv : live) {
    auto done = lease_use_.find(kv.first);
    proto::AccountingReport r;
    r.lease_id = kv.first;
    uint64_t alloc = kv.second.totals.allocation_ns, hot = kv.second.totals.hot_polling_ns,
             exec = kv.second.totals.execution_ns, mem = kv.second.memory_mib;
    if (done != lease_use_.end()) {
      alloc += done->second.totals.allocation_ns;
      hot += done->second.totals.hot_polling_ns;
      exec += done->second.totals.execution_ns;
      mem = std::max(mem, done->second.memory_mib);
    }
    r.allocation_us = alloc / 1000;
    r.hot_polling_us = hot / 1000;
    r.execution_us = exec / 1000;
    r.memory_mib = mem;
    r.final = 0;
    rm_->report(r);
  }
}

// One line per ended lease: "<lease id> <kept until ms>" (the latest expiry
// of its tokens, or the verifier's retention where that is not known); a
// lease appears again when its date changes, and its last line holds. Leases
// whose date passed are dropped when the file is read: their tokens are
// refused as expired anyway.
void Manager::load_ended_leases() {
  const std::string &path = cfg_.resource_manager_ended_file;
  if (path.empty())
    return;
  const uint64_t now_ms = wall_now_ms();
  // A lease's last line holds its date (the resource manager's word may
  // have replaced a guess with an earlier date).
  std::unordered_map<uint64_t, uint64_t> live;
  {
    std::ifstream in(path);
    uint64_t id = 0, until = 0;
    while (in >> id >> until)
      if (id != 0)
        live[id] = until;
  }
  for (auto it = live.begin(); it != live.end();)
    it = it->second > now_ms ? std::next(it) : live.erase(it);
  // Taken as this node's dates: the resource manager's notices, told again
  // as the node registers, replace them.
  for (const auto &[id, until] : live)
    verifier_->keep_ended_until(id, until, now_ms);
  // Rewritten with the live entries only, so the file stays as small as the
  // set of ended leases whose tokens could still verify.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto &[id, until] : live)
      out << id << ' ' << until << '\n';
    if (!out.flush()) {
      spdlog::warn("cannot write the ended-lease file {}: {}; a restart of this manager will "
                   "accept the tokens of leases that ended before it until the resource "
                   "manager tells it again (set resource_manager.ended_leases_file to a "
                   "writable path)",
                   tmp, std::strerror(errno));
      cfg_.resource_manager_ended_file.clear();
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    spdlog::warn("cannot replace the ended-lease file {}: {}", path, std::strerror(errno));
    cfg_.resource_manager_ended_file.clear();
    return;
  }
  ended_out_.open(path, std::ios::app);
  spdlog::info("{} ended lease(s) whose tokens have not expired read from {}", live.size(), path);
}

void Manager::remember_ended(uint64_t lease_id, uint64_t kept_until_ms) {
  // Also a date that passed: it replaces the lease's earlier line (a guess)
  // when the file is read.
  if (!ended_out_.is_open())
    return;
  ended_out_ << lease_id << ' ' << kept_until_ms << '\n';
  ended_unflushed_ = true;
}

void Manager::flush_ended() {
  if (!ended_unflushed_)
    return;
  ended_unflushed_ = false;
  // The point is to survive a crash of this process: written before the
  // loop takes its next client, once for all the notices one look brought
  // (a write per notice cost a system call per lease a client released).
  if (ended_out_.is_open() && !ended_out_.flush()) {
    spdlog::warn("cannot append to the ended-lease file {}: {}; leases that end from now on are "
                 "not kept across a restart",
                 cfg_.resource_manager_ended_file, std::strerror(errno));
    ended_out_.close();
  }
}

} // namespace rfaas::manager
