// The configuration reader: the example parses, and every mistake names the
// key and what is allowed.
#include <gtest/gtest.h>

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

TEST(ResourceManagerConfig, ExampleParses) {
  auto c = ResourceManagerConfig::load(RFAAS_SOURCE_DIR "/config/resource_manager.json");
  EXPECT_EQ(c.registry.policy, PlacementPolicy::Spread);
  EXPECT_EQ(c.http_port, 8080);
  EXPECT_EQ(c.database, RFAAS_SOURCE_DIR "/config/resource_manager.sqlite");
  EXPECT_GE(c.admin_token.size(), 16u);
}

TEST(ResourceManagerConfig, DefaultsAndRelativePaths) {
  auto c = ResourceManagerConfig::parse(std::string("{") + kToken + R"(, "placement": "pack",
      "database": "db/rm.sqlite", "leases": {"max_nodes": 4}})",
                                        "t", "/etc/rfaas");
  EXPECT_EQ(c.database, "/etc/rfaas/db/rm.sqlite");
  EXPECT_EQ(c.registry.policy, PlacementPolicy::Pack);
  EXPECT_EQ(c.registry.max_nodes_per_lease, 4u);
  EXPECT_EQ(c.http_host, "127.0.0.1");
}

TEST(ResourceManagerConfig, UnknownKeysAreNamedWithTheValidOnes) {
  std::string e = error_of(std::string("{") + kToken + R"(, "leases": {"max_duraton_ms": 5}})");
  EXPECT_NE(e.find("test.json: leases.max_duraton_ms: unknown key"), std::string::npos) << e;
  EXPECT_NE(e.find("max_duration_ms"), std::string::npos) << e;
  e = error_of(std::string("{") + kToken + R"(, "colour": 1})");
  EXPECT_NE(e.find("colour: unknown key"), std::string::npos) << e;
}

TEST(ResourceManagerConfig, BadValuesAreNamed) {
  EXPECT_NE(error_of("{}").find("http.token"), std::string::npos);
  EXPECT_NE(error_of(R"({"http": {"token": "short"}})").find("at least 16"), std::string::npos);
  EXPECT_NE(error_of(std::string("{") + kToken + R"(, "placement": "random"})")
                .find("\"spread\" or \"pack\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"http": {"port": 70000, "token": "0123456789abcdef"}})")
                .find("http.port: expected 0..65535, got 70000"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("{") + kToken + R"(, "tick_ms": "fast"})").find("tick_ms"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("{") + kToken +
                     R"(, "leases": {"default_duration_ms": 5000, "max_duration_ms": 2000}})")
                .find("must not exceed"),
            std::string::npos);
  EXPECT_NE(error_of("{ nope").find("not valid JSON"), std::string::npos);
  EXPECT_NE(
      error_of(std::string("{") + kToken + R"(, "log": {"level": "loud"}})").find("log.level"),
      std::string::npos);
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
  EXPECT_NE(error_of(std::string("{") + kToken + R"(, "fabric": {"device": "lo-tcp"}})")
                .find("fabric.device_database"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("{") + kToken +
                     R"(, "fabric": {"device_database": "d", "device": "x", "portt": 1}})")
                .find("fabric.portt"),
            std::string::npos);
  EXPECT_NE(error_of(std::string("{") + kToken + R"(, "nodes": {"heartbeat_timeout_ms": 1000},
      "fabric": {"device_database": "d", "device": "x", "heartbeat_ms": 2000}})")
                .find("fabric.heartbeat_ms"),
            std::string::npos);
}
