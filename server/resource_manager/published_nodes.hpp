// GET /nodes without a task on the loop. The loop hands over, at each of its
// publications, the views of the nodes that changed since the previous one
// (Registry::take_changed_nodes: O(changed), never O(nodes), so a heartbeat
// or a lease costs the loop one node's copy, whatever the fleet's size); the
// HTTP threads fold them into a table of their own and render it as JSON
// once per change, not once per request. A GET then waits for no pass of the
// fabric. docs/resource_manager.md ("Snapshots") says how stale it may be.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// A node as the REST API shows it (GET /nodes, and the answers of the
/// node changes).
nlohmann::json node_json(const NodeView &view);

class PublishedNodes {
public:
  /// What GET /nodes answers.
  struct Page {
    /// The nodes by name as a JSON array (with a final newline); null before
    /// the loop's first publication.
    std::shared_ptr<const std::string> body;
    /// The registry's clock (ms since the Unix epoch) when the loop
    /// published the newest change in `body`, or later confirmed that
    /// nothing had changed: every change the loop made before it is in.
    uint64_t generated_ms = 0;
  };

  /// Loop thread only: hands over the nodes changed since the last call,
  /// stamped with registry.now(). O(changed nodes). When it throws (out of
  /// memory), the next call hands over every node again.
  void publish(Registry &registry);

  /// Any thread: the table as of the newest publication. Renders only when
  /// something changed since the last call (then O(nodes), on the caller's
  /// thread); otherwise returns the same body again.
  Page page();

private:
  using Change = std::optional<NodeView>; // none: removed
  /// Loop -> readers: changes not yet folded in, one per node (a node that
  /// changes again before a reader comes replaces its entry, so this holds
  /// at most one view per node however rarely /nodes is read). Guarded by
  /// pending_mutex_, which is held for O(changed) by the loop and O(1) by a
  /// reader.
  std::mutex pending_mutex_;
  std::unordered_map<std::string, Change> pending_;
  uint64_t pending_generated_ms_ = 0;
  bool pending_published_ = false;
  /// The readers' table is to be dropped before pending_ is folded in
  /// (pending_ then holds every node: after a failed publication).
  bool pending_reset_ = false;
  /// Loop thread only: a publication failed halfway; the next hands over
  /// every node.
  bool resync_ = false;
  /// Set by a reader that lost changes (it failed to fold them in): the
  /// next publication hands over every node.
  std::atomic<bool> resync_requested_{false};

  /// Readers' side, guarded by build_mutex_ (the loop never takes it).
  std::mutex build_mutex_;
  /// Name -> the node's JSON object, rendered when it changed.
  std::map<std::string, std::string> rows_;
  std::shared_ptr<const std::string> body_;
  uint64_t generated_ms_ = 0;
  /// The table lost changes: pages are empty until a reset arrives.
  bool awaiting_reset_ = false;
  /// rows_ as a JSON array.
  std::shared_ptr<const std::string> render() const;
};

} // namespace rfaas::rm
