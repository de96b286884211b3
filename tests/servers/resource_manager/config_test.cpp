// The configuration reader: the example parses, and every mistake is one line
// naming the file, the JSON path, the problem and what is expected.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "resource_manager/config.hpp"

using namespace rfaas::rm;

namespace {

std::string error_of(const std::string &text) {
  try {
    ResourceManagerConfig::parse(text, "test.json", "/etc/rfaas");
  } catch (const ConfigError &e) {
    return e.what();
  }
  return "";
}

const char *kToken = R"("http": {"token": "0123456789abcdef0123"})";

} // namespace

// The shipped example parses except for its placeholder token, which is
// refused: a service started with it would take changes from anyone who read
// the example.
TEST(ResourceManagerConfig, ExampleParsesButItsPlaceholderTokenIsRefused) {
  const std::string example = RFAAS_SOURCE_DIR "/config/resource_manager.json";
  std::string e;
  try {
    ResourceManagerConfig::load(example);
  } catch (const ConfigError &x) {
    e = x.what();
  }
  EXPECT_EQ(e, example + ": http.token: the placeholder token of the shipped example "
                         "(\"change-me-to-a-long-random-token\") is refused; expected your own "
                         "token, e.g. from `openssl rand -hex 32`, best in http.token_file (a "
                         "file only the service can read)");
  std::ifstream in(example);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string placeholder = "change-me-to-a-long-random-token";
  ASSERT_NE(text.find(placeholder), std::string::npos);
  text.replace(text.find(placeholder), placeholder.size(), "0123456789abcdef0123");
  auto c = ResourceManagerConfig::parse(text, example, RFAAS_SOURCE_DIR "/config");
  EXPECT_EQ(c.registry.policy, PlacementPolicy::Spread);
  EXPECT_EQ(c.http_port, 8080);
  EXPECT_EQ(c.database, RFAAS_SOURCE_DIR "/config/resource_manager.sqlite");
  EXPECT_TRUE(c.read_token.empty());
  EXPECT_TRUE(c.open_health && c.open_metrics);
  EXPECT_EQ(error_of(R"({"http": {"token": "CHANGEME-0123456789abcdef"}})")
                .rfind("test.json: http.token: the placeholder token", 0),
            0u);
}

TEST(ResourceManagerConfig, ReadTokenAndOpenEndpoints) {
  auto c = ResourceManagerConfig::parse(
      R"({"http": {"token": "0123456789abcdef0123", "read_token": "reader-0123456789abcdef",
                   "open_endpoints": ["/metrics"]}})",
      "t", "/");
  EXPECT_EQ(c.read_token, "reader-0123456789abcdef");
  EXPECT_FALSE(c.open_health);
  EXPECT_TRUE(c.open_metrics);
  c = ResourceManagerConfig::parse(R"({"http": {"token": "0123456789abcdef0123",
                                                "open_endpoints": []}})",
                                   "t", "/");
  EXPECT_FALSE(c.open_health || c.open_metrics);
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123", "read_token": "short"}})"),
            "test.json: http.read_token: too short (5 characters); expected an administrator "
            "token of at least 16 characters for changes through the REST API (e.g. `openssl "
            "rand -hex 32`)");
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123",
                                  "read_token": "0123456789abcdef0123"}})"),
            "test.json: http.read_token: the same as the operator token; expected another token "
            "(or leave it out)");
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123",
                                  "open_endpoints": ["/nodes"]}})"),
            "test.json: http.open_endpoints[0]: unknown endpoint \"/nodes\"; expected "
            "\"/health\" and/or \"/metrics\" (every other endpoint needs a token)");
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123", "open_endpoints": "/health"}})")
                .rfind("test.json: http.open_endpoints: expected an array", 0),
            0u);
}

TEST(ResourceManagerConfig, RestConnections) {
  auto c = ResourceManagerConfig::parse(R"({"http": {"token": "0123456789abcdef0123",
                                                     "max_connections": 64,
                                                     "idle_timeout_ms": 5000}})",
                                        "t", "/");
  EXPECT_EQ(c.http_max_connections, 64u);
  EXPECT_EQ(c.http_idle_timeout_ms, 5000u);
  c = ResourceManagerConfig::parse(R"({"http": {"token": "0123456789abcdef0123"}})", "t", "/");
  EXPECT_EQ(c.http_max_connections, 256u);
  EXPECT_EQ(c.http_idle_timeout_ms, 60000u);
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123", "max_connections": 0}})"),
            "test.json: http.max_connections: expected an integer 1..10000, got number 0");
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef0123", "idle_timeout_ms": 100}})"),
            "test.json: http.idle_timeout_ms: expected an integer 1000..3600000, got number 100");
}

