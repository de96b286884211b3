// The REST API, in process, over loopback HTTP: what operators see and may
// change, and that changes need the bearer token.
#include <gtest/gtest.h>

#include <poll.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "http_client.hpp"
#include "resource_manager/published_nodes.hpp"
#include "resource_manager/rest.hpp"

using namespace rfaas::rm;
using nlohmann::json;
using rfaas::http::request;

namespace {

const std::string kToken = "test-token-0123456789";
const std::string kReader = "read-only-token-0123456789";

struct RestFixture : ::testing::Test {
  uint64_t now = 5'000'000;
  Store store{":memory:"};
  Registry reg{store, [this] { return now; }, RegistryOptions{}};
  Loop loop{reg, std::chrono::milliseconds(50)};
  RestServer rest{loop, RestAccess{kToken, kReader, true, true}};
  void SetUp() override {
    loop.start();
    rest.start("127.0.0.1", 0, 2);
    ASSERT_NE(rest.port(), 0);
  }
  void TearDown() override {
    rest.stop();
    loop.stop();
  }
};

} // namespace

TEST(Bearer, ComparesWholeTokens) {
  std::string ok = "Bearer abcdefghijklmnop", shorter = "Bearer abcdefghijklmno",
              lower = "bearer abcdefghijklmnop", none = "abcdefghijklmnop";
  EXPECT_TRUE(bearer_matches(&ok, "abcdefghijklmnop"));
  EXPECT_FALSE(bearer_matches(&shorter, "abcdefghijklmnop"));
  EXPECT_FALSE(bearer_matches(&lower, "abcdefghijklmnop"));
  EXPECT_FALSE(bearer_matches(&none, "abcdefghijklmnop"));
  EXPECT_FALSE(bearer_matches(nullptr, "abcdefghijklmnop"));
}

TEST_F(RestFixture, HealthAndEmptyLists) {
  auto h = request(rest.port(), "GET", "/health");
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ(json::parse(h.body)["status"], "ok");
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/nodes", "", kToken).body), json::array());
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/leases", "", kToken).body), json::array());
  EXPECT_EQ(request(rest.port(), "GET", "/nope").status, 404);
}

TEST_F(RestFixture, MutationsNeedTheToken) {
  std::string body = R"({"name":"n1","address":"10.0.0.1:10000","cores":4,"memory_mib":1024})";
  auto r = request(rest.port(), "POST", "/nodes", body);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("Authorization: Bearer"), std::string::npos);
  EXPECT_EQ(r.header("WWW-Authenticate"), "Bearer") << r.headers;
  EXPECT_EQ(request(rest.port(), "POST", "/nodes", body, "wrong-token-0123456789").status, 401);
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1").status, 401);
  EXPECT_EQ(request(rest.port(), "DELETE", "/leases/1").status, 401);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/n1/drain").status, 401);
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/nodes", "", kToken).body).size(), 0u);
}

// Nodes, leases and accounting name clients and lease ids: reading them needs
// the operator token or the read-only one, which changes nothing.
TEST_F(RestFixture, ReadsNeedATokenAndTheReadOnlyTokenChangesNothing) {
  for (const char *path :
       {"/nodes", "/leases", "/leases?state=all", "/accounting", "/accounting.csv"}) {
    auto r = request(rest.port(), "GET", path);
    EXPECT_EQ(r.status, 401) << path;
    EXPECT_NE(r.body.find("read-only token (http.read_token)"), std::string::npos) << r.body;
    EXPECT_EQ(request(rest.port(), "GET", path, "", "wrong-token-0123456789").status, 401) << path;
    EXPECT_EQ(request(rest.port(), "GET", path, "", kReader).status, 200) << path;
    EXPECT_EQ(request(rest.port(), "GET", path, "", kToken).status, 200) << path;
  }
  EXPECT_EQ(request(rest.port(), "GET", "/health").status, 200);
  EXPECT_EQ(request(rest.port(), "GET", "/metrics").status, 200);
  auto r =
      request(rest.port(), "POST", "/nodes",
              R"({"name":"n1","address":"10.0.0.1:10000","cores":4,"memory_mib":1024})", kReader);
  EXPECT_EQ(r.status, 401);
  EXPECT_NE(r.body.find("changes state"), std::string::npos) << r.body;
  EXPECT_EQ(request(rest.port(), "DELETE", "/leases/1", "", kReader).status, 401);
}

