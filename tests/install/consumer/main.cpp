// Compiles and links against the installed librfaas only (no rdmalib, no
// libfabric headers), and exercises what needs no network: the server
// database, error texts, and the buffer views of the public API.
#include <rfaas/rfaas.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
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
