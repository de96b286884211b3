// The executor manager's configuration: the example parses, and every kind of
// mistake gives an error naming the file and the key.
#include <gtest/gtest.h>

#include "executor_manager/config.hpp"

using rfaas::manager::ConfigError;
using rfaas::manager::ManagerConfig;
using rfaas::manager::parse_core_list;

namespace {

const char *kMinimal = R"({"device_database": "devices.json", "device": "lo-tcp",
                          "resources": {"cores": [1]}})";

std::string error_of(const std::string &json) {
  try {
    ManagerConfig::parse(json, "em.json", "/etc/rfaas");
  } catch (const ConfigError &e) {
    return e.what();
  }
  return "";
}

std::string with(const std::string &extra) {
  return R"({"device_database": "devices.json", "device": "lo-tcp", "resources": {"cores": [1]}, )" +
         extra + "}";
}

} // namespace

TEST(ManagerConfig, ExampleFileLoads) {
  ManagerConfig c = ManagerConfig::load(RFAAS_SOURCE_DIR "/config/executor_manager.json");
  EXPECT_EQ(c.device, "lo-tcp");
  EXPECT_EQ(c.device_database, RFAAS_SOURCE_DIR "/config/devices.json");
  EXPECT_EQ(c.cores, std::vector<int>{1});
  EXPECT_FALSE(c.resource_manager_enabled);
  EXPECT_TRUE(c.zygote);
  EXPECT_EQ(c.executor_pool, 1u);
}

TEST(ManagerConfig, ExecutorPool) {
  EXPECT_EQ(ManagerConfig::parse(kMinimal, "em.json", "/").executor_pool, 1u);
  EXPECT_EQ(ManagerConfig::parse(with(R"("executor": {"pool": 0})"), "em.json", "/").executor_pool,
            0u);
  EXPECT_EQ(ManagerConfig::parse(with(R"("executor": {"pool": 64})"), "em.json", "/").executor_pool,
            64u);
  EXPECT_NE(error_of(with(R"("executor": {"pool": 65})")).find("em.json: executor.pool"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("executor": {"pool": -1})")).find("em.json: executor.pool"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("executor": {"pool": true})")).find("em.json: executor.pool"),
            std::string::npos);
}

TEST(ManagerConfig, MinimalUsesDefaultsAndResolvesPaths) {
  ManagerConfig c = ManagerConfig::parse(kMinimal, "em.json", "/etc/rfaas");
  EXPECT_EQ(c.device_database, "/etc/rfaas/devices.json");
  EXPECT_EQ(c.listen_port, 0);
  EXPECT_EQ(c.max_allocations, 4u);
  EXPECT_EQ(c.shutdown_grace_ms, 2000u);
}

TEST(ManagerConfig, UnknownKeysNameFileAndPath) {
  std::string e = error_of(with(R"("limits": {"max_slots": 3})"));
  EXPECT_NE(e.find("em.json: limits.max_slots: unknown key"), std::string::npos) << e;
  e = error_of(with(R"("listne": {})"));
  EXPECT_NE(e.find("em.json: listne: unknown key"), std::string::npos) << e;
}

TEST(ManagerConfig, ValuesAreRangeChecked) {
  EXPECT_NE(error_of(with(R"("listen": {"port": 70000})")).find("listen.port"), std::string::npos);
  EXPECT_NE(error_of(with(R"("listen": {"port": "80"})")).find("listen.port"), std::string::npos);
  EXPECT_NE(error_of(with(R"("limits": {"max_input_slots": 0})")).find("max_input_slots"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("limits": {"max_slot_size": 32})")).find("max_slot_size"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("deadlines_ms": {"connect": -1})")).find("deadlines_ms.connect"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("log": {"level": "loud"})")).find("log.level"), std::string::npos);
  EXPECT_NE(error_of(with(R"("executor": {"zygote": 1})")).find("executor.zygote"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("limits": {"default_memory_mib": 4096})"))
                .find("larger than resources.memory_mib"),
            std::string::npos);
}

TEST(ManagerConfig, MissingRequiredKeys) {
  EXPECT_NE(error_of(R"({"device": "x", "resources": {"cores": [1]}})").find("device_database"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"device_database": "d", "device": "x"})").find("resources"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"device_database": "d", "device": "x", "resources": {"cores": []}})")
                .find("resources.cores: empty"),
            std::string::npos);
  EXPECT_NE(error_of("{nope").find("em.json: malformed JSON at byte "), std::string::npos);
  // Found by fuzzing: nlohmann reports this as out_of_range, not parse_error.
  EXPECT_NE(error_of(R"({"device_database": "d", "device": "x", "resources": {"cores": [1e400]}})")
                .find("em.json: unreadable JSON"),
            std::string::npos);
}

// The one-line format every configuration reader shares (rdmalib::ConfigNode):
// "<file>: <JSON path>: <problem>; <expected or valid choices>".
TEST(ManagerConfig, OneLineErrorFormat) {
  EXPECT_EQ(error_of(with(R"("listen": {"host": "h", "prot": 1})")),
            "em.json: listen.prot: unknown key; valid keys here: host, port");
  EXPECT_EQ(error_of(with(R"("executor": {"zygote": "yes"})")),
            "em.json: executor.zygote: expected true or false, got string \"yes\"");
  EXPECT_EQ(error_of(R"({"device_database": "d", "resources": {"cores": [1]}})"),
            "em.json: device: missing required key; expected the name of the device entry to "
            "listen on");
  EXPECT_EQ(error_of(with(R"("log": {"level": "loud"})")),
            "em.json: log.level: expected one of trace, debug, info, warn, error, critical, off, "
            "got string \"loud\"");
  EXPECT_EQ(error_of(with(R"("deadlines_ms": {"connect": 0})")),
            "em.json: deadlines_ms.connect: expected an integer 1..1000, got number 0");
}