// http.open_endpoints: [] closes /health and /metrics too.
TEST(RestAccessConfig, HealthAndMetricsCanBeClosed) {
  uint64_t now = 5'000'000;
  Store store{":memory:"};
  Registry reg{store, [&] { return now; }, RegistryOptions{}};
  Loop loop{reg, std::chrono::milliseconds(50)};
  RestServer rest{loop, RestAccess{kToken, "", false, false}};
  loop.start();
  rest.start("127.0.0.1", 0, 1);
  for (const char *path : {"/health", "/metrics"}) {
    auto r = request(rest.port(), "GET", path);
    EXPECT_EQ(r.status, 401) << path;
    // Without a read-only token configured the message names only the operator's.
    EXPECT_EQ(r.body.find("read_token"), std::string::npos) << r.body;
    EXPECT_EQ(request(rest.port(), "GET", path, "", kToken).status, 200) << path;
  }
  rest.stop();
  loop.stop();
}

// Client names that start like a spreadsheet formula are exported as text.
TEST_F(RestFixture, CsvExportEscapesFormulaCells) {
  NodeSecret s = generate_secret();
  const std::vector<std::string> clients = {
      "=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2", "@SUM(A1)", "\tcmd", "plain"};
  for (const std::string &c : clients) {
    auto g = loop.call([&](Registry &r) {
      r.register_node("n1", "h:1", 16, 1 << 20, s);
      return r.grant({c, 1, 1, 0, 1, kAnonymousOwner, ""});
    });
    ASSERT_TRUE(g.ok()) << g.message;
    const uint64_t id = g.value.lease.id;
    ASSERT_TRUE(
        loop.call([&](Registry &r) {
              return r.record_accounting({id, "n1", "", 0, 1, 1, 1, 1, true, kAnonymousOwner, ""});
            })
            .ok());
  }
  auto csv = request(rest.port(), "GET", "/accounting.csv", "", kToken);
  ASSERT_EQ(csv.status, 200);
  EXPECT_NE(csv.body.find(",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\","), std::string::npos)
      << csv.body;
  EXPECT_NE(csv.body.find(",'+1+1,"), std::string::npos) << csv.body;
  EXPECT_NE(csv.body.find(",'-2,"), std::string::npos) << csv.body;
  EXPECT_NE(csv.body.find(",'@SUM(A1),"), std::string::npos) << csv.body;
  EXPECT_NE(csv.body.find(",'\tcmd,"), std::string::npos) << csv.body;
  EXPECT_NE(csv.body.find(",plain,"), std::string::npos) << csv.body;
  // No line has a cell that starts with a formula character.
  for (const char *bad : {",=", ",+", ",-", ",@", ",\"="})
    EXPECT_EQ(csv.body.find(bad), std::string::npos) << bad << " in " << csv.body;
}

// POST /nodes/{name}/secret: a new secret, returned once; the node's leases
// stay, and only the new secret registers it from then on.
TEST_F(RestFixture, RotatingANodeSecretKeepsItsLeases) {
  NodeSecret old_secret = generate_secret();
  auto g = loop.call([&](Registry &r) {
    r.register_node("n1", "h:1", 4, 4096, old_secret);
    return r.grant({"alice", 2, 100, 0, 1, kAnonymousOwner, ""});
  });
  ASSERT_TRUE(g.ok()) << g.message;
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/n1/secret", "", kReader).status, 401);
  auto r = request(rest.port(), "POST", "/nodes/n1/secret", "", kToken);
  ASSERT_EQ(r.status, 200) << r.body;
  NodeSecret fresh;
  ASSERT_TRUE(from_hex(json::parse(r.body)["secret"].get<std::string>(), fresh)) << r.body;
  EXPECT_NE(fresh, old_secret);
  EXPECT_EQ(json::parse(r.body)["active_leases"], 1);
  EXPECT_EQ(json::parse(r.body)["state"], "up");
  EXPECT_TRUE(loop.call([&](Registry &reg) { return reg.active_lease(g.value.lease.id); }));
  EXPECT_EQ(
      loop.call([&](Registry &reg) { return reg.register_node("n1", "h:1", 4, 4096, old_secret); })
          .outcome,
      Outcome::Forbidden);
  EXPECT_TRUE(
      loop.call([&](Registry &reg) { return reg.register_node("n1", "h:1", 4, 4096, fresh); })
          .ok());
  // An operator's own secret, and the bad inputs.
  const std::string mine(64, 'c');
  r = request(rest.port(), "POST", "/nodes/n1/secret", R"({"secret":")" + mine + R"("})", kToken);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["secret"], mine);
  r = request(rest.port(), "POST", "/nodes/n1/secret", R"({"secret":")" + mine + R"("})", kToken);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("has this secret already"), std::string::npos) << r.body;
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/n1/secret", R"({"secret":"xyz"})", kToken).status,
            400);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/n1/secret", R"({"scret":1})", kToken).status, 400);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/zz/secret", "", kToken).status, 404);
}

