// Internal: removal of stale shared-memory regions, shared by the backends'
// Fabric::reclaim_stale and tested directly (tests/rdmalib/reclaim_test.cpp).
#pragma once

#include <chrono>
#include <string>

#include <rdmalib/fabric.hpp>

namespace rdmalib::detail {

/// Unlink the files directly in `dir` that are named like shm provider
/// regions ("<digits>:<digits>:<digits>") or rdmalib listeners ("rdmalib-*"),
/// belong to this user, have not changed for `min_age` and are mapped by no
/// process whose /proc/<pid>/maps this process can read. Never throws.
Fabric::ReclaimReport reclaim_unmapped_regions(const std::string &dir,
                                               std::chrono::seconds min_age);

} // namespace rdmalib::detail
