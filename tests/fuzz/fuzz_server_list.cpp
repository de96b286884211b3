// Fuzz target: the server list reader of librfaas
// (rfaas::server_database::parse, rfaas/src/servers.cpp).
//
// Bad input must end in rfaas::Error; any other exception escapes and is
// reported as a crash. Every entry that parses has an address and a port
// (none with an opaque "ofi:" endpoint name), find() finds it by its name and
// by its endpoint, and rfaas::server::parse reads its endpoint back.
#include <string>

#include <rfaas/errors.hpp>
#include <rfaas/servers.hpp>

#include "fuzz_support.hpp"

namespace {

// The reader under test, called in one place.
rfaas::server_database read_servers(const std::string &text) {
  return rfaas::server_database::parse(text, "fuzz.json");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  rfaas::server_database db;
  try {
    db = read_servers(std::string(reinterpret_cast<const char *>(data), size));
  } catch (const rfaas::Error &) {
    return 0;
  }
  for (const rfaas::server &s : db.servers()) {
    const bool opaque = s.address.rfind("ofi:", 0) == 0;
    FUZZ_CHECK(!s.address.empty() && !s.name.empty() && (opaque ? s.port == 0 : s.port != 0));
    const rfaas::server back = rfaas::server::parse(s.endpoint());
    FUZZ_CHECK(back.address == s.address && back.port == s.port);
    // The first entry with this name (names need not be unique).
    const rfaas::server &found = db.find(s.name);
    FUZZ_CHECK(found.name == s.name);
    (void)db.find(s.endpoint());
  }
  if (!db.empty()) {
    const rfaas::server &first = db.select();
    FUZZ_CHECK(&first == &db.servers()[0]);
  }
  return 0;
}