// GET /nodes answers from the table the loop publishes, dated by the
// registry's clock: it shows what the registry shows (same order, same
// fields) after every kind of change, and a change a REST answer or a task
// reported is in the next GET.
TEST_F(RestFixture, NodesComeFromThePublishedTableWithItsGenerationTime) {
  auto nodes = [&] {
    auto r = request(rest.port(), "GET", "/nodes", "", kReader);
    EXPECT_EQ(r.status, 200) << r.body;
    return std::make_pair(json::parse(r.body), r.header("X-Rfaas-Generated-Ms"));
  };
  auto registry_nodes = [&] {
    json a = json::array();
    for (const NodeView &v : loop.call([](Registry &r) { return r.nodes(); }))
      a.push_back(node_json(v));
    return a;
  };
  // The fake clock moves only between tasks; the loop runs and publishes on
  // its own (ticks every 50 ms), so a GET may be dated by an earlier time
  // only if nothing changed since.
  now = 6'000'000;
  ASSERT_EQ(request(rest.port(), "POST", "/nodes",
                    R"({"name":"n2","address":"10.0.0.2:1","cores":4,"memory_mib":1024})", kToken)
                .status,
            201);
  auto [list, generated] = nodes();
  EXPECT_EQ(generated, "6000000");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["state"], "down");

  NodeSecret s = generate_secret();
  now = 6'000'100;
  auto g = loop.call([&](Registry &r) {
    r.register_node("n1", "h:1", 8, 4096, s);
    return r.grant({"alice", 3, 100, 0, 1, kAnonymousOwner, ""});
  });
  ASSERT_TRUE(g.ok()) << g.message;
  std::tie(list, generated) = nodes();
  EXPECT_EQ(generated, "6000100");
  EXPECT_EQ(list, registry_nodes());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["name"], "n1");
  EXPECT_EQ(list[0]["state"], "up");
  EXPECT_EQ(list[0]["cores_used"], 3);
  EXPECT_EQ(list[0]["registered_ms"], 6'000'100);

  now = 6'000'200;
  ASSERT_TRUE(loop.call([&](Registry &r) { return r.heartbeat("n1"); }).ok());
  std::tie(list, generated) = nodes();
  EXPECT_EQ(generated, "6000200");
  EXPECT_EQ(list[0]["last_heartbeat_ms"], 6'000'200);
  ASSERT_TRUE(loop.call([&](Registry &r) { return r.revoke(g.value.lease.id); }).ok());
  std::tie(list, generated) = nodes();
  EXPECT_EQ(list, registry_nodes());
  EXPECT_EQ(list[0]["cores_used"], 0);
  EXPECT_EQ(list[0]["active_leases"], 0);

  ASSERT_EQ(request(rest.port(), "POST", "/nodes/n2/drain", "", kToken).status, 200);
  EXPECT_EQ(nodes().first[1]["drained"], true);
  ASSERT_EQ(request(rest.port(), "DELETE", "/nodes/n2", "", kToken).status, 200);
  std::tie(list, generated) = nodes();
  EXPECT_EQ(list, registry_nodes());
  EXPECT_EQ(list.size(), 1u);
  // Removed and added again under the same name: one entry, the new one.
  ASSERT_EQ(request(rest.port(), "POST", "/nodes",
                    R"({"name":"n2","address":"10.0.0.9:1","cores":2,"memory_mib":512})", kToken)
                .status,
            201);
  std::tie(list, generated) = nodes();
  EXPECT_EQ(list, registry_nodes());
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["address"], "10.0.0.9:1");
  EXPECT_EQ(list[1]["drained"], false);
  // /metrics is dated the same way.
  auto m = request(rest.port(), "GET", "/metrics");
  EXPECT_EQ(m.header("X-Rfaas-Generated-Ms"), "6000200") << m.headers;
}

