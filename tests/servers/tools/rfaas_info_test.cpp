// rfaas-info as an operator runs it: the real binary, real providers on this
// machine. The device database it writes must use the names the shipped
// config/devices.json uses, and --provider must narrow the listing.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <rdmalib/device.hpp>

namespace {

struct ToolRun {
  int status = -1;
  std::string out;
};

/// ToolRun rfaas-info with `args` (stderr discarded), capturing stdout.
ToolRun rfaas_info(const std::string &args) {
  ToolRun r;
  std::string cmd = std::string("'") + RFAAS_INFO_BINARY + "' " + args + " 2>/dev/null";
  FILE *p = popen(cmd.c_str(), "r");
  if (!p)
    return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0)
    r.out.append(buf, n);
  int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string scratch_path(const char *what) {
  return std::string(::testing::TempDir()) + "rfaas_info_test_" + what + "_" +
         std::to_string(getpid()) + ".json";
}

} // namespace

TEST(RfaasInfo, WrittenNamesEqualTheShippedDatabase) {
  std::string path = scratch_path("devices");
  ToolRun r = rfaas_info("--json --write-devices '" + path + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto written = rdmalib::DeviceDatabase::load(path);
  auto shipped = rdmalib::DeviceDatabase::load(RFAAS_SHIPPED_DEVICES);
  std::remove(path.c_str());

  // Every loopback entry written here exists in the shipped file under the same
  // name with the same provider and endpoint type...
  std::set<std::string> written_names;
  size_t loopback = 0;
  for (const auto &w : written.devices()) {
    written_names.insert(w.name);
    if (w.ip_address != "127.0.0.1")
      continue;
    ++loopback;
    SCOPED_TRACE(w.name);
    const rdmalib::DeviceConfig *s = nullptr;
    for (const auto &c : shipped.devices())
      if (c.name == w.name)
        s = &c;
    ASSERT_NE(s, nullptr) << "rfaas-info wrote \"" << w.name
                          << "\", which config/devices.json does not ship";
    EXPECT_EQ(s->provider, w.provider);
    EXPECT_EQ(rdmalib::to_string(s->endpoint), std::string(rdmalib::to_string(w.endpoint)));
  }
  ASSERT_GT(loopback, 0u) << "no loopback provider opened on this machine";

  // ...and every shipped entry whose provider/endpoint was written here has
  // the shipped name.
  for (const auto &s : shipped.devices()) {
    for (const auto &w : written.devices()) {
      if (w.ip_address == "127.0.0.1" && w.provider == s.provider && w.endpoint == s.endpoint) {
        EXPECT_TRUE(written_names.count(s.name))
            << "config/devices.json ships \"" << s.name << "\", rfaas-info wrote \"" << w.name
            << "\" for it";
      }
    }
  }
}

TEST(RfaasInfo, ProviderFiltersTheListing) {
  ToolRun all = rfaas_info("--json");
  ASSERT_EQ(all.status, 0) << all.out;
  auto doc = nlohmann::json::parse(all.out);
  std::set<std::string> providers;
  for (const auto &p : doc["found"])
    providers.insert(p["provider"].get<std::string>());
  if (!providers.count("tcp") || providers.size() < 2)
    GTEST_SKIP() << "needs tcp and one other provider here; found " << providers.size();

  ToolRun tcp = rfaas_info("--json --provider tcp");
  ASSERT_EQ(tcp.status, 0) << tcp.out;
  auto filtered = nlohmann::json::parse(tcp.out);
  ASSERT_FALSE(filtered["found"].empty());
  for (const auto &p : filtered["found"])
    EXPECT_EQ(p["provider"], "tcp") << p.dump();
  EXPECT_LT(filtered["found"].size(), doc["found"].size());

  // An alias filters by the canonical name.
  if (providers.count("tcp;ofi_rxm")) {
    ToolRun rxm = rfaas_info("--json --provider rxm");
    ASSERT_EQ(rxm.status, 0) << rxm.out;
    auto d = nlohmann::json::parse(rxm.out);
    ASSERT_FALSE(d["found"].empty());
    for (const auto &p : d["found"])
      EXPECT_EQ(p["provider"], "tcp;ofi_rxm") << p.dump();
  }
}

TEST(RfaasInfo, ProviderNarrowsTheWrittenDatabase) {
  std::string path = scratch_path("tcp");
  ToolRun r = rfaas_info("--json --provider tcp --write-devices '" + path + "'");
  ASSERT_EQ(r.status, 0) << r.out;
  auto written = rdmalib::DeviceDatabase::load(path);
  std::remove(path.c_str());
  ASSERT_FALSE(written.devices().empty());
  for (const auto &w : written.devices())
    EXPECT_EQ(w.provider, "tcp") << w.name;
}
