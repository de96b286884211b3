#include "executor_manager/manager_state.hpp"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

namespace rfaas::manager {

using std::chrono::milliseconds;

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

void Manager::lease_ended(const proto::LeaseEnded &e) {
  const uint64_t now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  verifier_->mark_ended(e.lease_id, e.expiry_ms, now_ms);
  lease_use_[e.lease_id].ended = true;
  auto now = Clock::now();
  bool live = false;
  for (auto &kv : allocations_) {
    Allocation &a = *kv.second;
    if (a.lease_id != e.lease_id)
      continue;
    live = true;
    if (!a.client_gone) {
      spdlog::info("lease {} {}: ending allocation {:x}", e.lease_id, proto::to_string(e.why),
                   a.id);
      a.client_gone = true;
      a.term_at = now;
      a.kill_at = now + milliseconds(cfg_.shutdown_grace_ms);
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
  if (!live)
    report_lease(e.lease_id, true);
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
} // namespace rfaas::manager