// A fleet's node table in pages (?limit, ?after, X-Rfaas-Next-After) and one
// node by name: the pages together are GET /nodes, a changed node shows in
// the next read of either, and bad paging input or an unknown node is a
// clear error.
TEST_F(RestFixture, NodesComeInPagesAndOneByName) {
  constexpr int kNodes = 25;
  loop.call([&](Registry &r) {
    for (int i = 0; i < kNodes; ++i) {
      char name[8];
      std::snprintf(name, sizeof name, "n%02d", i);
      EXPECT_TRUE(r.register_node(name, "h:1", 4, 1024, generate_secret()).ok());
    }
    return 0;
  });
  auto whole = request(rest.port(), "GET", "/nodes", "", kReader);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.header("X-Rfaas-Next-After"), "") << "the whole table: nothing follows";
  json all = json::parse(whole.body);
  ASSERT_EQ(all.size(), static_cast<size_t>(kNodes));

  json paged = json::array();
  std::string after;
  int pages = 0;
  for (; pages < kNodes; ++pages) {
    auto r = request(rest.port(), "GET",
                     "/nodes?limit=10" + (after.empty() ? "" : "&after=" + after), "", kReader);
    ASSERT_EQ(r.status, 200) << r.body;
    json page = json::parse(r.body);
    EXPECT_LE(page.size(), 10u);
    for (const json &n : page)
      paged.push_back(n);
    after = r.header("X-Rfaas-Next-After");
    if (after.empty())
      break;
    EXPECT_EQ(after, page.back()["name"]);
  }
  EXPECT_EQ(pages, 2) << "pages of 10, 10 and 5";
  EXPECT_EQ(paged, all);
  // A page after the last name, or after a name between two: the rows that follow.
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/nodes?after=n24", "", kReader).body),
            json::array());
  json tail = json::parse(request(rest.port(), "GET", "/nodes?after=n22x", "", kReader).body);
  ASSERT_EQ(tail.size(), 2u);
  EXPECT_EQ(tail[0]["name"], "n23");

  auto one = request(rest.port(), "GET", "/nodes/n07", "", kReader);
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body), all[7]);
  EXPECT_FALSE(one.header("X-Rfaas-Generated-Ms").empty());
  now += 1000;
  ASSERT_TRUE(loop.call([&](Registry &r) { return r.heartbeat("n07"); }).ok());
  EXPECT_EQ(
      json::parse(request(rest.port(), "GET", "/nodes/n07", "", kReader).body)["last_heartbeat_ms"],
      now);
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/nodes?limit=1&after=n06", "", kReader)
                            .body)[0]["last_heartbeat_ms"],
            now);

  EXPECT_EQ(request(rest.port(), "GET", "/nodes/n99", "", kReader).status, 404);
  EXPECT_EQ(request(rest.port(), "GET", "/nodes/n07").status, 401) << "reads need a token";
  for (const char *bad : {"/nodes?limit=0", "/nodes?limit=x", "/nodes?limit=-1"}) {
    auto r = request(rest.port(), "GET", bad, "", kReader);
    EXPECT_EQ(r.status, 400) << bad;
    EXPECT_NE(r.body.find("limit"), std::string::npos) << r.body;
  }
}

// GET /leases (active) answers from the table the loop publishes: grant
// order, ?limit=, and an ended lease gone from it; ended ones still come
// from the database.
TEST_F(RestFixture, ActiveLeasesComeFromThePublishedTable) {
  NodeSecret s = generate_secret();
  std::vector<uint64_t> ids;
  std::vector<LeaseSecret> secrets;
  for (int i = 0; i < 3; ++i) {
    now += 10;
    auto g = loop.call([&](Registry &r) {
      r.register_node("n1", "h:1", 8, 4096, s);
      return r.grant({"client" + std::to_string(i), 1, 100, 0, 1, kAnonymousOwner, ""});
    });
    ASSERT_TRUE(g.ok()) << g.message;
    ids.push_back(g.value.lease.id);
    secrets.push_back(g.value.secret);
  }
  auto r = request(rest.port(), "GET", "/leases", "", kReader);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("X-Rfaas-Generated-Ms"), std::to_string(now));
  json list = json::parse(r.body);
  ASSERT_EQ(list.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(list[i]["id"], ids[i]);
    EXPECT_EQ(list[i]["client"], "client" + std::to_string(i));
    EXPECT_EQ(list[i]["state"], "active");
    EXPECT_EQ(list[i]["parts"][0]["node"], "n1");
  }
  list = json::parse(request(rest.port(), "GET", "/leases?limit=2", "", kReader).body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[1]["id"], ids[1]);

  // A renewal shows its new expiry; the order stays that of the grants.
  now += 10;
  auto renewed =
      loop.call([&](Registry &reg) { return reg.renew(ids[0], "client0", secrets[0], 5'000); });
  ASSERT_TRUE(renewed.ok()) << renewed.message;
  list = json::parse(request(rest.port(), "GET", "/leases", "", kReader).body);
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0]["id"], ids[0]);
  EXPECT_EQ(list[0]["expiry_ms"], now + 5'000);

  now += 10;
  ASSERT_TRUE(loop.call([&](Registry &reg) { return reg.revoke(ids[1]); }).ok());
  r = request(rest.port(), "GET", "/leases", "", kReader);
  EXPECT_EQ(r.header("X-Rfaas-Generated-Ms"), std::to_string(now));
  list = json::parse(r.body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["id"], ids[0]);
  EXPECT_EQ(list[1]["id"], ids[2]);
  list = json::parse(request(rest.port(), "GET", "/leases?state=revoked", "", kReader).body);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["id"], ids[1]);
}

