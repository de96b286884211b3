// The SQLite store: schema version, WAL, and a close/reopen restores nodes,
// leases and accounting.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <thread>

#include <cstdlib>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <set>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include "resource_manager/store.hpp"

#include <sqlite3.h>

using namespace rfaas::rm;

namespace {

struct TempDb {
  std::string path;
  TempDb() {
    char dir[] = "/tmp/rfaas-rm-store-XXXXXX";
    path = std::string(mkdtemp(dir)) + "/rm.sqlite";
  }
  ~TempDb() { std::filesystem::remove_all(std::filesystem::path(path).parent_path()); }
};

Node node(const std::string &name) {
  Node n;
  n.name = name;
  n.address = "10.0.0.1:10000";
  n.cores = 8;
  n.memory_mib = 16384;
  n.secret = generate_secret();
  n.state = NodeState::Up;
  n.registered_ms = 5;
  n.last_heartbeat_ms = 6;
  return n;
}

/// Bytes of the grant journal at `path` up to its last one that is not
/// zero: its records (the file's allocation beyond them is zeros).
uintmax_t journal_bytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t end = data.size();
  while (end > 0 && data[end - 1] == 0)
    --end;
  return end;
}

Lease lease(uint64_t id) {
  Lease l;
  l.id = id;
  l.client = "alice";
  l.granted_ms = 100;
  l.expiry_ms = 200;
  l.tokens_until_ms = 250; // granted until 250, then renewed shorter
  l.parts = {{"n1", {0, 1, 2}, 300}, {"n2", {5}, 100}};
  return l;
}

} // namespace

TEST(Store, FreshFileHasCurrentSchemaInWalMode) {
  TempDb db;
  Store s(db.path);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  EXPECT_EQ(s.journal_mode(), "wal");
}

TEST(Store, ReopenRestoresEverything) {
  TempDb db;
  Node n1 = node("n1");
  uint64_t big_id = (1ull << 62) + 12345;
  {
    Store s(db.path);
    s.put_node(n1);
    s.put_node(node("n2"));
    Lease owned = lease(big_id);
    owned.owner_uid = 1000;
    owned.job_id = "4242";
    s.put_lease(owned);
    Lease ended = lease(7);
    ended.state = LeaseState::Expired;
    ended.ended_ms = 210;
    s.put_lease(ended);
    s.put_accounting({big_id, "n1", "alice", 150, 10, 20, 30, 300, false, 1000u, "4242"});
    // supersedes:
    s.put_accounting({big_id, "n1", "alice", 190, 11, 21, 31, 300, true, 1000u, "4242"});
    s.put_accounting({7, "n2", "bob", 190, 1, 2, 3, 4, true, kAnonymousOwner, ""});
  }
  Store s(db.path);
  auto nodes = s.load_nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].name, "n1");
  EXPECT_EQ(nodes[0].secret, n1.secret);
  EXPECT_EQ(nodes[0].cores, 8u);
  EXPECT_EQ(nodes[0].state, NodeState::Up);
  EXPECT_EQ(nodes[0].last_heartbeat_ms, 6u);

  auto active = s.load_leases(LeaseState::Active);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].id, big_id);
  EXPECT_EQ(active[0].client, "alice");
  EXPECT_EQ(active[0].owner_uid, 1000u);
  EXPECT_EQ(active[0].job_id, "4242");
  EXPECT_EQ(active[0].tokens_until_ms, 250u);
  ASSERT_EQ(active[0].parts.size(), 2u);
  EXPECT_EQ(active[0].parts[0].cores, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(active[0].parts[1].node, "n2");
  EXPECT_EQ(active[0].parts[1].memory_mib, 100u);
  EXPECT_EQ(s.load_leases().size(), 2u);
  auto ended = s.load_lease(7);
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->state, LeaseState::Expired);
  EXPECT_EQ(ended->ended_ms, 210u);
  EXPECT_EQ(ended->owner_uid, kAnonymousOwner); // unknown stays unknown, not uid 0
  EXPECT_EQ(ended->job_id, "");
  EXPECT_FALSE(s.load_lease(8));

  auto acc = s.accounting_for_lease(big_id);
  ASSERT_EQ(acc.size(), 1u);
  EXPECT_EQ(acc[0].execution_us, 31u);
  EXPECT_TRUE(acc[0].final);
  EXPECT_EQ(acc[0].owner_uid, 1000u);
  EXPECT_EQ(acc[0].job_id, "4242");
  ASSERT_EQ(s.accounting_for_client("bob").size(), 1u);
  EXPECT_EQ(s.accounting_for_client("bob")[0].owner_uid, kAnonymousOwner);
  EXPECT_EQ(s.all_accounting().size(), 2u);
}

TEST(Store, QuotasSetThroughRestSurviveAReopen) {
  TempDb db;
  {
    Store s(db.path);
    s.put_quota("", QuotaLimits{8, std::nullopt, 4, 60});
    s.put_quota("1000", QuotaLimits{2, 512, std::nullopt, std::nullopt});
    s.put_quota("bob@h", QuotaLimits{1, 1, 1, 1});
    s.remove_quota("bob@h");
  }
  Store s(db.path);
  auto q = s.load_quotas();
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].first, "");
  EXPECT_EQ(q[0].second, (QuotaLimits{8, std::nullopt, 4, 60}));
  EXPECT_EQ(q[1].first, "1000");
  EXPECT_EQ(q[1].second, (QuotaLimits{2, 512, std::nullopt, std::nullopt}));
}

TEST(Store, RemovedNodeStaysRemoved) {
  TempDb db;
  {
    Store s(db.path);
    s.put_node(node("n1"));
    s.remove_node("n1");
  }
  EXPECT_TRUE(Store(db.path).load_nodes().empty());
}

