#include "executor_manager/accounting.hpp"

#include <cstdio>
#include <limits>

namespace rfaas::manager {

namespace {
uint64_t sat_add(uint64_t a, uint64_t b) noexcept {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}
uint64_t load_word(const uint64_t *w) noexcept { return __atomic_load_n(w, __ATOMIC_RELAXED); }
} // namespace

void AllocationAccounting::add(const protocol::AccountingCounters &inc) noexcept {
  messages_.allocation_ns = sat_add(messages_.allocation_ns, inc.allocation_ns);
  messages_.hot_polling_ns = sat_add(messages_.hot_polling_ns, inc.hot_polling_ns);
  messages_.execution_ns = sat_add(messages_.execution_ns, inc.execution_ns);
  messages_.invocations = sat_add(messages_.invocations, inc.invocations);
}

protocol::AccountingCounters AllocationAccounting::totals(const uint64_t *words) const noexcept {
  protocol::AccountingCounters t = messages_;
  if (words) {
    t.allocation_ns = sat_add(t.allocation_ns, load_word(words + 0));
    t.hot_polling_ns = sat_add(t.hot_polling_ns, load_word(words + 1));
    t.execution_ns = sat_add(t.execution_ns, load_word(words + 2));
    t.invocations = sat_add(t.invocations, load_word(words + 3));
  }
  return t;
}

std::string AllocationAccounting::describe(const protocol::AccountingCounters &c) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "allocation %.3f s, hot polling %.3f s, execution %.6f s, invocations %llu",
                c.allocation_ns / 1e9, c.hot_polling_ns / 1e9, c.execution_ns / 1e9,
                static_cast<unsigned long long>(c.invocations));
  return buf;
}

} // namespace rfaas::manager