// More active leases than one page: the cursor of X-Rfaas-Next-After walks
// them in grant order, and the pages together are the whole table; ended
// leases (from the database) take no cursor.
TEST_F(RestFixture, ActiveLeasesComeInPages) {
  NodeSecret s = generate_secret();
  constexpr int kLeases = 25;
  loop.call([&](Registry &r) {
    EXPECT_TRUE(r.register_node("n1", "h:1", 64, 65536, s).ok());
    for (int i = 0; i < kLeases; ++i) {
      now += 1;
      EXPECT_TRUE(r.grant({"client" + std::to_string(i), 1, 10, 0, 1, kAnonymousOwner, ""}).ok());
    }
    return 0;
  });
  auto whole = request(rest.port(), "GET", "/leases", "", kReader);
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.header("X-Rfaas-Next-After"), "");
  json all = json::parse(whole.body);
  ASSERT_EQ(all.size(), static_cast<size_t>(kLeases));

  json paged = json::array();
  std::string after, first_cursor;
  int pages = 1;
  for (; pages <= kLeases; ++pages) {
    auto r = request(rest.port(), "GET",
                     "/leases?limit=10" + (after.empty() ? "" : "&after=" + after), "", kReader);
    ASSERT_EQ(r.status, 200) << r.body;
    for (const json &l : json::parse(r.body))
      paged.push_back(l);
    after = r.header("X-Rfaas-Next-After");
    if (first_cursor.empty())
      first_cursor = after;
    if (after.empty())
      break;
  }
  EXPECT_EQ(pages, 3) << "pages of 10, 10 and 5";
  EXPECT_EQ(paged, all);

  ASSERT_FALSE(first_cursor.empty());
  auto ended = request(rest.port(), "GET", "/leases?state=all&after=" + first_cursor, "", kReader);
  EXPECT_EQ(ended.status, 400);
  EXPECT_NE(ended.body.find("active leases only"), std::string::npos) << ended.body;
}

TEST_F(RestFixture, AddDrainRemoveNode) {
  auto r =
      request(rest.port(), "POST", "/nodes",
              R"({"name":"n1","address":"10.0.0.1:10000","cores":4,"memory_mib":1024})", kToken);
  ASSERT_EQ(r.status, 201) << r.body;
  json n = json::parse(r.body);
  EXPECT_EQ(n["secret"].get<std::string>().size(), 64u);
  EXPECT_EQ(n["state"], "down");
  EXPECT_EQ(request(rest.port(), "POST", "/nodes",
                    R"({"name":"n1","address":"x:1","cores":4,"memory_mib":1024})", kToken)
                .status,
            409);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes", R"({"name":"n2","cores":4})", kToken).status,
            400);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes", R"({"name":"n2","adress":"x"})", kToken).status,
            400);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes", "{not json", kToken).status, 400);

  r = request(rest.port(), "POST", "/nodes/n1/drain", "", kToken);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["drained"], true);
  r = request(rest.port(), "POST", "/nodes/n1/drain", R"({"drained":false})", kToken);
  EXPECT_EQ(json::parse(r.body)["drained"], false);
  EXPECT_EQ(request(rest.port(), "POST", "/nodes/zz/drain", "", kToken).status, 404);

  auto list = json::parse(request(rest.port(), "GET", "/nodes", "", kToken).body);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_FALSE(list[0].contains("secret"));
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1", "", kToken).status, 200);
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1", "", kToken).status, 404);
}

TEST_F(RestFixture, LeasesRevokeAndAccounting) {
  NodeSecret s = generate_secret();
  auto g = loop.call([&](Registry &r) {
    r.register_node("n1", "h:1", 4, 4096, s);
    return r.grant({"alice,the \"first\"", 2, 100, 0, 1, kAnonymousOwner, ""});
  });
  ASSERT_TRUE(g.ok());
  uint64_t id = g.value.lease.id;
  auto leases = json::parse(request(rest.port(), "GET", "/leases", "", kToken).body);
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases[0]["id"].get<uint64_t>(), id);
  EXPECT_EQ(leases[0]["cores"], 2);
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1", "", kToken).status, 409);
  ASSERT_EQ(request(rest.port(), "DELETE", "/leases/" + std::to_string(id), "", kToken).status,
            200);
  EXPECT_EQ(request(rest.port(), "DELETE", "/leases/" + std::to_string(id), "", kToken).status,
            404);
  EXPECT_EQ(request(rest.port(), "DELETE", "/leases/abc", "", kToken).status, 400);
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/leases", "", kToken).body).size(), 0u);
  auto all = json::parse(request(rest.port(), "GET", "/leases?state=all", "", kToken).body);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["state"], "revoked");
  EXPECT_EQ(request(rest.port(), "GET", "/leases?state=zombie", "", kToken).status, 400);

  ASSERT_TRUE(loop.call([&](Registry &r) {
                    return r.record_accounting(
                        {id, "n1", "", 0, 1000, 400, 300, 100, true, kAnonymousOwner, ""});
                  })
                  .ok());
  auto acc = json::parse(
      request(rest.port(), "GET", "/accounting?lease=" + std::to_string(id), "", kToken).body);
  ASSERT_EQ(acc["records"].size(), 1u);
  EXPECT_EQ(acc["total"]["execution_us"], 300);
  acc = json::parse(
      request(rest.port(), "GET", "/accounting?client=alice%2Cthe%20%22first%22", "", kToken).body);
  EXPECT_EQ(acc["records"].size(), 1u) << acc.dump();
  auto csv = request(rest.port(), "GET", "/accounting.csv", "", kToken);
  ASSERT_EQ(csv.status, 200);
  EXPECT_NE(csv.headers.find("text/csv"), std::string::npos);
  EXPECT_EQ(csv.body.rfind("lease,node,client,", 0), 0u) << csv.body;
  EXPECT_NE(csv.body.find(std::to_string(id) +
                          ",n1,\"alice,the \"\"first\"\"\",5000000,1000,400,300,100,1,,"),
            std::string::npos)
      << csv.body;
  EXPECT_EQ(request(rest.port(), "GET", "/accounting?lease=1&client=x", "", kToken).status, 400);
}

