// GET /nodes without a task on the loop (published_rows.hpp). At each of its
// publications the loop hands over the views of the nodes that changed since
// the previous one (Registry::take_changed_nodes: O(changed), never
// O(nodes)), so a heartbeat or a lease costs the loop one node's copy
// whatever the fleet's size, and a GET waits for no pass of the fabric.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "resource_manager/published_rows.hpp"
#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// A node as the REST API shows it (GET /nodes, and the answers of the
/// node changes).
nlohmann::json node_json(const NodeView &view);

class PublishedNodes {
public:
  using Page = PublishedRows<NodeView>::Page;

  PublishedNodes();

  /// Loop thread only: hands over the nodes changed since the last call,
  /// dated registry.now(). O(changed nodes). When it throws (out of
  /// memory), the next call hands over every node again.
  void publish(Registry &registry);

  /// Any thread: the nodes by name, as of the newest publication: at most
  /// `limit` of them, those whose names follow `after` (empty: from the
  /// first) (PublishedRows::page).
  Page page(size_t limit = std::numeric_limits<size_t>::max(), const std::string &after = {}) {
    return rows_.page(limit, after);
  }

  /// Any thread: one node by name (`body` null when there is none).
  Page node(const std::string &name) { return rows_.row(name); }

  /// Changes handed over and not yet read (for tests).
  size_t pending() { return rows_.pending(); }

private:
  PublishedRows<NodeView> rows_;
  /// Loop thread only: a publication failed halfway; the next hands over
  /// every node.
  bool resync_ = false;
};

} // namespace rfaas::rm
