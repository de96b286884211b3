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

void PublishedNodes::publish(Registry &registry) {
  // Stamped before the changes are taken: whatever changed before this
  // time is among them.
  const uint64_t now = registry.now();
  const bool reset = resync_ || resync_requested_.exchange(false);
  resync_ = true; // until this publication is through
  std::vector<std::pair<std::string, Change>> changes;
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
  {
    std::lock_guard<std::mutex> g(pending_mutex_);
    if (reset) {
      pending_.clear();
      pending_reset_ = true;
    }
    for (auto &[name, view] : changes)
      pending_.insert_or_assign(std::move(name), std::move(view));
    pending_generated_ms_ = now;
    pending_published_ = true;
  }
  resync_ = false;
}

std::shared_ptr<const std::string> PublishedNodes::render() const {
  size_t size = 3;
  for (const auto &[name, row] : rows_)
    size += row.size() + 1;
  auto body = std::make_shared<std::string>();
  body->reserve(size);
  *body += '[';
  for (const auto &[name, row] : rows_) {
    if (body->size() > 1)
      *body += ',';
    *body += row;
  }
  *body += "]\n";
  return body;
}

PublishedNodes::Page PublishedNodes::page() {
  std::lock_guard<std::mutex> build(build_mutex_);
  std::unordered_map<std::string, Change> changes;
  bool reset = false;
  {
    std::lock_guard<std::mutex> g(pending_mutex_);
    if (!pending_published_)
      return {};
    changes.swap(pending_);
    std::swap(reset, pending_reset_);
    generated_ms_ = pending_generated_ms_;
  }
  if (reset) {
    rows_.clear();
    awaiting_reset_ = false;
  }
  if (awaiting_reset_)
    return {};
  try {
    for (auto &[name, view] : changes) {
      if (view)
        rows_.insert_or_assign(name, node_json(*view).dump());
      else
        rows_.erase(name);
    }
    if (!body_ || !changes.empty() || reset)
      body_ = render();
  } catch (...) {
    // Changes taken but not folded in are lost here: ask the loop for
    // every node again, and answer nothing until they arrive.
    rows_.clear();
    body_.reset();
    awaiting_reset_ = true;
    resync_requested_ = true;
    throw;
  }
  return Page{body_, generated_ms_};
}

} // namespace rfaas::rm
