// GET /leases (the active ones, its default) without a task on the loop
// (published_rows.hpp). At each of its publications the loop hands over the
// leases granted, renewed or ended since the previous one
// (Registry::take_changed_leases: O(changed), never O(active leases)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

#include "resource_manager/published_rows.hpp"
#include "resource_manager/registry.hpp"

namespace rfaas::rm {

/// A lease as the REST API shows it (GET /leases).
nlohmann::json lease_json(const Lease &lease);
/// A lease owner's uid for JSON: null when the client was anonymous.
nlohmann::json owner_json(uint32_t uid);

class PublishedLeases {
public:
  using Page = PublishedRows<Lease>::Page;

  PublishedLeases();

  /// Loop thread only: hands over the active leases changed since the last
  /// call, dated registry.now(). O(changed leases). When it throws (out of
  /// memory), the next call hands over every active lease again.
  void publish(Registry &registry);

  /// Any thread: at most `limit` active leases by grant time, as of the
  /// newest publication, those after the cursor `after` (empty: from the
  /// first; a page's `next_after`, which orders by grant time and id and
  /// means nothing else) (PublishedRows::page).
  Page page(size_t limit = std::numeric_limits<size_t>::max(), const std::string &after = {}) {
    return rows_.page(limit, after);
  }

  /// Changes handed over and not yet read (for tests).
  size_t pending() { return rows_.pending(); }

private:
  PublishedRows<Lease> rows_;
  /// Loop thread only: a publication failed halfway; the next hands over
  /// every active lease.
  bool resync_ = false;
};

} // namespace rfaas::rm