TEST(Store, NewerSchemaIsRefusedWithAClearError) {
  TempDb db;
  { Store s(db.path); }
  sqlite3 *raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version=99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  try {
    Store s(db.path);
    FAIL() << "opened a database of schema 99";
  } catch (const StoreError &e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
}

// What runs per node registration (its ended leases) and the retention
// prune go through indexes, not scans of the whole history (a fleet of
// 10,000 nodes re-registering after a restart, or a year of leases).
TEST(Store, PerNodeAndRetentionQueriesUseIndexes) {
  TempDb db;
  { Store s(db.path); }
  sqlite3 *raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path.c_str(), &raw), SQLITE_OK);
  auto plan = [raw](const std::string &sql) {
    std::string out;
    sqlite3_stmt *st = nullptr;
    if (sqlite3_prepare_v2(raw, ("EXPLAIN QUERY PLAN " + sql).c_str(), -1, &st, nullptr) !=
        SQLITE_OK)
      return std::string("cannot prepare: ") + sqlite3_errmsg(raw);
    while (sqlite3_step(st) == SQLITE_ROW)
      out += std::string(reinterpret_cast<const char *>(sqlite3_column_text(st, 3))) + "; ";
    sqlite3_finalize(st);
    return out;
  };
  const std::string ended = plan("SELECT id FROM leases WHERE state != 'active' AND expiry_ms > 0 "
                                 "AND id IN (SELECT lease_id FROM lease_parts WHERE node = 'n1')");
  EXPECT_NE(ended.find("lease_parts_node"), std::string::npos) << ended;
  const std::string leases = plan("DELETE FROM leases WHERE state != 'active' AND ended_ms < 5");
  EXPECT_NE(leases.find("leases_ended"), std::string::npos) << leases;
  const std::string acc = plan("DELETE FROM accounting WHERE reported_ms < 5 AND lease_id NOT IN "
                               "(SELECT id FROM leases WHERE state = 'active')");
  EXPECT_NE(acc.find("accounting_reported"), std::string::npos) << acc;
  // The restart's load of the active leases reads the partial index, not
  // the history.
  const std::string active = plan("SELECT id FROM leases WHERE state = 'active'");
  EXPECT_NE(active.find("leases_active"), std::string::npos) << active;
  sqlite3_close(raw);
}

// A node's ended leases, and any list of leases, come in one statement
// with their parts, not one more per lease (a registration after a restart
// of a node that had thousands of leases).
TEST(Store, LeaseQueriesAreOneStatementWhateverTheCount) {
  Store s(":memory:");
  for (uint64_t id = 1; id <= 60; ++id) {
    Lease l = lease(id);
    l.granted_ms = 100 + id;
    l.expiry_ms = id % 3 == 0 ? 150 : 1'000; // a third expired by 500
    l.state = id % 2 == 0 ? LeaseState::Released : LeaseState::Active;
    if (id % 5 == 0)
      l.parts = {{"n3", {4}, 10}}; // not on n1
    if (id == 7)
      l.parts.clear(); // a lease without parts still loads
    s.put_lease(l);
  }
  uint64_t before = s.statements_run();
  auto ended = s.ended_unexpired_on("n1", 500);
  EXPECT_EQ(s.statements_run() - before, 1u);
  std::vector<uint64_t> want;
  for (uint64_t id = 60; id >= 1; --id)
    if (id % 2 == 0 && id % 3 != 0 && id % 5 != 0)
      want.push_back(id);
  ASSERT_EQ(ended.size(), want.size());
  for (size_t i = 0; i < ended.size(); ++i) {
    EXPECT_EQ(ended[i].id, want[i]);
    EXPECT_EQ(ended[i].state, LeaseState::Released);
    ASSERT_EQ(ended[i].parts.size(), 2u);
    EXPECT_EQ(ended[i].parts[0].node, "n1");
    EXPECT_EQ(ended[i].parts[0].cores, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_EQ(ended[i].parts[1].node, "n2");
    EXPECT_EQ(ended[i].parts[1].memory_mib, 100u);
  }
  before = s.statements_run();
  auto active = s.load_leases(LeaseState::Active);
  EXPECT_EQ(s.statements_run() - before, 1u);
  ASSERT_EQ(active.size(), 30u);
  EXPECT_EQ(active.front().id, 59u); // newest first
  for (const Lease &l : active)
    EXPECT_EQ(l.parts.size(), l.id == 7 ? 0u : l.id % 5 == 0 ? 1u : 2u) << l.id;
  auto newest = s.load_leases(std::nullopt, 4);
  ASSERT_EQ(newest.size(), 4u); // the limit counts leases, not parts
  EXPECT_EQ(newest.back().id, 57u);
  EXPECT_EQ(newest.back().parts.size(), 2u);
  before = s.statements_run();
  auto one = s.load_lease(10);
  EXPECT_EQ(s.statements_run() - before, 1u);
  ASSERT_TRUE(one);
  ASSERT_EQ(one->parts.size(), 1u);
  EXPECT_EQ(one->parts[0].node, "n3");
  EXPECT_FALSE(s.load_lease(999));
}

TEST(Store, UnopenablePathNamesTheFile) {
  try {
    Store s("/nonexistent-dir/rm.sqlite");
    FAIL();
  } catch (const StoreError &e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/rm.sqlite"), std::string::npos);
  }
}

// The database holds node secrets: 0600 whatever the umask, also its WAL and
// shared-memory files, and an existing file readable by others is narrowed.
TEST(Store, FilesAreCreatedOwnerOnlyWhateverTheUmask) {
  char dir[] = "/tmp/rfaas-rm-store-mode-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  const mode_t old = umask(0);
  auto mode = [](const std::string &f) {
    struct stat st {};
    return stat(f.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 0777) : -1;
  };
  {
    Store s(d + "/rm.sqlite");
    s.put_node(Node{"n", "h:1", 1, 1, NodeSecret{}, NodeState::Down, false, 0, 0, 0});
    EXPECT_EQ(mode(d + "/rm.sqlite"), 0600);
    EXPECT_EQ(mode(d + "/rm.sqlite-wal"), 0600);
    EXPECT_EQ(mode(d + "/rm.sqlite-shm"), 0600);
  }
  ASSERT_EQ(chmod((d + "/rm.sqlite").c_str(), 0644), 0);
  { Store again(d + "/rm.sqlite"); }
  EXPECT_EQ(mode(d + "/rm.sqlite"), 0600);
  umask(old);
  std::system(("rm -rf '" + d + "'").c_str());
}

namespace {

/// Whether another connection (another process's view: what survives a
/// crash of this one) sees an accounting record of `lease`.
bool committed_accounting(const std::string &path, uint64_t lease) {
  sqlite3 *raw = nullptr;
  if (sqlite3_open(path.c_str(), &raw) != SQLITE_OK)
    return false;
  sqlite3_stmt *st = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(raw, "SELECT 1 FROM accounting WHERE lease_id = ?1", -1, &st, nullptr) ==
      SQLITE_OK) {
    sqlite3_bind_int64(st, 1, static_cast<int64_t>(lease));
    found = sqlite3_step(st) == SQLITE_ROW;
  }
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return found;
}

AccountingRecord report(uint64_t lease) {
  return AccountingRecord{lease, "n1", "alice", 10, 1, 2, 3, 64, true, 7, ""};
}

/// Whether another connection sees lease `id` in `state`.
bool committed_lease(const std::string &path, uint64_t id, const char *state = "active") {
  sqlite3 *raw = nullptr;
  if (sqlite3_open(path.c_str(), &raw) != SQLITE_OK)
    return false;
  sqlite3_stmt *st = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(raw, "SELECT state FROM leases WHERE id = ?1", -1, &st, nullptr) ==
      SQLITE_OK) {
    sqlite3_bind_int64(st, 1, static_cast<int64_t>(id));
    found = sqlite3_step(st) == SQLITE_ROW &&
            std::string(reinterpret_cast<const char *>(sqlite3_column_text(st, 0))) == state;
  }
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return found;
}

} // namespace

