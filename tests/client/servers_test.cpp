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
            "name or IP address of the manager's listener, or the ofi: name it printed");
  // An opaque endpoint name is checked, and needs no port (0 at most).
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "ofi:in:0g"} ]})"),
            "servers.json: executor_managers[0].address: rdmalib: invalid address "
            "\"ofi:in:0g\": the name has a character that is not a hexadecimal digit "
            "(expected host:port, [ipv6]:port or ofi:FORMAT:HEX)");
  // A host that no address could hold is refused when the file is read.
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a b", "port": 1} ]})"),
            "servers.json: executor_managers[0].address: rdmalib: invalid address \"a b:1\": "
            "host \"a b\" contains invalid characters (expected host:port, [ipv6]:port or "
            "ofi:FORMAT:HEX)");
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "ofi:in:00", "port": 7} ]})"),
            "servers.json: executor_managers[0].port: expected an integer 0..0, got number 7");
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

TEST(ServerDatabase, OpaqueAddressesNeedNoPort) {
  auto db = rfaas::server_database::parse(
      R"({"executor_managers": [ {"address": "ofi:efa:00ff"}, {"address": "ofi:in:01", "port": 0} ]})",
      "servers.json");
  ASSERT_EQ(db.servers().size(), 2u);
  EXPECT_EQ(db.servers()[0].address, "ofi:efa:00ff");
  EXPECT_EQ(db.servers()[0].port, 0);
  EXPECT_EQ(db.servers()[0].endpoint(), "ofi:efa:00ff");
  EXPECT_EQ(db.servers()[0].name, "ofi:efa:00ff");
}

// An opaque name written with upper-case hex digits is the same name: it is
// kept as managers print it, so that it reads back from endpoint() unchanged.
TEST(ServerDatabase, OpaqueNamesAreKeptInLowerCase) {
  auto db = rfaas::server_database::parse(
      R"({"executor_managers": [ {"name": "efa", "address": "ofi:efa:Fe8018"} ]})", "servers.json");
  ASSERT_EQ(db.servers().size(), 1u);
  const rfaas::server &s = db.servers()[0];
  EXPECT_EQ(s.address, "ofi:efa:fe8018");
  EXPECT_EQ(s.endpoint(), "ofi:efa:fe8018");
  EXPECT_EQ(rfaas::server::parse(s.endpoint()).address, s.address);
  EXPECT_EQ(db.find("ofi:efa:fe8018").name, "efa");
  EXPECT_EQ(db.find("ofi:efa:FE8018").name, "efa");
}

// An entry without a name is named by its endpoint; an earlier entry for the
// same manager under another name must not answer for that name (found by
// fuzzing).
TEST(ServerDatabase, FindPrefersANameOverAnEarlierEndpoint) {
  auto db = rfaas::server_database::parse(
      R"({"executor_managers": [ {"name": "a", "address": "10.0.0.7", "port": 7000},
                                 {"address": "10.0.0.7", "port": 7000} ]})",
      "servers.json");
  ASSERT_EQ(db.servers().size(), 2u);
  EXPECT_EQ(&db.find("10.0.0.7:7000"), &db.servers()[1]);
  EXPECT_EQ(&db.find("a"), &db.servers()[0]);
}

// JSON allows a key twice in one object and the parser keeps the last value:
// the strict reader refuses it, naming where (found by fuzzing).
TEST(ServerDatabase, DuplicateKeyIsRefused) {
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a", "port": 1},
                                               {"address": "b", "port": 2, "port": 3} ]})"),
            "servers.json: executor_managers[1].port: duplicate key; a key may appear once in an "
            "object (the later value would silently replace the earlier)");
  EXPECT_EQ(line_of(R"({"executor_managers": [], "executor_managers": []})"),
            "servers.json: executor_managers: duplicate key; a key may appear once in an object "
            "(the later value would silently replace the earlier)");
  // The same key in two objects is fine.
  EXPECT_EQ(line_of(R"({"executor_managers": [ {"address": "a", "port": 1},
                                               {"address": "b", "port": 2} ]})"),
            "(accepted)");
}

TEST(Server, ParseTakesWhatAManagerPrints) {
  rfaas::server ip = rfaas::server::parse("10.0.0.7:7000");
  EXPECT_EQ(ip.address, "10.0.0.7");
  EXPECT_EQ(ip.port, 7000);
  EXPECT_EQ(ip.endpoint(), "10.0.0.7:7000");
  rfaas::server v6 = rfaas::server::parse("[::1]:9");
  EXPECT_EQ(v6.address, "::1");
  EXPECT_EQ(v6.endpoint(), "[::1]:9");
  rfaas::server named = rfaas::server::parse("ofi:in:0200abcd");
  EXPECT_EQ(named.address, "ofi:in:0200abcd");
  EXPECT_EQ(named.port, 0);
  EXPECT_EQ(named.endpoint(), "ofi:in:0200abcd");
  EXPECT_THROW(rfaas::server::parse("no-port"), rfaas::Error);
}
