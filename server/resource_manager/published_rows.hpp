// A table the loop publishes for the REST API's reads (GET /nodes, GET
// /leases) so that they never wait for the loop: the loop hands over only
// the rows that changed since its previous publication, and the HTTP
// threads fold them into a table of their own and render it as a JSON array
// once per change, not once per request. published_nodes.hpp and
// published_leases.hpp say which rows; docs/resource_manager.md
// ("Snapshots") how stale they may be.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rfaas::rm {

template <class View> class PublishedRows {
public:
  /// What a GET answers.
  struct Page {
    /// The rows in key order as a JSON array (with a final newline); null
    /// before the first hand-over.
    std::shared_ptr<const std::string> body;
    /// When the newest hand-over folded in was made (the registry's clock,
    /// ms since the Unix epoch): every change made before it is in `body`.
    uint64_t generated_ms = 0;
  };
  /// A row by its key (which orders the table); none: the row is gone.
  using Change = std::pair<std::string, std::optional<View>>;
  /// Renders one row as a JSON value.
  using Render = std::string (*)(const View &);

  explicit PublishedRows(Render render) : render_(render) {}

  /// Loop thread: hands `changes` over, made before `now`. `reset`: they
  /// are every row, and the table is replaced. O(changes) under a lock a
  /// reader holds for O(1).
  void hand_over(std::vector<Change> changes, uint64_t now, bool reset) {
    std::lock_guard<std::mutex> g(pending_mutex_);
    if (consumed_) {
      // A reader folded in everything handed over before: its table now
      // holds what in_flight_ said.
      for (const auto &[key, present] : in_flight_) {
        if (present)
          reader_keys_.insert(key);
        else
          reader_keys_.erase(key);
      }
      in_flight_.clear();
      consumed_ = false;
    }
    if (reset) {
      pending_.clear();
      in_flight_.clear();
      reader_keys_.clear(); // the readers drop their table first
      pending_reset_ = true;
    }
    // A row that changes again before a reader comes replaces its entry, and
    // the end of a row no reader has seen drops it: pending_ holds at most
    // the rows alive plus those the readers' table has, however rarely (or
    // never) anyone reads (ended leases would pile up otherwise).
    for (auto &[key, view] : changes) {
      if (!view && reader_keys_.count(key) == 0) {
        pending_.erase(key);
        in_flight_.erase(key);
        continue;
      }
      in_flight_.insert_or_assign(key, view.has_value());
      pending_.insert_or_assign(std::move(key), std::move(view));
    }
    pending_generated_ms_ = now;
    pending_published_ = true;
  }

  /// Entries handed over and not yet read (for tests).
  size_t pending() {
    std::lock_guard<std::mutex> g(pending_mutex_);
    return pending_.size();
  }

  /// Loop thread: a reader lost changes (it failed to fold them in); the
  /// next hand-over must be a reset.
  bool reset_requested() { return reset_requested_.exchange(false); }

  /// Any thread: the table as of the newest hand-over, its first `limit`
  /// rows. Renders what changed since the previous call (O(changes)) and the
  /// array when anything did (O(rows), on the caller's thread); otherwise the
  /// same body again. Serialised between readers.
  Page page(size_t limit = std::numeric_limits<size_t>::max()) {
    std::lock_guard<std::mutex> build(build_mutex_);
    std::unordered_map<std::string, std::optional<View>> changes;
    bool reset = false;
    {
      std::lock_guard<std::mutex> g(pending_mutex_);
      if (!pending_published_)
        return {};
      changes.swap(pending_);
      std::swap(reset, pending_reset_);
      consumed_ = true;
      generated_ms_ = pending_generated_ms_;
    }
    if (reset) {
      rows_.clear();
      awaiting_reset_ = false;
    }
    if (awaiting_reset_)
      return {};
    try {
      for (auto &[key, view] : changes) {
        if (view)
          rows_.insert_or_assign(key, render_(*view));
        else
          rows_.erase(key);
      }
      if (!body_ || !changes.empty() || reset)
        body_ = render(rows_.size());
      if (limit < rows_.size())
        return Page{render(limit), generated_ms_};
    } catch (...) {
      // Changes taken but not folded in are lost: ask the loop for every
      // row again, and answer nothing until they arrive.
      rows_.clear();
      body_.reset();
      awaiting_reset_ = true;
      reset_requested_ = true;
      throw;
    }
    return Page{body_, generated_ms_};
  }

private:
  std::shared_ptr<const std::string> render(size_t limit) const {
    size_t size = 3, n = 0;
    for (auto it = rows_.begin(); it != rows_.end() && n < limit; ++it, ++n)
      size += it->second.size() + 1;
    auto body = std::make_shared<std::string>();
    body->reserve(size);
    *body += '[';
    n = 0;
    for (auto it = rows_.begin(); it != rows_.end() && n < limit; ++it, ++n) {
      if (n > 0)
        *body += ',';
      *body += it->second;
    }
    *body += "]\n";
    return body;
  }

  const Render render_;
  /// Loop -> readers, guarded by pending_mutex_.
  std::mutex pending_mutex_;
  std::unordered_map<std::string, std::optional<View>> pending_;
  uint64_t pending_generated_ms_ = 0;
  bool pending_published_ = false;
  /// rows_ is to be dropped before pending_ (every row) is folded in.
  bool pending_reset_ = false;
  std::atomic<bool> reset_requested_{false};
  /// A reader took pending_ since the last hand-over.
  bool consumed_ = false;
  /// Also under pending_mutex_, kept by hand_over: what pending_ holds (key
  /// -> present), and the keys the readers' table holds once it has folded
  /// in what it took.
  std::unordered_map<std::string, bool> in_flight_;
  std::unordered_set<std::string> reader_keys_;

  /// Readers' side, guarded by build_mutex_ (the loop never takes it).
  std::mutex build_mutex_;
  /// Key -> the row's JSON, rendered when it changed.
  std::map<std::string, std::string> rows_;
  std::shared_ptr<const std::string> body_;
  uint64_t generated_ms_ = 0;
  /// Changes were lost: pages are empty until a reset arrives.
  bool awaiting_reset_ = false;
};

} // namespace rfaas::rm