// A batch holding only accounting and lease writes waits for the next
// commit (the leases' records are in the grant journal); a batch with any
// other write commits it along, and so do commit_deferred() and a write
// outside a batch.
TEST(Store, AccountingAndLeasesWaitForTheNextCommitNodesNever) {
  TempDb db;
  Store s(db.path);
  ASSERT_EQ(s.grants_path(), db.path + "-grants");
  s.put_lease(lease(1));
  s.put_lease(lease(2));
  s.begin_batch();
  s.put_accounting(report(1));
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_FALSE(committed_accounting(db.path, 1)) << "an accounting-only batch was committed";
  // This connection sees it already (REST reads go through it).
  EXPECT_EQ(s.accounting_for_lease(1).size(), 1u);

  s.begin_batch();
  Lease l = lease(3);
  s.put_lease(l);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_FALSE(committed_lease(db.path, 3)) << "a lease's batch was committed";
  EXPECT_GT(journal_bytes(s.grants_path()), 0u) << "the journal has no record";
  EXPECT_TRUE(s.load_lease(3).has_value());

  s.begin_batch();
  s.put_node(node("n1"));
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_TRUE(committed_accounting(db.path, 1)) << "a node's batch left accounting behind";
  EXPECT_TRUE(committed_lease(db.path, 3)) << "a node's batch left a lease behind";
  EXPECT_EQ(journal_bytes(s.grants_path()), 0u) << "a commit left the journal full";

  s.begin_batch();
  s.put_accounting(report(2));
  s.commit_batch();
  EXPECT_FALSE(committed_accounting(db.path, 2));
  s.begin_batch(); // a pass that writes nothing: still waiting
  s.commit_batch();
  EXPECT_FALSE(committed_accounting(db.path, 2));
  ASSERT_TRUE(s.commit_due().has_value());
  s.commit_deferred(); // the loop stops
  EXPECT_TRUE(committed_accounting(db.path, 2)) << "commit_deferred() did not commit";
  EXPECT_FALSE(s.commit_due().has_value());

  s.begin_batch();
  s.put_accounting(report(3));
  s.commit_batch();
  l.state = LeaseState::Released;
  l.ended_ms = 150;
  s.update_lease(l); // outside a batch: commits at once, the waiting record too
  EXPECT_TRUE(committed_accounting(db.path, 3));
  EXPECT_TRUE(committed_lease(db.path, 3, "released"));

  // commit_if_due() commits once the oldest waiting write is
  // kDeferAtMostMs old, not before.
  s.begin_batch();
  l.state = LeaseState::Revoked;
  s.update_lease(l);
  s.commit_batch();
  s.commit_if_due();
  EXPECT_FALSE(committed_lease(db.path, 3, "revoked")) << "committed before its deadline";
  std::this_thread::sleep_until(*s.commit_due());
  s.commit_if_due();
  EXPECT_TRUE(committed_lease(db.path, 3, "revoked")) << "not committed at its deadline";

  // Closing keeps what waits (a clean stop loses nothing).
  s.begin_batch();
  s.put_accounting(report(4));
  s.commit_batch();
}

TEST(Store, AccountingLeftWaitingIsKeptWhenTheStoreCloses) {
  TempDb db;
  {
    Store s(db.path);
    s.put_lease(lease(4));
    s.begin_batch();
    s.put_accounting(report(4));
    s.commit_batch();
    EXPECT_FALSE(committed_accounting(db.path, 4));
  }
  EXPECT_TRUE(committed_accounting(db.path, 4));
}

// A final record is the last word: a later report for the same lease and
// node (a node told of the end again after a restart) leaves it.
TEST(Store, AFinalAccountingRecordIsNotOverwritten) {
  Store s(":memory:");
  AccountingRecord first = report(9);
  s.put_accounting(first);
  AccountingRecord again = report(9);
  again.execution_us = 0;
  s.put_accounting(again);
  auto v = s.accounting_for_lease(9);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].execution_us, 3u);
  AccountingRecord interim = report(10);
  interim.final = false;
  s.put_accounting(interim);
  interim.execution_us = 99;
  interim.final = true;
  s.put_accounting(interim);
  v = s.accounting_for_lease(10);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].execution_us, 99u);
}

