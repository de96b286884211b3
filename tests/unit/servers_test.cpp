// The client's server list (rfaas::server_database): read with the same strict
// reader as every other configuration file, so its errors have the same
// one-line shape.
#include <rfaas/errors.hpp>
#include <rfaas/servers.hpp>

#include <string>

#include <gtest/gtest.h>

namespace {

std::string error_of(const std::string &text) {
  try {
    rfaas::server_database::parse(text, "servers.json");
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.where(), rfaas::phase::configuration) << e.what();
    return e.what();
  }
  return "(accepted)";
}

// The message minus librfaas's own "rfaas: ..." prefix: from the file name on.
std::string line_of(const std::string &text) {
  std::string e = error_of(text);
  auto at = e.find("servers.json: ");
  return at == std::string::npos ? e : e.substr(at);
}

} // namespace

TEST(ServerDatabase, ParsesEntries) {
  auto db = rfaas::server_database::parse(
      R"({"executor_managers": [ {"name": "n1", "address": "127.0.0.1", "port": 10000},
                                 {"address": "::1", "port": 10001} ]})",
      "servers.json");
  ASSERT_EQ(db.servers().size(), 2u);
  EXPECT_EQ(db.servers()[0].name, "n1");
  EXPECT_EQ(db.servers()[1].name, "[::1]:10001");
  EXPECT_EQ(db.find("n1").port, 10000);
}

TEST(ServerDatabase, OneLineErrorFormat) {
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a", "port": 1, "host": "b"} ]})"),
            "servers.json: executor_managers[0].host: unknown key; valid keys here: name, "
            "address, port");
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a", "port": "10000"} ]})"),
            "servers.json: executor_managers[0].port: expected an integer 1..65535, got string "
            "\"10000\"");
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"port": 10000} ]})"),
            "servers.json: executor_managers[0].address: missing required key; expected a host "
            "name or IP address of the manager's listener");
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a", "port": 0} ]})"),
            "servers.json: executor_managers[0].port: expected an integer 1..65535, got number 0");
  EXPECT_EQ(line_of(R"({"managers": []})"),
            "servers.json: managers: unknown key; valid keys here: executor_managers");
  EXPECT_NE(error_of("{").find("servers.json: malformed JSON at byte "), std::string::npos)
      << error_of("{");
  EXPECT_EQ(error_of(R"({"executor_managers": 5})").find('\n'), std::string::npos);
}

TEST(ServerDatabase, MissingFileNamesIt) {
  try {
    rfaas::server_database::load("/nonexistent-rfaas/servers.json");
    FAIL() << "load() did not throw";
  } catch (const rfaas::Error &e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("/nonexistent-rfaas/servers.json: cannot open server database: "),
              std::string::npos)
        << msg;
  }
}
