// Fabric::reclaim_stale for the libfabric backend: the shm provider's regions
// left in /dev/shm by processes that died without closing their endpoints.
//
// The provider unlinks a region when its endpoint closes, and from its own
// fatal-signal handlers, but a SIGKILL (an OOM kill, a timeout in a test
// harness, an operator) leaves the 16 MiB file behind for good: nothing else
// frees tmpfs memory. rdmalib's listener regions ("rdmalib-<host>-<port>")
// are never reused either, since ports differ.
#include "common/reclaim.hpp"
#include "backend.hpp"

namespace rdmalib::detail {

Fabric::ReclaimReport FabricImpl::reclaim_stale(std::chrono::seconds min_age) {
  return reclaim_unmapped_regions("/dev/shm/", min_age);
}

} // namespace rdmalib::detail