// A file of schema 4 (written by the previous release) opens with its
// leases, parts and accounting intact.
TEST(Store, MigratesASchema4File) {
  TempDb db;
  sqlite3 *raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.path.c_str(), &raw), SQLITE_OK);
  const char *v4 =
      "CREATE TABLE nodes (name TEXT PRIMARY KEY, address TEXT NOT NULL, cores INTEGER NOT NULL,"
      " memory_mib INTEGER NOT NULL, secret BLOB NOT NULL, state TEXT NOT NULL,"
      " drained INTEGER NOT NULL, registered_ms INTEGER NOT NULL,"
      " last_heartbeat_ms INTEGER NOT NULL, registration_signed_ms INTEGER NOT NULL DEFAULT 0);"
      "CREATE TABLE leases (id INTEGER PRIMARY KEY, client TEXT NOT NULL, state TEXT NOT NULL,"
      " granted_ms INTEGER NOT NULL, expiry_ms INTEGER NOT NULL, ended_ms INTEGER NOT NULL,"
      " secret_hash BLOB NOT NULL DEFAULT x'', owner_uid INTEGER NOT NULL DEFAULT 4294967295,"
      " job_id TEXT NOT NULL DEFAULT '');"
      "CREATE INDEX leases_state ON leases(state);"
      "CREATE TABLE lease_parts (lease_id INTEGER NOT NULL REFERENCES leases(id) ON DELETE "
      " CASCADE, idx INTEGER NOT NULL, node TEXT NOT NULL, cores TEXT NOT NULL,"
      " memory_mib INTEGER NOT NULL, PRIMARY KEY (lease_id, idx));"
      "CREATE TABLE accounting (lease_id INTEGER NOT NULL, node TEXT NOT NULL,"
      " client TEXT NOT NULL, reported_ms INTEGER NOT NULL, allocation_us INTEGER NOT NULL,"
      " hot_polling_us INTEGER NOT NULL, execution_us INTEGER NOT NULL,"
      " memory_mib INTEGER NOT NULL, final INTEGER NOT NULL,"
      " owner_uid INTEGER NOT NULL DEFAULT 4294967295, job_id TEXT NOT NULL DEFAULT '',"
      " PRIMARY KEY (lease_id, node));"
      "CREATE INDEX accounting_client ON accounting(client);"
      "CREATE TABLE quotas (user TEXT PRIMARY KEY, cores INTEGER, memory_mib INTEGER,"
      " leases INTEGER, requests_per_minute INTEGER);"
      "CREATE INDEX lease_parts_node ON lease_parts(node);"
      "CREATE INDEX leases_ended ON leases(ended_ms);"
      "CREATE INDEX accounting_reported ON accounting(reported_ms);"
      "INSERT INTO leases (id, client, state, granted_ms, expiry_ms, ended_ms) VALUES"
      " (1, 'alice', 'active', 100, 900, 0), (2, 'bob', 'released', 100, 900, 150);"
      "INSERT INTO lease_parts VALUES (1, 0, 'n1', '0,1', 64), (1, 1, 'n2', '3', 32),"
      " (2, 0, 'n1', '2', 16);"
      "INSERT INTO accounting (lease_id, node, client, reported_ms, allocation_us,"
      " hot_polling_us, execution_us, memory_mib, final) VALUES"
      " (2, 'n1', 'bob', 160, 1, 2, 3, 16, 1);"
      "PRAGMA user_version=4;";
  ASSERT_EQ(sqlite3_exec(raw, v4, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
  sqlite3_close(raw);

  Store s(db.path);
  EXPECT_EQ(s.schema_version(), Store::kSchemaVersion);
  auto active = s.load_leases(LeaseState::Active);
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].id, 1u);
  EXPECT_EQ(active[0].tokens_until_ms, 0u) << "granted before it was kept: not known";
  ASSERT_EQ(active[0].parts.size(), 2u);
  EXPECT_EQ(active[0].parts[1].node, "n2");
  EXPECT_EQ(active[0].parts[0].cores, (std::vector<uint32_t>{0, 1}));
  auto released = s.load_leases(LeaseState::Released);
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].client, "bob");
  auto acc = s.accounting_for_lease(2);
  ASSERT_EQ(acc.size(), 1u);
  EXPECT_TRUE(acc[0].final);
  EXPECT_EQ(acc[0].owner_uid, 4294967295u);
  // The parts still go with their lease.
  EXPECT_EQ(s.prune_history(1000), (std::pair<size_t, size_t>{1, 1}));
  EXPECT_FALSE(s.load_lease(2));
  EXPECT_TRUE(s.load_lease(1));
}

namespace {
uint64_t file_size(const std::string &path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : n;
}
} // namespace

// Lease churn (grant, release, one commit each, as the loop makes them)
// with a small checkpoint policy: the thread checkpoints, the log is reset
// and truncated instead of growing with the churn, and closing the store
// copies the log back and removes it.
TEST(Store, TheLogStaysBoundedUnderChurnAndGoesAtClose) {
  TempDb db;
  CheckpointPolicy policy;
  policy.start_pages = 64;
  policy.writer_pages = 1024;
  policy.keep_bytes = 128 << 10;
  const uint64_t page = 4096 + 24; // a frame: page and header
  uint64_t largest = 0;
  {
    Store s(db.path, policy);
    for (uint64_t id = 1; id <= 3000; ++id) {
      Lease l = lease(id * 7919 % 100003); // ids spread over the table, as random ones
      s.begin_batch();
      s.put_lease(l);
      ASSERT_TRUE(s.commit_batch().empty());
      l.state = LeaseState::Released;
      l.ended_ms = 150 + id;
      s.begin_batch();
      s.update_lease(l);
      ASSERT_TRUE(s.commit_batch().empty());
      largest = std::max(largest, file_size(db.path + "-wal"));
    }
    EXPECT_GT(s.checkpoints(), 0u) << "the thread never checkpointed";
    // Without checkpoints the log holds every commit: ~8 frames per lease.
    EXPECT_LE(largest, (policy.writer_pages + 64) * page) << "the log grew past the writer's bound";
    EXPECT_EQ(s.load_leases(LeaseState::Released).size(), 3000u);
  }
  EXPECT_FALSE(std::filesystem::exists(db.path + "-wal")) << "closing left the log behind";
  Store again(db.path);
  EXPECT_EQ(again.load_leases(LeaseState::Released).size(), 3000u);
}

// ---- the grant journal -------------------------------------------------------------

namespace {

/// A journal file holding `records` (written as the store writes them).
void write_journal(const std::string &path, const std::string &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
  std::fclose(f);
}

std::string read_file(const std::string &path) {
  std::string out;
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
    out.append(buf, n);
  std::fclose(f);
  return out;
}

/// What the "resource_manager" logger says while it lives.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> logger;
  CapturedLog() {
    spdlog::drop("resource_manager");
    logger = std::make_shared<spdlog::logger>(
        "resource_manager", std::make_shared<spdlog::sinks::ostream_sink_mt>(text));
    spdlog::register_logger(logger);
  }
  ~CapturedLog() { spdlog::drop("resource_manager"); }
};