TEST(ResourceManagerConfig, DefaultsAndRelativePaths) {
  auto c = ResourceManagerConfig::parse(std::string("{") + kToken + R"(, "placement": "pack",
      "database": "db/rm.sqlite", "retention_days": 90,
      "leases": {"max_nodes": 4, "default_memory_mib": 512}})",
                                        "t", "/etc/rfaas");
  EXPECT_EQ(c.database, "/etc/rfaas/db/rm.sqlite");
  EXPECT_EQ(c.registry.policy, PlacementPolicy::Pack);
  EXPECT_EQ(c.registry.max_nodes_per_lease, 4u);
  EXPECT_EQ(c.registry.default_memory_mib, 512u);
  EXPECT_EQ(c.registry.retention_days, 90u);
  EXPECT_EQ(c.http_host, "127.0.0.1");
}

TEST(ResourceManagerConfig, UnknownKeysAreNamedWithTheValidOnes) {
  // The one format of every configuration reader (rdmalib::ConfigNode):
  // "<file>: <JSON path>: <problem>; <expected>".
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "leases": {"max_duraton_ms": 5}})"),
            "test.json: leases.max_duraton_ms: unknown key; valid keys here: "
            "default_duration_ms, max_duration_ms, max_nodes, default_memory_mib");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "colour": 1})"),
            "test.json: colour: unknown key; valid keys here: database, http, fabric, "
            "placement, leases, nodes, tick_ms, retention_days, quotas, log, auth, munge_socket");
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef", "tokn": 1}})"),
            "test.json: http.tokn: unknown key; valid keys here: host, port, threads, token, "
            "token_file, read_token, read_token_file, open_endpoints, loop_timeout_ms, "
            "max_connections, idle_timeout_ms");
  EXPECT_EQ(error_of("[1]"), "test.json: (top level): expected an object, got array [1]");
}

TEST(ResourceManagerConfig, BadValuesAreNamed) {
  EXPECT_EQ(error_of("{}"), "test.json: http: missing required key; expected an object with "
                            "\"token\" or \"token_file\": an administrator token of at least 16 "
                            "characters for changes through the REST API (e.g. `openssl rand "
                            "-hex 32`)");
  EXPECT_EQ(error_of(R"({"http": {"port": 8080}})")
                .rfind("test.json: http.token: missing "
                       "required key; expected \"token\" or",
                       0),
            0u);
  EXPECT_EQ(error_of(R"({"http": {"token": "short"}})")
                .rfind("test.json: http.token: too short (5 characters); expected an administrator "
                       "token of at least 16 characters",
                       0),
            0u);
  EXPECT_EQ(error_of(R"({"http": {"token": 12345678901234567890}})"),
            "test.json: http.token: expected a string, got number 12345678901234567890");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "placement": "random"})"),
            "test.json: placement: expected one of spread, pack, got string \"random\"");
  EXPECT_EQ(error_of(R"({"http": {"port": 70000, "token": "0123456789abcdef"}})"),
            "test.json: http.port: expected an integer 0..65535, got number 70000");
  EXPECT_EQ(error_of(R"({"http": {"threads": 0, "token": "0123456789abcdef"}})"),
            "test.json: http.threads: expected an integer 1..64, got number 0");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "tick_ms": "fast"})"),
            "test.json: tick_ms: expected an integer 10..60000, got string \"fast\"");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "tick_ms": -5})"),
            "test.json: tick_ms: expected an integer 10..60000, got number -5");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "database": ""})"),
            "test.json: database: expected a non-empty string, got an empty one");
  EXPECT_EQ(error_of(std::string("{") + kToken +
                     R"(, "leases": {"default_duration_ms": 5000, "max_duration_ms": 2000}})"),
            "test.json: leases.default_duration_ms: longer than leases.max_duration_ms (2000); "
            "expected at most that");
  // Only the maximum given, below the default duration: the maximum is named.
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "leases": {"max_duration_ms": 2000}})"),
            "test.json: leases.max_duration_ms: shorter than the default lease "
            "(leases.default_duration_ms, 60000); expected at least that");
  EXPECT_EQ(error_of("{ nope").rfind("test.json: malformed JSON at byte 4: ", 0), 0u)
      << error_of("{ nope");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "log": {"level": "loud"}})"),
            "test.json: log.level: expected one of trace, debug, info, warn, error, critical, "
            "off, got string \"loud\"");
}

