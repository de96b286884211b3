// A client that allocates and then waits to be killed: the e2e test kills it
// mid-lease and checks that the manager reaps the executor.
//
//   rfaas_e2e_client_helper DEVICES DEVICE HOST:PORT LIBRARY
// Prints "allocated <allocation id>" once the lease is ready, then blocks
// reading stdin; exits when stdin closes.
#include <rfaas/rfaas.hpp>

#include <unistd.h>

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
    rfaas::e2e::allocate_waiting(ex, manager, o);
    std::vector<char> in(16, 'x'), out(16);
    rfaas::result r = ex.execute("echo", in, out);
    if (!r.ok()) {
      std::fprintf(stderr, "client_helper: echo failed: %s (detail %u)\n",
                   rfaas::to_string(r.status), static_cast<unsigned>(r.detail));
      return 1;
    }
    std::printf("allocated %llx\n", static_cast<unsigned long long>(ex.allocation_id()));
    std::fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "client_helper: %s\n", e.what());
    return 1;
  }
  return 0;
}