/// Runs `body` in a child process, which then sends the byte `body`
/// returned and waits to be killed with SIGKILL, as a crash would end it
/// (a Store that must not close is left allocated by `body`). Returns that
/// byte, or -1 when the child sent none (it died first).
int byte_from_killed_child(const std::function<char()> &body) {
  int ready[2];
  if (pipe(ready) != 0)
    return -1;
  const pid_t child = fork();
  if (child < 0)
    return -1;
  if (child == 0) {
    close(ready[0]);
    const char said = body();
    if (write(ready[1], &said, 1) != 1)
      _exit(4);
    for (;;)
      pause();
  }
  close(ready[1]);
  char said = 0;
  const bool got = read(ready[0], &said, 1) == 1;
  close(ready[0]);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  return got ? said : -1;
}

} // namespace

// A lease write whose answer left runs its SQL later (apply_pending): a
// release in a later pass folds into the grant's waiting write, so the
// database gets one row write with the final state; a change within the
// grant's own pass does not fold (the grant may still be withdrawn alone).
// Every read and every other write runs the waiting ones first.
TEST(Store, ALeaseReleasedBeforeItsWriteRanIsWrittenOnce) {
  TempDb db;
  Store s(db.path);
  s.begin_batch();
  Lease a = lease(7);
  s.put_lease(a, true);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_EQ(s.pending_writes(), 1u) << "the grant's SQL ran on its path";
  EXPECT_EQ(s.apply_pending(10, std::chrono::hours(1)), 0u) << "a young write ran";

  const uint64_t before = s.statements_run();
  s.begin_batch();
  a.state = LeaseState::Released;
  a.ended_ms = 150;
  s.update_lease(a);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_EQ(s.pending_writes(), 1u) << "the release did not fold into the grant's write";
  EXPECT_EQ(s.statements_run(), before) << "the release ran SQL on its path";

  s.begin_batch();
  Lease b = lease(8);
  s.put_lease(b, true);
  b.state = LeaseState::Revoked;
  b.ended_ms = 160;
  s.update_lease(b);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_EQ(s.pending_writes(), 3u) << "a change folded into a grant of its own pass";

  EXPECT_EQ(s.apply_pending(1), 1u);
  EXPECT_EQ(s.pending_writes(), 2u);
  // A read runs the rest first.
  auto seven = s.load_lease(7);
  EXPECT_EQ(s.pending_writes(), 0u);
  ASSERT_TRUE(seven.has_value());
  EXPECT_EQ(seven->state, LeaseState::Released);
  EXPECT_EQ(seven->ended_ms, 150u);
  EXPECT_EQ(seven->parts.size(), 2u);
  auto eight = s.load_lease(8);
  ASSERT_TRUE(eight.has_value());
  EXPECT_EQ(eight->state, LeaseState::Revoked);
  EXPECT_EQ(eight->parts.size(), 2u);

  // Committed when due, the journal emptied; a reopened file has both.
  s.commit_deferred();
  EXPECT_TRUE(committed_lease(db.path, 7, "released"));
  EXPECT_TRUE(committed_lease(db.path, 8, "revoked"));
  EXPECT_EQ(journal_bytes(s.grants_path()), 0u);
}

// A write waiting for its SQL counts toward the commit's deadline, and a
// write outside a batch runs it first, so the order of writes holds.
TEST(Store, AWaitingLeaseWriteIsDueAndKeepsItsOrder) {
  TempDb db;
  Store s(db.path);
  s.begin_batch();
  Lease l = lease(9);
  s.put_lease(l, true);
  s.commit_batch();
  ASSERT_TRUE(s.commit_due().has_value()) << "a waiting write has no deadline";
  EXPECT_LE(*s.commit_due(),
            std::chrono::steady_clock::now() + std::chrono::milliseconds(Store::kDeferAtMostMs));
  l.state = LeaseState::Released;
  l.ended_ms = 170;
  s.update_lease(l); // outside a batch: at once, after the grant's write
  EXPECT_EQ(s.pending_writes(), 0u);
  EXPECT_TRUE(committed_lease(db.path, 9, "released"));
  EXPECT_FALSE(s.commit_due().has_value());
}

// The journal's file is allocated ahead and its records copied into a
// mapping: the zeros after them are no record and nothing torn, a record
// that ends in zero bytes is not cut there, and a journal opened again adds
// right after its last record.
TEST(GrantJournal, RecordsFollowEachOtherAcrossReopensOfTheAllocatedFile) {
  TempDb db;
  const std::string path = db.path + "-grants";
  Lease zero_tail = lease(1);
  zero_tail.parts = {{"n1", {0}, 0}}; // its record ends in zero bytes
  zero_tail.tokens_until_ms = 0;
  {
    GrantJournal j(path);
    j.add(1, GrantJournal::Kind::Put, zero_tail);
    std::string why;
    ASSERT_TRUE(j.flush(why)) << why;
    EXPECT_GT(std::filesystem::file_size(path), j.file_bytes()) << "no allocation ahead";
  }
  {
    GrantJournal j(path);
    EXPECT_EQ(j.file_bytes(), GrantJournal::encode(1, GrantJournal::Kind::Put, zero_tail).size());
    j.add(2, GrantJournal::Kind::Put, lease(2));
    std::string why;
    ASSERT_TRUE(j.flush(why)) << why;
  }
  GrantJournal j(path);
  GrantJournal::Contents c = j.read();
  EXPECT_EQ(c.torn_bytes, 0u);
  ASSERT_EQ(c.records.size(), 2u);
  EXPECT_EQ(c.records[0].lease.parts.at(0).cores, (std::vector<uint32_t>{0}));
  EXPECT_EQ(c.records[1].lease.id, 2u);
  std::string why;
  ASSERT_TRUE(j.truncate(why)) << why;
  EXPECT_EQ(journal_bytes(path), 0u);
  EXPECT_TRUE(GrantJournal(path).read().records.empty());
}