TEST(ResourceManagerConfig, TokenFile) {
  char dir[] = "/tmp/rfaas-rm-config-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  std::ofstream(d + "/token") << "0123456789abcdef0123\r\nsecond line\n";
  std::ofstream(d + "/short") << "abc\n";
  auto c = ResourceManagerConfig::parse(R"({"http": {"token_file": "token"}})", "t.json", d);
  EXPECT_EQ(c.admin_token, "0123456789abcdef0123");
  std::string e;
  try {
    ResourceManagerConfig::parse(R"({"http": {"token_file": "short"}})", "t.json", d);
  } catch (const ConfigError &x) {
    e = x.what();
  }
  EXPECT_EQ(e.rfind("t.json: http.token_file: the first line of " + d +
                        "/short has 3 characters; expected an administrator token",
                    0),
            0u)
      << e;
  e.clear();
  try {
    ResourceManagerConfig::parse(R"({"http": {"token_file": "absent"}})", "t.json", d);
  } catch (const ConfigError &x) {
    e = x.what();
  }
  EXPECT_EQ(e.rfind("t.json: http.token_file: cannot read " + d +
                        "/absent: No such file or directory; expected a file whose first line",
                    0),
            0u)
      << e;
  EXPECT_EQ(error_of(R"({"http": {"token": "0123456789abcdef", "token_file": "x"}})"),
            "test.json: http: both \"token\" and \"token_file\" given; expected one of them");
  std::remove((d + "/token").c_str());
  std::remove((d + "/short").c_str());
  rmdir(dir);
}

TEST(ResourceManagerConfig, UnreadableFileIsNamed) {
  std::string e;
  try {
    ResourceManagerConfig::load("/nonexistent/rm.json");
  } catch (const ConfigError &x) {
    e = x.what();
  }
  EXPECT_EQ(e, "/nonexistent/rm.json: cannot open the resource manager configuration (example: "
               "config/resource_manager.json): No such file or directory");
}

TEST(ResourceManagerConfig, FabricBlock) {
  auto c = ResourceManagerConfig::parse(std::string("{") + kToken + R"(,
      "fabric": {"device_database": "devices.json", "device": "lo-tcp", "port": 0,
                 "heartbeat_ms": 500}})",
                                        "t", "/etc/rfaas");
  EXPECT_TRUE(c.fabric.enabled);
  EXPECT_EQ(c.fabric.device_database, "/etc/rfaas/devices.json");
  EXPECT_EQ(c.fabric.device, "lo-tcp");
  EXPECT_EQ(c.fabric.heartbeat_ms, 500u);
  EXPECT_FALSE(
      ResourceManagerConfig::parse(std::string("{") + kToken + "}", "t", "/").fabric.enabled);
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "fabric": {"device": "lo-tcp"}})"),
            "test.json: fabric.device_database: missing required key; expected the device "
            "database, e.g. \"devices.json\"");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "fabric": {"device_database": "d"}})"),
            "test.json: fabric.device: missing required key; expected the device entry to "
            "listen on, e.g. \"lo-tcp\"");
  EXPECT_EQ(error_of(std::string("{") + kToken +
                     R"(, "fabric": {"device_database": "d", "device": "x", "portt": 1}})")
                .rfind("test.json: fabric.portt: unknown key; valid keys here: device_database, "
                       "device, host, port,",
                       0),
            0u);
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "nodes": {"heartbeat_timeout_ms": 1000},
      "fabric": {"device_database": "d", "device": "x", "heartbeat_ms": 2000}})"),
            "test.json: fabric.heartbeat_ms: not shorter than nodes.heartbeat_timeout_ms (1000); "
            "expected less than that");
  // The heartbeat left at its default (1000 ms): the timeout is named.
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "nodes": {"heartbeat_timeout_ms": 500},
      "fabric": {"device_database": "d", "device": "x"}})"),
            "test.json: nodes.heartbeat_timeout_ms: not longer than fabric.heartbeat_ms (1000, "
            "the default); expected more than that");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(,
      "fabric": {"device_database": "d", "device": "x", "max_connections": 8,
                 "reserved_for_nodes": 8}})"),
            "test.json: fabric.reserved_for_nodes: fabric.reserved_for_nodes (8) must be below "
            "fabric.max_connections (8); expected room for at least one client");
  // Without a fabric block the heartbeat is not used: no conflict.
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "nodes": {"heartbeat_timeout_ms": 500}})"),
            "");
}