TEST_F(RestFixture, MetricsInPrometheusFormat) {
  NodeSecret s = generate_secret();
  loop.call([&](Registry &r) {
    r.register_node("n1", "h:1", 2, 4096, s);
    r.grant({"a", 2, 0, 0, 1, kAnonymousOwner, ""});
    return r.grant({"b", 1, 0, 0, 1, kAnonymousOwner, ""});
  });
  request(rest.port(), "GET", "/nodes", "", kToken);
  auto m = request(rest.port(), "GET", "/metrics");
  ASSERT_EQ(m.status, 200);
  EXPECT_NE(m.headers.find("text/plain"), std::string::npos);
  for (const char *line :
       {"rfaas_rm_leases_granted_total 1\n", "rfaas_rm_leases_refused_total 1\n",
        "rfaas_rm_leases_expired_total 0\n", "rfaas_rm_leases_active 1\n",
        "rfaas_rm_nodes_registered 1\n", "rfaas_rm_nodes{state=\"up\"} 1\n",
        "# TYPE rfaas_rm_request_duration_seconds histogram\n",
        "rfaas_rm_request_duration_seconds_bucket{interface=\"http\",kind=\"read\",le=\"+Inf\"} "})
    EXPECT_NE(m.body.find(line), std::string::npos) << line << "\n" << m.body;
}

// /metrics reads what the loop published: it answers while the loop is busy
// with a long task, with the changes of the tasks before.
TEST_F(RestFixture, MetricsAnswerWhileTheLoopIsBusy) {
  loop.call([&](Registry &r) { return r.register_node("n1", "h:1", 2, 4096, generate_secret()); });
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  std::thread busy([&] {
    loop.call([&](Registry &) {
      entered.set_value();
      released.wait();
      return 0;
    });
  });
  entered.get_future().wait();
  rfaas::http::Response m;
  std::string error;
  try {
    m = request(rest.port(), "GET", "/metrics", "", "", std::chrono::seconds(3));
  } catch (const std::exception &e) {
    error = e.what();
  }
  release.set_value();
  busy.join();
  ASSERT_EQ(error, "");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("rfaas_rm_nodes_registered 1\n"), std::string::npos) << m.body;
}

TEST_F(RestFixture, ConcurrentRequestsAllReachTheLoop) {
  std::vector<std::thread> threads;
  std::atomic<int> created{0};
  for (int i = 0; i < 16; ++i)
    threads.emplace_back([&, i] {
      auto r = request(rest.port(), "POST", "/nodes",
                       R"({"name":"n)" + std::to_string(i) +
                           R"(","address":"h:1","cores":2,"memory_mib":64})",
                       kToken);
      created += r.status == 201;
      request(rest.port(), "GET", "/metrics");
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(created.load(), 16);
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/nodes", "", kToken).body).size(), 16u);
}

TEST_F(RestFixture, ForcedRemovalRevokesTheNodesLeases) {
  NodeSecret s = generate_secret();
  auto g = loop.call([&](Registry &r) {
    r.register_node("n1", "h:1", 4, 4096, s);
    return r.grant({"alice", 2, 0, 0, 1, kAnonymousOwner, ""});
  });
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1", "", kToken).status, 409);
  EXPECT_EQ(request(rest.port(), "DELETE", "/nodes/n1?force=true", "", kToken).status, 200);
  auto all = json::parse(request(rest.port(), "GET", "/leases?state=revoked", "", kToken).body);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["id"].get<uint64_t>(), g.value.lease.id);
}

