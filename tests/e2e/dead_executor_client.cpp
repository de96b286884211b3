// The client side of dead_executor_test.sh: its first allocation's executor
// is killed by the test while this client waits for its workers.
//
//   rfaas_e2e_dead_executor_client DEVICES DEVICE HOST:PORT LIBRARY
// Allocates once and expects the call to fail: prints "failed after S s:
// <error>" (exit 3 if it succeeded instead). Then allocates again, calls echo
// and prints "second allocation ok" (exit 1 if that fails). Once a line comes
// on stdin (the test killed that executor), invokes echo once more and
// prints "invocation after the kill: <status> after S s".
#include <rfaas/rfaas.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "allocate_wait.hpp"

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s DEVICES DEVICE MANAGER_ADDRESS LIBRARY\n", argv[0]);
    return 2;
  }
  try {
    rfaas::device_database devices = rfaas::device_database::load(argv[1]);
    rfaas::server manager = rfaas::server::parse(argv[3]);
    rfaas::executor ex(devices.find(argv[2]));
    rfaas::allocation_options o;
    o.library = argv[4];
    o.hot_timeout_ms = 0;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      rfaas::e2e::allocate_waiting(ex, manager, o);
      std::printf("the first allocation succeeded; its executor should have been killed\n");
      return 3;
    } catch (const rfaas::Error &e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("failed after %.3f s: %s (status %s)\n", s, e.what(), rfaas::to_string(e.code()));
      std::fflush(stdout);
    }
    // The library's state must still serve a new allocation.
    rfaas::e2e::allocate_waiting(ex, manager, o);
    std::vector<char> in(16, 'x'), out(16);
    rfaas::result r = ex.execute("echo", in, out);
    if (!r.ok()) {
      std::printf("echo on the second allocation failed: %s\n", rfaas::to_string(r.status));
      return 1;
    }
    std::printf("second allocation ok\n");
    std::fflush(stdout);
    // Past the wait for workers: the test kills this executor too, then
    // says so on stdin; the next invocation must fail clearly, not hang.
    char line[16];
    if (!std::fgets(line, sizeof line, stdin))
      return 0;
    const auto t1 = std::chrono::steady_clock::now();
    // Its own deadline, short: a fabric with no dead-peer report (shm)
    // answers only by it (timeout).
    r = ex.execute("echo", in, out, std::chrono::seconds(2));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    std::printf("invocation after the kill: %s after %.3f s\n", rfaas::to_string(r.status), s);
    ex.deallocate();
    return 0;
  } catch (const std::exception &e) {
    std::printf("error: %s\n", e.what());
    return 1;
  }
}