// fabric.busy_poll_us: the loop's polling window after work, 0 (off) to
// 10 ms; anything else is refused with the range.
TEST(ResourceManagerConfig, BusyPollWindow) {
  const std::string fabric =
      std::string("{") + kToken + R"(, "fabric": {"device_database": "d", "device": "x")";
  EXPECT_EQ(ResourceManagerConfig::parse(fabric + "}}", "t", "/").fabric.busy_poll_us, 50u);
  EXPECT_EQ(ResourceManagerConfig::parse(fabric + R"(, "busy_poll_us": 0}})", "t", "/")
                .fabric.busy_poll_us,
            0u);
  EXPECT_EQ(ResourceManagerConfig::parse(fabric + R"(, "busy_poll_us": 10000}})", "t", "/")
                .fabric.busy_poll_us,
            10000u);
  EXPECT_EQ(error_of(fabric + R"(, "busy_poll_us": 10001}})"),
            "test.json: fabric.busy_poll_us: expected an integer 0..10000, got number 10001");
  EXPECT_EQ(error_of(fabric + R"(, "busy_poll_us": -1}})"),
            "test.json: fabric.busy_poll_us: expected an integer 0..10000, got number -1");
  EXPECT_EQ(error_of(fabric + R"(, "busy_poll_us": "50"}})"),
            "test.json: fabric.busy_poll_us: expected an integer 0..10000, got string \"50\"");
}

TEST(ResourceManagerConfig, AuthIsNoneOrMunge) {
  auto c = ResourceManagerConfig::parse(std::string("{") + kToken + "}", "test.json", "/etc/rfaas");
  EXPECT_EQ(c.fabric.auth, ClientAuthMode::None);
  EXPECT_TRUE(c.fabric.munge_socket.empty());
  c = ResourceManagerConfig::parse(std::string("{") + kToken +
                                       R"(, "auth": "munge", "munge_socket": "m/munge.sock"})",
                                   "test.json", "/etc/rfaas");
  EXPECT_EQ(c.fabric.auth, ClientAuthMode::Munge);
  // Relative to the configuration file, like every path in it.
  EXPECT_EQ(c.fabric.munge_socket, "/etc/rfaas/m/munge.sock");
  const std::string e = error_of(std::string("{") + kToken + R"(, "auth": "kerberos"})");
  EXPECT_EQ(e.rfind("test.json: auth: ", 0), 0u) << e;
  EXPECT_NE(e.find("expected one of none, munge"), std::string::npos) << e;
}

TEST(ResourceManagerConfig, QuotasHaveADefaultAndPerUserOverrides) {
  auto c = ResourceManagerConfig::parse(std::string("{") + kToken + R"(, "quotas": {
      "default": {"cores": 8, "requests_per_minute": 60},
      "users": {"1000": {"cores": 32}, "alice@login1": {"leases": 2}}}})",
                                        "t", "/etc/rfaas");
  const QuotaConfig &q = c.registry.quotas;
  EXPECT_EQ(q.defaults, (QuotaLimits{8, 0, 0, 60}));
  ASSERT_EQ(q.users.size(), 2u);
  EXPECT_EQ(q.users.at("1000"), (QuotaLimits{32, std::nullopt, std::nullopt, std::nullopt}));
  Quotas quotas(q);
  EXPECT_EQ(quotas.effective(QuotaUser{1000u, "anyone"}), (QuotaLimits{32, 0, 0, 60}));
  EXPECT_EQ(quotas.effective(QuotaUser{std::nullopt, "alice@login1"}), (QuotaLimits{8, 0, 2, 60}));
  EXPECT_EQ(quotas.effective(QuotaUser{1001u, "alice@login1"}), (QuotaLimits{8, 0, 0, 60}));
  // Without a quotas block nothing is limited.
  auto none = ResourceManagerConfig::parse(std::string("{") + kToken + "}", "t", "/etc/rfaas");
  EXPECT_EQ(none.registry.quotas.defaults, (QuotaLimits{0, 0, 0, 0}));
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "quotas": {"default": {"core": 1}}})"),
            "test.json: quotas.default.core: unknown key; valid keys here: cores, memory_mib, "
            "leases, requests_per_minute");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "quotas": {"users": {"7": {"cores": -1}}}})"),
            "test.json: quotas.users.7.cores: expected an integer 0..1000000, got number -1");
  EXPECT_EQ(error_of(std::string("{") + kToken + R"(, "quotas": {"users": [1]}})"),
            "test.json: quotas.users: expected an object mapping a uid (\"1000\") or a client "
            "name to its limits, got array [1]");
}