// Lease writes that wait for their commit survive the death of the process
// that made them (killed, its Store never destroyed): the journal holds
// them, and the next Store applies them once.
TEST(Store, JournaledGrantsSurviveAProcessKilledBeforeItsCommit) {
  TempDb db;
  { Store create(db.path); }
  // Killed within the deadline of its commit.
  const int said = byte_from_killed_child([&] {
    Store &s = *new Store(db.path); // never closed: the child is killed
    s.begin_batch();
    for (uint64_t id = 1; id <= 5; ++id)
      s.put_lease(lease(id));
    if (!s.commit_batch().empty())
      return '3';
    Lease ended = lease(2);
    ended.state = LeaseState::Released;
    ended.ended_ms = 150;
    s.begin_batch();
    s.update_lease(ended);
    return s.commit_batch().empty() ? '1' : '3';
  });
  ASSERT_EQ(said, '1') << "the child failed before its writes were made";

  // Not committed: only the journal has them.
  EXPECT_FALSE(committed_lease(db.path, 1)) << "the child committed: the case tests nothing";
  EXPECT_GT(journal_bytes(db.path + "-grants"), 0u);
  {
    Store s(db.path);
    EXPECT_EQ(s.grants_replayed(), 6u);
    EXPECT_EQ(s.load_leases(LeaseState::Active).size(), 4u);
    auto two = s.load_lease(2);
    ASSERT_TRUE(two.has_value());
    EXPECT_EQ(two->state, LeaseState::Released);
    EXPECT_EQ(two->ended_ms, 150u);
    auto one = s.load_lease(1);
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->parts.size(), 2u);
    EXPECT_EQ(one->parts[0].cores, (std::vector<uint32_t>{0, 1, 2}));
    EXPECT_EQ(one->client, "alice");
    EXPECT_EQ(journal_bytes(db.path + "-grants"), 0u) << "replayed, not emptied";
  }
  EXPECT_TRUE(committed_lease(db.path, 1));
  Store again(db.path);
  EXPECT_EQ(again.grants_replayed(), 0u);
}

// A record cut short at the end of the journal (a write a machine crash
// interrupted) is dropped with a warning that names the file and the
// bytes; the whole records before it are applied.
TEST(Store, ATornLastRecordIsDroppedWithAWarning) {
  TempDb db;
  { Store create(db.path); }
  Lease l3 = lease(3);
  // No zero byte in its record's tail: the cut must not end in zeros, which
  // the reader takes for the allocation beyond the records.
  l3.tokens_until_ms = 0x1122334455667788ull;
  const std::string third = GrantJournal::encode(3, GrantJournal::Kind::Put, l3);
  write_journal(db.path + "-grants",
                GrantJournal::encode(1, GrantJournal::Kind::Put, lease(1)) +
                    GrantJournal::encode(2, GrantJournal::Kind::Put, lease(2)) +
                    third.substr(0, third.size() - 5));
  CapturedLog log;
  Store s(db.path);
  EXPECT_EQ(s.grants_replayed(), 2u);
  EXPECT_TRUE(s.load_lease(1).has_value());
  EXPECT_TRUE(s.load_lease(2).has_value());
  EXPECT_FALSE(s.load_lease(3).has_value());
  const std::string said = log.text.str();
  EXPECT_NE(said.find(db.path + "-grants"), std::string::npos) << said;
  EXPECT_NE(said.find(std::to_string(third.size() - 5) + " byte(s)"), std::string::npos) << said;
  EXPECT_EQ(journal_bytes(db.path + "-grants"), 0u);
}

// A record that fails its checksum with a good one after it is damage no
// crash explains: the store refuses to open, saying so, and leaves the
// journal and the database as they are.
TEST(Store, ADamagedRecordInTheMiddleRefusesToOpen) {
  TempDb db;
  { Store create(db.path); }
  std::string second = GrantJournal::encode(2, GrantJournal::Kind::Put, lease(2));
  second[20] ^= 0x40;
  const std::string bytes = GrantJournal::encode(1, GrantJournal::Kind::Put, lease(1)) + second +
                            GrantJournal::encode(3, GrantJournal::Kind::Put, lease(3));
  write_journal(db.path + "-grants", bytes);
  try {
    Store s(db.path);
    ADD_FAILURE() << "a damaged journal was accepted";
  } catch (const StoreError &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(db.path + "-grants"), std::string::npos) << what;
    EXPECT_NE(what.find("damaged"), std::string::npos) << what;
  }
  EXPECT_EQ(read_file(db.path + "-grants"), bytes) << "the journal was changed";
  EXPECT_FALSE(committed_lease(db.path, 1)) << "a damaged journal was applied in part";
}

// The database stores the journal's last sequence number with each commit:
// after a crash between a commit and the journal's truncation, the
// records at or below it are not applied again (here one would undo a
// later revocation), and those above it are, once.
TEST(Store, RecordsTheDatabaseHoldsAreNotAppliedTwice) {
  TempDb db;
  std::string left;
  {
    Store s(db.path);
    s.begin_batch();
    s.put_lease(lease(1));
    s.commit_batch();
    // What a crash before the truncation leaves: its record, then the
    // file's allocation (zeros), which later records overwrite.
    left = GrantJournal::encode(1, GrantJournal::Kind::Put, lease(1));
    ASSERT_EQ(read_file(s.grants_path()).substr(0, left.size()), left);
    s.commit_deferred();
    EXPECT_EQ(journal_bytes(s.grants_path()), 0u);
    Lease revoked = lease(1);
    revoked.state = LeaseState::Revoked;
    revoked.ended_ms = 120;
    s.update_lease(revoked); // outside a batch: committed at once
  }
  Lease expired = lease(1);
  expired.state = LeaseState::Expired;
  expired.ended_ms = 200;
  write_journal(db.path + "-grants",
                left + GrantJournal::encode(2, GrantJournal::Kind::Put, lease(5)) +
                    GrantJournal::encode(3, GrantJournal::Kind::Update, expired));
  {
    Store s(db.path);
    EXPECT_EQ(s.grants_replayed(), 2u);
    EXPECT_EQ(s.load_lease(1)->state, LeaseState::Expired);
    EXPECT_TRUE(s.load_lease(5).has_value());
    // New records continue above the stored number.
    s.begin_batch();
    s.put_lease(lease(6));
    s.commit_batch();
    GrantJournal j(s.grants_path());
    auto c = j.read();
    ASSERT_EQ(c.records.size(), 1u);
    EXPECT_EQ(c.records[0].seq, 4u);
  }
  write_journal(db.path + "-grants", left);
  Store s(db.path);
  EXPECT_EQ(s.grants_replayed(), 0u);
  EXPECT_EQ(s.load_lease(1)->state, LeaseState::Expired) << "an old record was applied again";
  EXPECT_TRUE(s.load_lease(6).has_value());
}