// GET /pilots lists the slurm node provider's pilots, with why they ended,
// and never their secrets; it needs a token like every other list.
TEST_F(RestFixture, PilotsAreListedWithoutTheirSecrets) {
  EXPECT_EQ(json::parse(request(rest.port(), "GET", "/pilots", "", kToken).body), json::array());
  loop.call([](Registry &r) {
    PilotRecord p;
    p.id = 1;
    p.job_id = 4242;
    p.state = "ended";
    p.secret.fill(0xab);
    p.reason = "SLURM ended pilot job 4242 TIMEOUT";
    p.nodes = "node017-j4242";
    r.store().put_pilot(p);
    return 0;
  });
  EXPECT_EQ(request(rest.port(), "GET", "/pilots").status, 401);
  auto got = request(rest.port(), "GET", "/pilots", "", kReader);
  ASSERT_EQ(got.status, 200) << got.body;
  json pilots = json::parse(got.body);
  ASSERT_EQ(pilots.size(), 1u);
  EXPECT_EQ(pilots[0]["job_id"], 4242);
  EXPECT_EQ(pilots[0]["reason"], "SLURM ended pilot job 4242 TIMEOUT");
  EXPECT_EQ(pilots[0]["nodes"], "node017-j4242");
  EXPECT_EQ(got.body.find("abab"), std::string::npos);
}

// Quotas through REST: reading needs a token, changing the operator's; a
// change applies to the next request and is stored (a new registry on the
// same store, as after a restart, keeps it).
TEST_F(RestFixture, QuotasAreReadAndSetThroughRest) {
  const int p = rest.port();
  EXPECT_EQ(request(p, "GET", "/quotas").status, 401);
  EXPECT_EQ(request(p, "GET", "/quotas", "", kReader).status, 200);
  EXPECT_EQ(request(p, "PUT", "/quotas/users/1000", R"({"cores": 2})", kReader).status, 401);
  EXPECT_EQ(request(p, "PUT", "/quotas/default", R"({"cores": 1})").status, 401);
  EXPECT_EQ(request(p, "DELETE", "/quotas/users/1000", "", kReader).status, 401);

  auto bad = request(p, "PUT", "/quotas/users/1000", R"({"cpus": 2})", kToken);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("valid: cores, memory_mib, leases, requests_per_minute"),
            std::string::npos)
      << bad.body;
  EXPECT_EQ(request(p, "PUT", "/quotas/users/1000", R"({"cores": -2})", kToken).status, 400);

  auto put = request(p, "PUT", "/quotas/users/1000", R"({"cores": 2, "leases": 5})", kToken);
  ASSERT_EQ(put.status, 200) << put.body;
  json u = json::parse(put.body);
  EXPECT_EQ(u["who"], "uid 1000");
  EXPECT_EQ(u["source"], "rest");
  EXPECT_EQ(u["limits"], json::parse(R"({"cores": 2, "memory_mib": 0, "leases": 5,
                                          "requests_per_minute": 0})"));
  ASSERT_EQ(request(p, "PUT", "/quotas/default", R"({"requests_per_minute": 100})", kToken).status,
            200);
  auto alice = request(p, "PUT", "/quotas/users/alice%40login1", R"({"memory_mib": 64})", kToken);
  ASSERT_EQ(alice.status, 200) << alice.body;
  EXPECT_EQ(json::parse(alice.body)["who"], "client alice@login1");

  // Applied to the next lease request: uid 1000 may hold 2 cores.
  auto grant = [&](uint32_t cores, std::optional<uint32_t> uid) {
    return loop.call([&](Registry &r) {
      Result<Grant> g =
          r.grant(LeaseRequest{"someone", cores, 10, 0, 1, uid.value_or(kAnonymousOwner), ""});
      return Status{g.outcome, g.message};
    });
  };
  ASSERT_TRUE(loop.call(
      [](Registry &r) { return r.register_node("n1", "h:1", 8, 4096, generate_secret()).ok(); }));
  Status refused = grant(3, 1000u);
  EXPECT_EQ(refused.outcome, Outcome::QuotaExceeded);
  EXPECT_EQ(refused.message,
            "quota exceeded: cores 0 of 2 in use for uid 1000; this request asks for 3 more");
  json usage = json::parse(request(p, "GET", "/quotas/users/1000", "", kReader).body);
  EXPECT_EQ(usage["usage"]["requests_last_minute"], 1) << usage.dump();
  EXPECT_EQ(usage["limits"]["requests_per_minute"], 100) << usage.dump();

  json all = json::parse(request(p, "GET", "/quotas", "", kToken).body);
  EXPECT_EQ(all["default_source"], "rest");
  EXPECT_EQ(all["users"].size(), 2u) << all.dump();
  // Stored: a registry opened on the same store (a restart) has them.
  Registry again{store, [this] { return now; }, RegistryOptions{}};
  EXPECT_EQ(*again.quotas().effective(QuotaUser{1000u, ""}).cores, 2u);
  EXPECT_EQ(*again.quotas().effective(QuotaUser{std::nullopt, "x"}).requests_per_minute, 100u);

  EXPECT_EQ(request(p, "DELETE", "/quotas/users/1000", "", kToken).status, 200);
  EXPECT_EQ(request(p, "DELETE", "/quotas/users/1000", "", kToken).status, 404);
  json after = json::parse(request(p, "GET", "/quotas/users/1000", "", kToken).body);
  EXPECT_EQ(after["source"], "default");
  EXPECT_EQ(after["limits"]["cores"], 0);
  EXPECT_EQ(grant(3, 1000u).outcome, Outcome::Ok);
}

