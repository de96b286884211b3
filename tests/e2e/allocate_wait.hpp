// allocate(), waiting out resources_unavailable: the manager frees a core
// when the previous test's executor has exited, which it learns shortly after
// that test's deallocate() returned. Shared by the test binary and the helper
// client it starts.
#pragma once

#include <rfaas/rfaas.hpp>

#include <chrono>
#include <thread>

namespace rfaas::e2e {

/// ex.allocate(manager, o), again every 20 ms while the manager answers
/// resources_unavailable, until `limit` has passed; then its error is thrown.
inline void allocate_waiting(rfaas::executor &ex, const rfaas::server &manager,
                             const rfaas::allocation_options &o,
                             std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    try {
      ex.allocate(manager, o);
      return;
    } catch (const rfaas::Error &e) {
      if (e.code() != rfaas::status::resources_unavailable ||
          std::chrono::steady_clock::now() > deadline)
        throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace rfaas::e2e
