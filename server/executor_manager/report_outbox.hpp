// The resource-manager link's queue of accounting reports (RmLink's outbox),
// oldest first, with an index of each lease's newest periodic report. A new
// report replaces its lease's queued periodic one (reports are cumulative),
// and a busy node reports often: every live lease each accounting interval,
// and a final report per lease-ended notice, thousands a second while a
// client releases leases back to back. Looking through the queue (up to
// RmLink::kMaxQueuedReports) for each of them cost more than the rest of a
// notice; the index finds the report in O(log n).
//
// The index is kept here, next to the queue, so that no way of changing the
// queue can leave it stale. Policy (what to drop when full, what is in
// flight) stays with RmLink.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "protocol/rm_messages.hpp"

namespace rfaas::manager {

class ReportOutbox {
public:
  bool empty() const { return queue_.empty(); }
  size_t size() const { return queue_.size(); }
  const protocol::AccountingReport &front() const { return queue_.front().report; }

  void push_back(const protocol::AccountingReport &r) {
    const uint64_t seq = next_seq_++;
    if (!r.final)
      periodic_[r.lease_id] = seq;
    queue_.push_back({r, seq});
  }

  void pop_front() {
    forget(queue_.front());
    queue_.pop_front();
  }

  /// Replaces the newest periodic report of r's lease at position `first`
  /// or later with `r`; false when there is none. The newest, not the
  /// oldest: after a reconnect the report that was in flight is queued
  /// again ahead of a newer one for its lease, and the resource manager
  /// must get the newest totals last.
  bool replace(const protocol::AccountingReport &r, size_t first) {
    auto indexed = periodic_.find(r.lease_id);
    if (indexed == periodic_.end())
      return false;
    auto at = find(indexed->second, first);
    if (at == queue_.end())
      return false; // before `first` (in flight): left as it is
    at->report = r;
    if (r.final)
      periodic_.erase(indexed);
    return true;
  }

  /// Drops the oldest periodic report at position `first` or later; false
  /// when there is none. Looks through the queue: only a full queue (the
  /// resource manager away for long) comes here.
  bool drop_oldest_periodic(size_t first) {
    auto oldest = std::find_if(queue_.begin() + static_cast<std::ptrdiff_t>(first), queue_.end(),
                               [](const Queued &q) { return !q.report.final; });
    if (oldest == queue_.end())
      return false;
    const uint64_t lease = oldest->report.lease_id;
    forget(*oldest);
    queue_.erase(oldest);
    // The report before `first` (in flight) may be an older one of the same
    // lease: after a reconnect it is queued again, and a new report must
    // replace it as a look through the queue would.
    if (first > 0 && !queue_.front().report.final && queue_.front().report.lease_id == lease)
      periodic_.emplace(lease, queue_.front().seq);
    return true;
  }

private:
  struct Queued {
    protocol::AccountingReport report;
    /// Its place in the order of queuing: increasing along the queue, and
    /// unchanged when a report before it leaves (a position would shift).
    uint64_t seq;
  };

  std::deque<Queued>::iterator find(uint64_t seq, size_t first) {
    auto at = std::lower_bound(queue_.begin() + static_cast<std::ptrdiff_t>(first), queue_.end(),
                               seq, [](const Queued &q, uint64_t s) { return q.seq < s; });
    return at != queue_.end() && at->seq == seq ? at : queue_.end();
  }

  /// `q` leaves the queue. A lease has at most two periodic reports queued,
  /// the older one in flight at the front (a new one is queued only when
  /// none is found from `first` on), so when the indexed one leaves from the
  /// front none remains; drop_oldest_periodic() looks at the front itself.
  void forget(const Queued &q) {
    if (q.report.final)
      return;
    auto indexed = periodic_.find(q.report.lease_id);
    if (indexed != periodic_.end() && indexed->second == q.seq)
      periodic_.erase(indexed);
  }

  std::deque<Queued> queue_;
  uint64_t next_seq_ = 0;
  /// Lease id -> seq of its newest periodic report in queue_.
  std::unordered_map<uint64_t, uint64_t> periodic_;
};

} // namespace rfaas::manager