TEST(ManagerConfig, AdmissionDefaultsAndLimits) {
  ManagerConfig c = ManagerConfig::parse(kMinimal, "em.json", "");
  EXPECT_EQ(c.admission.max_pending, 32u);
  EXPECT_EQ(c.admission.max_pending_per_peer, 8u);
  EXPECT_EQ(c.admission.request_ms, 5000u);
  EXPECT_EQ(c.admission.stats_interval_s, 60u);
  EXPECT_EQ(c.connect_ms, 500u);
  c = ManagerConfig::parse(with(R"("admission": {"max_pending": 8, "request_ms": 300,
                                                  "stats_interval_s": 0})"),
                           "em.json", "");
  EXPECT_EQ(c.admission.max_pending, 8u);
  EXPECT_EQ(c.admission.max_pending_per_peer, 8u); // the default follows a smaller total
  EXPECT_EQ(c.admission.request_ms, 300u);
  EXPECT_EQ(c.admission.stats_interval_s, 0u);
  EXPECT_EQ(error_of(with(R"("admission": {"max_pending": 4, "max_pending_per_peer": 5})")),
            "em.json: admission.max_pending_per_peer: larger than admission.max_pending (4); "
            "expected at most that");
  EXPECT_NE(error_of(with(R"("admission": {"max_pending": 0})")).find("admission.max_pending"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("admission": {"accept_ms": 5})")).find("admission.accept_ms: unknown"),
            std::string::npos);
  EXPECT_EQ(error_of(with(R"("deadlines_ms": {"connect": 5000})")),
            "em.json: deadlines_ms.connect: expected an integer 1..1000, got number 5000");
}

TEST(ManagerConfig, CoresAsArrayOrList) {
  auto c = ManagerConfig::parse(
      R"({"device_database": "d", "device": "x", "resources": {"cores": "0-2,5"}})", "em.json", "");
  EXPECT_EQ(c.cores, (std::vector<int>{0, 1, 2, 5}));
  EXPECT_NE(error_of(R"({"device_database": "d", "device": "x", "resources": {"cores": [1, 1]}})")
                .find("resources.cores[1]: CPU 1 is listed twice"),
            std::string::npos);
}

TEST(CoreList, Parses) {
  EXPECT_EQ(parse_core_list("3", "t"), std::vector<int>{3});
  EXPECT_EQ(parse_core_list("0-3", "t"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(parse_core_list("0,2,4-6", "t"), (std::vector<int>{0, 2, 4, 5, 6}));
}

TEST(CoreList, RejectsMalformed) {
  for (const char *bad : {"", ",", "1,", "a", "3-1", "1-", "-1", "1,1", "0-2,2", "5000", "1 2"})
    EXPECT_THROW(parse_core_list(bad, "--cores"), ConfigError) << bad;
  try {
    parse_core_list("1,x", "--cores");
  } catch (const ConfigError &e) {
    EXPECT_NE(std::string(e.what()).find("--cores: \"x\""), std::string::npos) << e.what();
  }
}

TEST(ManagerConfig, OciAndCommandSandboxes) {
  ManagerConfig c = ManagerConfig::parse(
      with(R"("executor": {"sandbox": "oci", "oci": {"image": "localhost/x:1", "pool": 2,
           "podman": ["podman", "--runtime", "runc"], "run_options": ["--ulimit", "nproc=9:9"]}})"),
      "em.json", "/etc/rfaas");
  EXPECT_EQ(c.sandbox.kind, rfaas::server::SandboxKind::Oci);
  EXPECT_EQ(c.sandbox.oci_image, "localhost/x:1");
  EXPECT_EQ(c.sandbox.oci_pool, 2u);
  EXPECT_EQ(c.sandbox.oci_podman.size(), 3u);
  EXPECT_EQ(c.sandbox.oci_run_options.size(), 2u);
  EXPECT_NE(error_of(with(R"("executor": {"sandbox": "oci"})")).find("executor.oci: missing"),
            std::string::npos)
      << error_of(with(R"("executor": {"sandbox": "oci"})"));
  EXPECT_NE(
      error_of(with(R"("executor": {"sandbox": "command"})")).find("executor.command: missing"),
      std::string::npos);
  EXPECT_NE(error_of(with(R"("executor": {"sandbox": "command", "command": ["a\nb"]})"))
                .find("executor.command[0]: a line break"),
            std::string::npos);
  EXPECT_NE(error_of(with(R"("executor": {"oci": {"image": "i", "host_code": false}})"))
                .find("host_code"),
            std::string::npos);
  ManagerConfig d = ManagerConfig::parse(
      with(R"("executor": {"sandbox": "command", "command": ["apptainer", "{executor_args}"]})"),
      "em.json", "/etc/rfaas");
  EXPECT_EQ(d.sandbox.command.size(), 2u);
}

TEST(ManagerConfig, OciImageAllowList) {
  ManagerConfig c = ManagerConfig::parse(
      with(R"("executor": {"sandbox": "oci", "oci": {"image": "a", "images": ["b", "c"]}})"),
      "em.json", "/etc/rfaas");
  EXPECT_EQ(c.sandbox.oci_images, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(rfaas::server::SandboxConfig::parse(c.sandbox.serialize()).oci_images,
            c.sandbox.oci_images);
  EXPECT_NE(error_of(with(R"("executor": {"oci": {"image": "a", "images": [""]}})"))
                .find("executor.oci.images[0]: empty"),
            std::string::npos);
}
