// Fabric::reclaim_stale for the libfabric backend: the shm provider's regions
// left in /dev/shm by processes that died without closing their endpoints.
//
// The provider unlinks a region when its endpoint closes, and from its own
// fatal-signal handlers, but a SIGKILL (an OOM kill, a timeout in a test
// harness, an operator) leaves the 16 MiB file behind for good: nothing else
// frees tmpfs memory. rdmalib's listener regions ("rdmalib-<host>-<port>")
// are never reused either, since ports differ.
#include <rdmalib/fabric.hpp>

#include "common/reclaim.hpp"

namespace rdmalib {

Fabric::ReclaimReport Fabric::reclaim_stale(std::chrono::seconds min_age) {
  return detail::reclaim_unmapped_regions("/dev/shm/", min_age);
}

} // namespace rdmalib
