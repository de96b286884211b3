// Fuzz target: the resource manager's configuration reader
// (rfaas::rm::ResourceManagerConfig::parse, server/resource_manager/config.cpp).
//
// Bad input must end in ConfigError; any other exception escapes and is
// reported as a crash. What parses must respect the limits the rest of the
// resource manager trusts without checking again.
#include <string>

#include "fuzz_support.hpp"
#include "resource_manager/config.hpp"

namespace {

// The reader under test, called in one place. The token file, if one is
// named, is looked up below a directory that does not exist.
rfaas::rm::ResourceManagerConfig read_config(const std::string &text) {
  return rfaas::rm::ResourceManagerConfig::parse(text, "fuzz.json", "/nonexistent/rfaas");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  try {
    rfaas::rm::ResourceManagerConfig c = read_config(text);
    FUZZ_CHECK(c.admin_token.size() >= 16);
    FUZZ_CHECK(!c.database.empty());
    FUZZ_CHECK(c.http_threads >= 1 && c.http_threads <= 64);
    FUZZ_CHECK(c.registry.default_lease_ms >= 1000 &&
               c.registry.default_lease_ms <= c.registry.max_lease_ms);
    FUZZ_CHECK(c.registry.max_nodes_per_lease >= 1);
    FUZZ_CHECK(c.registry.heartbeat_timeout_ms >= 100);
    FUZZ_CHECK(c.tick_ms >= 10);
    if (c.fabric.enabled) {
      FUZZ_CHECK(!c.fabric.device.empty() && !c.fabric.device_database.empty());
      FUZZ_CHECK(c.fabric.heartbeat_ms < c.registry.heartbeat_timeout_ms);
      FUZZ_CHECK(c.fabric.max_connections >= 1);
    }
  } catch (const rfaas::rm::ConfigError &) {
  }
  return 0;
}
