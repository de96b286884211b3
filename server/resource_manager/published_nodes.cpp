#include "resource_manager/published_nodes.hpp"

namespace rfaas::rm {

nlohmann::json node_json(const NodeView &v) {
  return nlohmann::json{{"name", v.node.name},
                        {"address", v.node.address},
                        {"state", to_string(v.node.state)},
                        {"drained", v.node.drained},
                        {"cores", v.node.cores},
                        {"cores_used", v.used_cores},
                        {"memory_mib", v.node.memory_mib},
                        {"memory_used_mib", v.used_memory_mib},
                        {"active_leases", v.active_leases},
                        {"registered_ms", v.node.registered_ms},
                        {"last_heartbeat_ms", v.node.last_heartbeat_ms}};
}

PublishedNodes::PublishedNodes() : rows_([](const NodeView &v) { return node_json(v).dump(); }) {}

void PublishedNodes::publish(Registry &registry) {
  // Dated before the changes are taken: whatever changed before this time
  // is among them.
  const uint64_t now = registry.now();
  const bool reset = resync_ || rows_.reset_requested();
  resync_ = true; // until this publication is through
  std::vector<PublishedRows<NodeView>::Change> changes;
  if (reset) {
    registry.take_changed_nodes();
    for (NodeView &v : registry.nodes())
      changes.emplace_back(v.node.name, std::move(v));
  } else {
    changes = registry.take_changed_nodes();
  }
  for (auto &[name, view] : changes)
    if (view)
      view->node.secret = NodeSecret{}; // never shown; no copy lingers on the HTTP side
  rows_.hand_over(std::move(changes), now, reset);
  resync_ = false;
}

} // namespace rfaas::rm