// A journal that cannot be written (made immutable here: its writes fail
// with EPERM, as they would with ENOSPC or EIO) makes the batch commit
// instead, with a warning naming the file: the lease is durable either way.
TEST(Store, AJournalThatCannotBeWrittenFallsBackToACommit) {
  TempDb db;
  CapturedLog log;
  Store s(db.path);
  const int fd = open(s.grants_path().c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  int flags = 0;
  if (ioctl(fd, FS_IOC_GETFLAGS, &flags) != 0 ||
      (flags |= FS_IMMUTABLE_FL, ioctl(fd, FS_IOC_SETFLAGS, &flags) != 0)) {
    const int err = errno;
    close(fd);
    GTEST_SKIP() << "cannot make the journal immutable (" << std::strerror(err)
                 << "): needs root (CAP_LINUX_IMMUTABLE) and a file system with chattr +i";
  }
  s.begin_batch();
  s.put_lease(lease(1));
  const bool none_failed = s.commit_batch().empty();
  const bool committed = committed_lease(db.path, 1);
  flags &= ~FS_IMMUTABLE_FL;
  EXPECT_EQ(ioctl(fd, FS_IOC_SETFLAGS, &flags), 0) << std::strerror(errno);
  close(fd);
  EXPECT_TRUE(none_failed);
  EXPECT_TRUE(committed) << "the journal could not be written and nothing was committed";
  EXPECT_NE(log.text.str().find(s.grants_path()), std::string::npos) << log.text.str();
  // Writable again: the next lease waits for its commit as before.
  s.begin_batch();
  s.put_lease(lease(2));
  s.commit_batch();
  EXPECT_FALSE(committed_lease(db.path, 2));
  EXPECT_GT(journal_bytes(s.grants_path()), 0u);
}

namespace {

/// Makes every write that would grow a file of this process past the
/// file's size now fail (RLIMIT_FSIZE, SIGXFSZ ignored: write(2) returns
/// EFBIG, as it returns ENOSPC on a full disk), until dropped. SQLite
/// writes a transaction's pages to the log at its COMMIT, so a COMMIT then
/// fails for real; the grant journal, far smaller than the log, can still
/// grow while the limit stays above its size. The limit is the process's
/// (ctest runs each case in a process of its own); it goes on scope exit.
class FileSizeLimit {
public:
  explicit FileSizeLimit(uint64_t bytes) {
    getrlimit(RLIMIT_FSIZE, &before_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &ignore, &handler_);
    struct rlimit lim = before_;
    lim.rlim_cur = static_cast<rlim_t>(bytes);
    ok_ = setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() { drop(); }
  bool ok() const { return ok_; }
  void drop() {
    if (dropped_)
      return;
    dropped_ = true;
    setrlimit(RLIMIT_FSIZE, &before_);
    sigaction(SIGXFSZ, &handler_, nullptr);
  }

private:
  struct rlimit before_ {};
  struct sigaction handler_ {};
  bool ok_ = false;
  bool dropped_ = false;
};

/// What a crash of the process would leave (the database, its log and the
/// grant journal as the kernel holds them), copied to `dir`; the Store
/// keeps running. Returns the copy's database path.
std::string crash_copy(const std::string &path, const std::string &dir) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const std::string to = dir + "/" + fs::path(path).filename().string();
  for (const char *suffix : {"", "-wal", "-grants"})
    if (fs::exists(path + suffix))
      fs::copy_file(path + suffix, to + suffix, fs::copy_options::overwrite_existing);
  return to;
}

std::vector<uint64_t> journal_leases(const std::string &path) {
  GrantJournal j(path);
  std::vector<uint64_t> out;
  for (const GrantJournal::Record &r : j.read().records)
    out.push_back(r.lease.id);
  return out;
}

/// Store s holds lease 1, answered from the journal (its transaction still
/// open), and node n1, committed; then the disk "fills": a batch with
/// lease 2 and a node (so it must commit) fails its COMMIT, and every
/// write made again on its own fails too. Returns what commit_batch()
/// said failed.
std::vector<uint64_t> fail_a_batch(Store &s, const std::string &path,
                                   std::unique_ptr<FileSizeLimit> &limit) {
  s.put_node(node("n1")); // committed at once: the log has frames now
  s.begin_batch();
  s.put_lease(lease(1), true);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_FALSE(committed_lease(path, 1)) << "lease 1 was committed: the case tests nothing";
  limit = std::make_unique<FileSizeLimit>(std::filesystem::file_size(path + "-wal"));
  if (!limit->ok())
    return {};
  s.begin_batch();
  s.put_lease(lease(2), true);
  s.put_node(node("n2"));
  return s.commit_batch();
}

} // namespace

// A batch whose COMMIT fails and whose writes fail again one by one (a full
// disk): the grant whose write failed was refused to its client (the
// caller reports the lease as failed), so the journal must not bring it
// back at the next start; the lease answered before from the journal must.
// The process that held the journal is killed (its Store never closes), as
// a crash would end it.
TEST(Store, AGrantRefusedAfterAFailedCommitIsNotReplayed) {
  TempDb db;
  { Store create(db.path); }
  // Killed while the journal is held.
  const int said = byte_from_killed_child([&] {
    CapturedLog log;
    Store &s = *new Store(db.path); // never closed: the child is killed
    std::unique_ptr<FileSizeLimit> limit;
    const std::vector<uint64_t> failed = fail_a_batch(s, db.path, limit);
    // 'r': the refused grant was reported, and the journal was said to be
    // kept; 's': setrlimit failed; 'n': not reported.
    if (!limit->ok())
      return 's';
    if (std::find(failed.begin(), failed.end(), 2u) != failed.end() &&
        log.text.str().find("kept") != std::string::npos)
      return 'r';
    return 'n';
  });
  ASSERT_NE(said, -1) << "the child failed before answering";
  if (said == 's')
    GTEST_SKIP() << "setrlimit(RLIMIT_FSIZE) failed in the child";
  EXPECT_EQ(said, 'r') << "the failed grant was not reported, or the journal not kept";
  EXPECT_EQ(journal_leases(db.path + "-grants"), (std::vector<uint64_t>{1}))
      << "the journal must hold the answered lease 1 and not the refused lease 2";
  EXPECT_FALSE(committed_lease(db.path, 1)) << "lease 1 was committed: the case tests nothing";

  Store restarted(db.path);
  EXPECT_EQ(restarted.grants_replayed(), 1u);
  EXPECT_TRUE(restarted.load_lease(1).has_value()) << "a lease answered to its client was lost";
  EXPECT_FALSE(restarted.load_lease(2).has_value())
      << "a grant refused to its client came back as a live lease";
  EXPECT_EQ(journal_bytes(db.path + "-grants"), 0u) << "replayed, not emptied";
}

// Once held, the journal is left at the first commit that succeeds (the
// disk has room again): that commit applies what the journal holds and the
// database lacks (lease 1, whose writes all failed), stores the last
// sequence number, and empties the journal; lease writes wait for their
// commit again. A crash after that replays only the records written since
// (lease 4), once, and drops nothing.
TEST(Store, TheHeldJournalIsLeftAtTheNextCommitThatSucceeds) {
  TempDb db;
  CapturedLog log;
  Store s(db.path);
  std::unique_ptr<FileSizeLimit> limit;
  const std::vector<uint64_t> first = fail_a_batch(s, db.path, limit);
  if (!limit->ok())
    GTEST_SKIP() << "setrlimit(RLIMIT_FSIZE) failed: " << std::strerror(errno);
  // Lease 1's write failed again too, but its record is in the journal's
  // file: it is kept, so only the refused grant is reported.
  EXPECT_EQ(first, (std::vector<uint64_t>{2}));
  // The same for a renewal made while the disk is still full: in effect
  // and kept, its client is answered.
  s.begin_batch();
  Lease renewed_full = lease(1);
  renewed_full.expiry_ms = 800;
  s.update_lease(renewed_full);
  EXPECT_TRUE(s.commit_batch().empty()) << "a renewal the journal kept was reported failed";
  // Still full: a lease written while held is committed at once, and
  // refused when that fails; so is the end of it made in the same pass
  // (its record would name a lease no database holds).
  s.begin_batch();
  Lease three = lease(3);
  s.put_lease(three, true);
  three.state = LeaseState::NodeDown;
  three.ended_ms = 150;
  s.update_lease(three);
  const std::vector<uint64_t> failed = s.commit_batch();
  EXPECT_EQ(failed, (std::vector<uint64_t>{3, 3}));
  limit->drop();
  EXPECT_FALSE(committed_lease(db.path, 1));

  s.begin_batch();
  Lease renewed = lease(1);
  renewed.expiry_ms = 900;
  s.update_lease(renewed);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_TRUE(committed_lease(db.path, 1)) << "the journal's lease 1 did not reach the database";
  EXPECT_FALSE(committed_lease(db.path, 2)) << "a refused grant reached the database";
  EXPECT_FALSE(committed_lease(db.path, 3)) << "a refused grant reached the database";
  EXPECT_EQ(journal_bytes(s.grants_path()), 0u) << "the journal is still held";
  EXPECT_NE(log.text.str().find("holds every lease write again"), std::string::npos)
      << log.text.str();

  s.begin_batch();
  s.put_lease(lease(4), true);
  EXPECT_TRUE(s.commit_batch().empty());
  EXPECT_FALSE(committed_lease(db.path, 4)) << "lease writes still commit at once";
  EXPECT_EQ(journal_leases(s.grants_path()), (std::vector<uint64_t>{4}));

  TempDb after;
  const std::string copy = crash_copy(db.path, std::filesystem::path(after.path).parent_path());
  Store restarted(copy);
  EXPECT_EQ(restarted.grants_replayed(), 1u);
  ASSERT_TRUE(restarted.load_lease(1).has_value());
  EXPECT_EQ(restarted.load_lease(1)->expiry_ms, 900u);
  EXPECT_TRUE(restarted.load_lease(4).has_value());
  EXPECT_FALSE(restarted.load_lease(2).has_value());
  EXPECT_FALSE(restarted.load_lease(3).has_value());
  EXPECT_EQ(restarted.load_leases(LeaseState::Active).size(), 2u);
  EXPECT_EQ(log.text.str().find("does not hold"), std::string::npos) << log.text.str();
}

// Lease::tokens_until_ms goes through the journal (the last field of a
// record) and its replay; a record written before the field existed ends
// without it and is read as "not known", not refused as damaged.
TEST(Store, TheLatestTokenExpiryGoesThroughTheJournalAndOlderRecordsLackIt) {
  TempDb db;
  { Store create(db.path); }
  // A record as the journal wrote it before the field: the body without
  // its last 8 bytes, length and checksum to match.
  auto without_field = [](const std::string &record) {
    std::string body = record.substr(8, record.size() - 8 - 8);
    std::string out(8, '\0');
    const uint32_t n = static_cast<uint32_t>(body.size()), crc = crc32(body.data(), body.size());
    std::memcpy(&out[0], &n, 4);
    std::memcpy(&out[4], &crc, 4);
    return out + body;
  };
  Lease renewed = lease(2);
  renewed.expiry_ms = 150;
  renewed.tokens_until_ms = 300;
  write_journal(db.path + "-grants",
                without_field(GrantJournal::encode(1, GrantJournal::Kind::Put, lease(1))) +
                    GrantJournal::encode(2, GrantJournal::Kind::Put, lease(2)) +
                    GrantJournal::encode(3, GrantJournal::Kind::Update, renewed) +
                    GrantJournal::encode(4, GrantJournal::Kind::Put, lease(4)) +
                    without_field(GrantJournal::encode(5, GrantJournal::Kind::Update, lease(4))));
  Store s(db.path);
  EXPECT_EQ(s.grants_replayed(), 5u);
  ASSERT_TRUE(s.load_lease(1));
  EXPECT_EQ(s.load_lease(1)->tokens_until_ms, 0u);
  ASSERT_TRUE(s.load_lease(2));
  EXPECT_EQ(s.load_lease(2)->expiry_ms, 150u);
  EXPECT_EQ(s.load_lease(2)->tokens_until_ms, 300u);
  ASSERT_TRUE(s.load_lease(4));
  EXPECT_EQ(s.load_lease(4)->tokens_until_ms, 0u) << "an older update makes it not known";

  // A lease whose expiry passed but whose earlier token has not is still
  // told to a node that registers.
  Lease ended = lease(9);
  ended.state = LeaseState::Released;
  ended.expiry_ms = 150;
  ended.tokens_until_ms = 600;
  ended.ended_ms = 140;
  s.put_lease(ended);
  std::set<uint64_t> told;
  for (const Lease &l : s.ended_unexpired_on("n1", 500))
    told.insert(l.id);
  EXPECT_EQ(told, std::set<uint64_t>{9});
  EXPECT_TRUE(s.ended_unexpired_on("n1", 600).empty());
}
