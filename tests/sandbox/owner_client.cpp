// The client of the lease owner test (owner_test.sh), on the public librfaas:
// leases one core from a resource manager, allocates it with the hostile
// library, and asks its executor who it runs as.
//
//   owner_client --devices F --device D --resource-manager HOST:PORT --library L
//
// Prints "credential: sent" or "credential: none (why)", "lease owner_uid U"
// (or "lease owner anonymous") and "executor uid U gid G"; a refused lease
// prints "lease refused: <message>" and exits 3.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <rfaas/rfaas.hpp>

int main(int argc, char **argv) {
  std::string devices, device, rm_address, library;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--devices")
      devices = v;
    else if (k == "--device")
      device = v;
    else if (k == "--resource-manager")
      rm_address = v;
    else if (k == "--library")
      library = v;
  }
  if (devices.empty() || device.empty() || rm_address.empty() || library.empty()) {
    std::fprintf(stderr, "usage: owner_client --devices F --device D --resource-manager "
                         "HOST:PORT --library L\n");
    return 2;
  }
  try {
    rfaas::device_database db = rfaas::device_database::load(devices);
    rfaas::resource_manager rm(db.find(device), rm_address);
    rfaas::lease l;
    try {
      l = rm.lease(1, 128, std::chrono::milliseconds(60000));
    } catch (const rfaas::Error &e) {
      std::printf("credential: %s\n", rm.credential_problem().empty() ? "sent" : "none");
      std::printf("lease refused: %s\n", e.what());
      return 3;
    }
    if (rm.credential_problem().empty())
      std::printf("credential: sent\n");
    else
      std::printf("credential: none (%s)\n", rm.credential_problem().c_str());
    if (l.owner_uid == rfaas::lease::anonymous_uid)
      std::printf("lease owner anonymous\n");
    else
      std::printf("lease owner_uid %u\n", l.owner_uid);
    std::fflush(stdout);
    rfaas::executor ex(db.find(device));
    rfaas::allocation_options opts;
    opts.library = library;
    opts.hot_timeout_ms = 0;
    ex.allocate(l.server(0), l.options(0, opts));
    std::vector<char> out(256);
    rfaas::result r = ex.execute("identity", rfaas::const_buffer(nullptr, 0),
                                 rfaas::mutable_buffer(out.data(), out.size()));
    if (!r.ok()) {
      std::fprintf(stderr, "owner_client: identity: %s\n", rfaas::to_string(r.status));
      return 1;
    }
    std::printf("executor %s\n", std::string(out.data(), r.output_size).c_str());
    ex.deallocate();
    rm.release(l);
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "owner_client: %s\n", e.what());
    return 1;
  }
}