// ---- connections ----------------------------------------------------------------

namespace {

/// Sends `raw` on a new connection and reads until the server closes it (at
/// most `wait`): what came, and whether the server closed.
std::pair<std::string, bool> raw_exchange(uint16_t port, const std::string &raw,
                                          std::chrono::milliseconds wait) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0) {
    if (fd >= 0)
      close(fd);
    return {"connect failed", false};
  }
  (void)!send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string in;
  bool closed = false;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0)
      break;
    char buf[4096];
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      closed = true;
      break;
    }
    in.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return {in, closed};
}

/// Polls `cond` until it holds or 5 s passed.
template <class F> bool eventually(F cond) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

} // namespace

// HTTP/1.1 keeps the connection by default (pistache 0.0.5 alone answers
// "Connection: Close" and keeps it open anyway).
TEST_F(RestFixture, ConnectionsAreKeptAlive) {
  rfaas::http::Client c("127.0.0.1", rest.port());
  c.set_token(kToken);
  for (int i = 0; i < 50; ++i) {
    for (const char *path : {"/health", "/nodes", "/metrics", "/nope"}) {
      auto r = c.get(path);
      ASSERT_EQ(r.status, std::string(path) == "/nope" ? 404 : 200) << path << ": " << r.body;
      ASSERT_TRUE(r.keep_alive) << path << ": " << r.headers;
    }
  }
  EXPECT_EQ(c.connections_opened(), 1u);
  EXPECT_EQ(rest.open_connections(), 1u);
}

// "Connection: close", and HTTP/1.0 without keep-alive: the answer says close
// and the server closes once it is out.
TEST_F(RestFixture, ConnectionsThatAskForCloseAreClosed) {
  for (const std::string req : {"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                                "GET /health HTTP/1.0\r\n\r\n",
                                "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"}) {
    auto [in, closed] = raw_exchange(rest.port(), req, std::chrono::seconds(5));
    EXPECT_TRUE(closed) << req << " -> " << in;
    EXPECT_NE(in.find("Connection: Close"), std::string::npos) << in;
    const bool missing = req.find("nope") != std::string::npos;
    EXPECT_NE(in.find(missing ? "404" : "\"status\":\"ok\""), std::string::npos) << in;
  }
  // HTTP/1.0 that asks for keep-alive gets it.
  auto [in, closed] =
      raw_exchange(rest.port(), "GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
                   std::chrono::milliseconds(300));
  EXPECT_FALSE(closed) << in;
  EXPECT_NE(in.find("Connection: Keep-Alive"), std::string::npos) << in;
}

// Over http.max_connections a connection gets a 503 and is closed; a slot
// freed by a client that leaves is taken by the next.
TEST_F(RestFixture, ConnectionsOverTheLimitAreRefused) {
  RestServer small{loop, RestAccess{kToken, kReader, true, true}};
  small.start("127.0.0.1", 0, 2, RestConnectionLimits{2, std::chrono::seconds(60)});
  rfaas::http::Client a("127.0.0.1", small.port()), b("127.0.0.1", small.port()),
      c("127.0.0.1", small.port());
  ASSERT_EQ(a.get("/health").status, 200);
  ASSERT_EQ(b.get("/health").status, 200);
  auto refused = c.get("/health");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_NE(refused.body.find("http.max_connections"), std::string::npos) << refused.body;
  EXPECT_FALSE(refused.keep_alive);
  EXPECT_EQ(small.refused_connections(), 1u);
  a.disconnect();
  ASSERT_TRUE(eventually([&] { return small.open_connections() < 2; }));
  EXPECT_EQ(c.get("/health").status, 200);
  EXPECT_EQ(b.get("/health").status, 200); // still kept alive
  EXPECT_EQ(b.connections_opened(), 1u);
  small.stop();
}

// A connection silent for the idle timeout is closed (and no longer counted);
// the client's next GET goes on a new one.
TEST_F(RestFixture, IdleConnectionsAreClosed) {
  RestServer quick{loop, RestAccess{kToken, kReader, true, true}};
  quick.start("127.0.0.1", 0, 1, RestConnectionLimits{16, std::chrono::seconds(1)});
  rfaas::http::Client c("127.0.0.1", quick.port());
  ASSERT_EQ(c.get("/health").status, 200);
  EXPECT_EQ(quick.open_connections(), 1u);
  ASSERT_TRUE(eventually([&] { return quick.open_connections() == 0; }));
  EXPECT_EQ(c.get("/health").status, 200);
  EXPECT_EQ(c.connections_opened(), 2u);
  quick.stop();
}
