// Per-allocation accounting kept by the executor manager.
//
// Executors report increments: with remote atomics they fetch_add into the
// four 64-bit words of the allocation's registered record (the same layout as
// protocol::AccountingCounters), otherwise they send Accounting messages. The
// manager's total is the record plus the messages; it is logged when the
// allocation ends.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "protocol/protocol.hpp"

namespace rfaas::manager {

class AllocationAccounting {
public:
  /// Add the increments of one Accounting message (saturating, so a hostile
  /// executor cannot wrap the totals around).
  void add(const protocol::AccountingCounters &increment) noexcept;

  /// The totals: messages plus the remote-atomic record `words` (4 words, may
  /// be null when the fabric has no atomics). The record is read with atomic
  /// loads because the NIC / provider updates it behind the compiler's back.
  protocol::AccountingCounters totals(const uint64_t *words) const noexcept;

  /// "allocation 1.234 s, hot polling 0.100 s, execution 0.000123 s,
  /// invocations 42" for the end-of-allocation log line.
  static std::string describe(const protocol::AccountingCounters &c);

private:
  protocol::AccountingCounters messages_;
};

} // namespace rfaas::manager
