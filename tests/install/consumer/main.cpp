// Compiles and links against the installed librfaas only (no rdmalib, no
// libfabric headers). Without arguments it exercises what needs no network:
// the server database, error texts, and the buffer views of the public API.
//
//   consumer DEVICES DEVICE HOST:PORT LIBRARY
// also leases a core from the executor manager at HOST:PORT, ships LIBRARY,
// runs its "echo" on a registered buffer and checks the output.
#include <rfaas/rfaas.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace {

int invoke(const char *devices, const char *device, const std::string &hp, const char *library) {
  rfaas::device_database db = rfaas::device_database::load(devices);
  rfaas::server manager = rfaas::server::parse(hp);
  rfaas::executor ex(db.find(device));
  rfaas::allocation_options o;
  o.library = library;
  o.hot_timeout_ms = 0;
  ex.allocate(manager, o);
  std::vector<uint32_t, rfaas::allocator<uint32_t>> in(256, rfaas::allocator<uint32_t>(ex)),
      out(256, rfaas::allocator<uint32_t>(ex));
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<uint32_t>(i * 2654435761u);
  rfaas::result r = ex.execute("echo", in, out);
  if (!r.ok() || r.output_size != in.size() * sizeof(uint32_t) || in != out) {
    std::fprintf(stderr, "consumer: echo failed: %s\n", rfaas::to_string(r.status));
    return 1;
  }
  std::printf("consumer: echo of %zu bytes through %s verified\n", in.size() * sizeof(uint32_t),
              hp.c_str());
  ex.deallocate();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  if (argc == 5) {
    try {
      return invoke(argv[1], argv[2], argv[3], argv[4]);
    } catch (const std::exception &e) {
      std::fprintf(stderr, "consumer: %s\n", e.what());
      return 1;
    }
  }
  rfaas::server_database db = rfaas::server_database::parse(
      R"({"executor_managers": [{"name": "a", "address": "10.0.0.1", "port": 10000}]})", "inline");
  if (db.servers().size() != 1 || db.find("a").endpoint() != "10.0.0.1:10000") {
    std::fprintf(stderr, "consumer: server database parsed wrongly\n");
    return 1;
  }
  try {
    rfaas::server_database::parse(R"({"executor_managers": [{"adress": "x"}]})", "typo");
    std::fprintf(stderr, "consumer: a typo was accepted\n");
    return 1;
  } catch (const rfaas::Error &e) {
    if (e.where() != rfaas::phase::configuration) {
      std::fprintf(stderr, "consumer: wrong phase in %s\n", e.what());
      return 1;
    }
  }
  std::vector<uint64_t> v(4);
  rfaas::const_buffer in(v);
  if (in.size != 32 ||
      std::string(rfaas::to_string(rfaas::status::unknown_function)) != "unknown_function") {
    std::fprintf(stderr, "consumer: buffer or status names wrong\n");
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
