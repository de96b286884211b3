// A table the loop publishes for the REST API's reads (GET /nodes, GET
// /leases) so that they never wait for the loop: the loop hands over only
// the rows that changed since its previous publication, and the HTTP
// threads fold them into a table of their own and render a row when a read
// shows it after it changed, not once per request. published_nodes.hpp and
// published_leases.hpp say which rows; docs/resource_manager.md
// ("Snapshots") how stale they may be.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
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
    /// A shorter page than the table's rest: the key of its last row, to
    /// ask for the next page with; empty when no row follows.
    std::string next_after;
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

  /// Any thread: the table as of the newest hand-over, at most `limit` rows
  /// from the first key after `after` (empty: from the first row). Folds in
  /// what changed since the previous read (O(changes), a move each: a row is
  /// rendered only when a read shows it). The whole table is assembled once
  /// per change and kept (O(rows), on the caller's thread); a shorter page
  /// assembles and renders its own rows only (O(log rows + limit)), so an
  /// operator who pages a large fleet, where every heartbeat changes a row,
  /// does not pay for the whole array. Serialised between readers.
  Page page(size_t limit = std::numeric_limits<size_t>::max(), const std::string &after = {}) {
    std::lock_guard<std::mutex> build(build_mutex_);
    if (!fold())
      return {};
    auto first = after.empty() ? rows_.begin() : rows_.upper_bound(after);
    if (first == rows_.begin() && limit >= rows_.size()) {
      if (!body_)
        body_ = render(first, limit, nullptr);
      return Page{body_, generated_ms_, {}};
    }
    Page p{nullptr, generated_ms_, {}};
    p.body = render(first, limit, &p.next_after);
    return p;
  }

  /// Any thread: one row's JSON (with a final newline) as of the newest
  /// hand-over; `body` null when there is no such row or nothing was handed
  /// over yet (`generated_ms` 0 then). O(changes + log rows).
  Page row(const std::string &key) {
    std::lock_guard<std::mutex> build(build_mutex_);
    if (!fold())
      return {};
    Page p{nullptr, generated_ms_, {}};
    if (auto it = rows_.find(key); it != rows_.end())
      p.body = std::make_shared<const std::string>(rendered(it->second) + "\n");
    return p;
  }

private:
  /// Folds the changes handed over since the last read into rows_ (under
  /// build_mutex_); false when there is nothing to show yet.
  bool fold() {
    std::unordered_map<std::string, std::optional<View>> changes;
    bool reset = false;
    {
      std::lock_guard<std::mutex> g(pending_mutex_);
      if (!pending_published_)
        return false;
      changes.swap(pending_);
      std::swap(reset, pending_reset_);
      consumed_ = true;
      generated_ms_ = pending_generated_ms_;
    }
    if (reset) {
      rows_.clear();
      body_.reset();
      awaiting_reset_ = false;
    }
    if (awaiting_reset_)
      return false;
    try {
      for (auto &[key, view] : changes) {
        if (view)
          rows_[key].view = std::move(view);
        else
          rows_.erase(key);
      }
    } catch (...) {
      // Changes taken but not folded in are lost: ask the loop for every
      // row again, and answer nothing until they arrive.
      rows_.clear();
      body_.reset();
      awaiting_reset_ = true;
      reset_requested_ = true;
      throw;
    }
    if (!changes.empty())
      body_.reset(); // rendered again by the next read of the whole table
    return true;
  }

  /// A row: its JSON, and the view it is to be rendered from again when it
  /// changed since.
  struct Row {
    std::optional<View> view;
    std::string json;
  };
  using Rows = std::map<std::string, Row>;

  const std::string &rendered(Row &r) {
    if (r.view) {
      r.json = render_(*r.view);
      r.view.reset();
    }
    return r.json;
  }

  /// At most `limit` rows from `first` as a JSON array; `next_after` (when
  /// given) gets the last row's key if rows follow it.
  std::shared_ptr<const std::string> render(typename Rows::iterator first, size_t limit,
                                            std::string *next_after) {
    size_t size = 3, n = 0;
    for (auto it = first; it != rows_.end() && n < limit; ++it, ++n)
      size += rendered(it->second).size() + 1;
    auto body = std::make_shared<std::string>();
    body->reserve(size);
    *body += '[';
    n = 0;
    auto it = first;
    for (; it != rows_.end() && n < limit; ++it, ++n) {
      if (n > 0)
        *body += ',';
      *body += it->second.json;
    }
    *body += "]\n";
    if (next_after && n > 0 && it != rows_.end())
      *next_after = std::prev(it)->first;
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
  /// Key -> the row, rendered when a read shows it after it changed.
  Rows rows_;
  std::shared_ptr<const std::string> body_;
  uint64_t generated_ms_ = 0;
  /// Changes were lost: pages are empty until a reset arrives.
  bool awaiting_reset_ = false;
};

} // namespace rfaas::rm
