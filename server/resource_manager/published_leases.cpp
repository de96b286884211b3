#include "resource_manager/published_leases.hpp"

#include <cstdio>

namespace rfaas::rm {

nlohmann::json owner_json(uint32_t uid) {
  return uid == kAnonymousOwner ? nlohmann::json(nullptr) : nlohmann::json(uid);
}

nlohmann::json lease_json(const Lease &l) {
  nlohmann::json parts = nlohmann::json::array();
  for (const LeasePart &p : l.parts)
    parts.push_back({{"node", p.node}, {"cores", p.cores}, {"memory_mib", p.memory_mib}});
  return nlohmann::json{{"id", l.id},
                        {"client", l.client},
                        {"owner_uid", owner_json(l.owner_uid)},
                        {"job_id", l.job_id},
                        {"state", to_string(l.state)},
                        {"granted_ms", l.granted_ms},
                        {"expiry_ms", l.expiry_ms},
                        {"ended_ms", l.ended_ms},
                        {"cores", l.total_cores()},
                        {"memory_mib", l.total_memory_mib()},
                        {"parts", parts}};
}

namespace {
/// Orders the table by grant time, then id (what GET /leases always showed).
std::string key(uint64_t granted_ms, uint64_t id) {
  char k[42];
  std::snprintf(k, sizeof k, "%020llu-%020llu", static_cast<unsigned long long>(granted_ms),
                static_cast<unsigned long long>(id));
  return k;
}
} // namespace

PublishedLeases::PublishedLeases() : rows_([](const Lease &l) { return lease_json(l).dump(); }) {}

void PublishedLeases::publish(Registry &registry) {
  // Dated before the changes are taken: whatever changed before this time
  // is among them.
  const uint64_t now = registry.now();
  const bool reset = resync_ || rows_.reset_requested();
  resync_ = true; // until this publication is through
  std::vector<PublishedRows<Lease>::Change> changes;
  if (reset) {
    registry.take_changed_leases();
    for (Lease &l : registry.active_leases())
      changes.emplace_back(key(l.granted_ms, l.id), std::move(l));
  } else {
    for (Registry::LeaseChange &c : registry.take_changed_leases())
      changes.emplace_back(key(c.granted_ms, c.id), std::move(c.lease));
  }
  for (auto &[k, lease] : changes)
    if (lease)
      lease->secret_hash = LeaseSecretHash{}; // never shown
  rows_.hand_over(std::move(changes), now, reset);
  resync_ = false;
}

} // namespace rfaas::rm
