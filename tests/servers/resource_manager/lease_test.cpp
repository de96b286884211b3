// Leases end to end with real processes on one device per run: a
// resource_manager, an executor_manager registered with it, and librfaas
// (rfaas::resource_manager + rfaas::executor) in this process. Covers lease ->
// allocate -> invoke -> release; forged, expired and replayed tokens refused
// with lease_invalid; a lease's end ending its executor; the resource manager
// restarted mid-lease (the allocation keeps serving, the lease is still
// known, the node registers again); 16 clients racing for the last cores (as
// many grants as free cores, no core twice); a client killed mid-lease (its
// executor ends, its cores come back at the lease's expiry); renewal keeping
// the cores past the first expiry, and expiry freeing them; a lease spread
// over two nodes (each part allocated on its node, a part's token refused by
// the other node); an executor manager killed (node down, its clients'
// invocations fail, the other node keeps serving and takes the new leases);
// a node whose resource manager is stopped (SIGSTOP) still allocating
// promptly, ending a lease on its own clock, and delivering the accounting
// it queued meanwhile once the resource manager runs again.
//
//   rfaas_rm_lease_tests --device lo-tcp
//   rfaas_rm_lease_tests --devices /tmp/devices.json --device rxe0 --host 10.99.0.1
//   rfaas_rm_lease_tests ... --device rxe0 --manager-device rxe1 --host 10.99.0.2
//
// --devices names the device database (default config/devices.json),
// --device the client's entry, --manager-device the entry the resource
// manager and the executor manager (and so its executors) use (default: the
// client's), --host the address the executor manager listens on (default
// 127.0.0.1; rdma_cm cannot use 127.0.0.1, so on verbs it is the device's
// address). The resource manager listens on its device's ip_address; its REST
// API stays on 127.0.0.1 (HTTP).
#include <rfaas/rfaas.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "../../e2e/process.hpp"
#include "http_client.hpp"

using namespace std::chrono_literals;
using json = nlohmann::json;
using rfaas::e2e::Process;
using rfaas::http::request;

namespace {

constexpr const char *kToken = "lease-test-admin-token-0123456789";
constexpr const char *kSecret = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
// The second node's (n2) secret.
constexpr const char *kSecret2 = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

struct Globals {
  std::string devices = RFAAS_RM_DEVICES;
  std::string device = "lo-tcp";
  std::string manager_device;     // the servers' entry; empty: the client's
  std::string host = "127.0.0.1"; // the executor manager's listen address
  std::string rm_bin = RFAAS_RM_BINARY;
  std::string manager_bin = RFAAS_RM_MANAGER;
  std::string library = RFAAS_RM_LIBRARY;
  std::string self; // this binary, for helper processes
  std::string dir;
  Process rm;
  Process manager;    // node n1
  Process manager2;   // node n2, started by the two-node cases
  int rm_starts = 0;  // names each start's log file
  std::string fabric; // the resource manager's fabric host:port
  uint16_t rest = 0;
} g;

uint64_t wall_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

rfaas::device device() { return rfaas::device_database::load(g.devices).find(g.device); }

/// Deadlines for reaching the resource manager: tcp;ofi_rxm connects lazily,
/// and a restarted resource manager may be busy accepting its node first.
rfaas::timeouts patient() {
  rfaas::timeouts t;
  t.connect = std::chrono::seconds(30);
  return t;
}

/// The first line containing `needle` in the resource manager's log `path`,
/// or "" when none came within `timeout` or the process ended. Polls the
/// file: the resource manager prints its readiness lines on stderr.
std::string wait_for_log_line(const std::string &path, const std::string &needle,
                              std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    std::ifstream f(path);
    for (std::string line; std::getline(f, line);)
      if (line.find(needle) != std::string::npos)
        return line;
    if (std::chrono::steady_clock::now() >= deadline || !rfaas::e2e::alive(g.rm.pid()))
      return "";
    std::this_thread::sleep_for(10ms);
  }
}

/// Starts the resource manager on `port` (0: any) and waits for its lines.
bool start_rm(uint16_t port) {
  json cfg = {{"database", g.dir + "/rm.sqlite"},
              {"http", {{"host", "127.0.0.1"}, {"port", 0}, {"token", kToken}}},
              {"fabric",
               {{"device_database", g.devices},
                {"device", g.manager_device},
                {"port", port},
                {"heartbeat_ms", 200},
                {"accept_timeout_ms", 5000}}},
              {"nodes", {{"heartbeat_timeout_ms", 5000}}},
              {"tick_ms", 50},
              {"log", {{"level", "warn"}}}};
  std::ofstream(g.dir + "/rm.json") << cfg.dump(2);
  // Its stderr (readiness lines and log) goes to a file kept with the test's
  // logs: a pipe nobody reads after start-up would block it once full.
  // One file per start (rm-1.log, rm-2.log after a restart).
  const std::string log = g.dir + "/rm-" + std::to_string(++g.rm_starts) + ".log";
  g.rm = Process({g.rm_bin, "--config", g.dir + "/rm.json"}, log);
  std::string line = wait_for_log_line(log, "resource_manager: fabric on ", 30s);
  if (line.empty())
    return false;
  size_t at = line.find(" on ") + 4;
  g.fabric = line.substr(at, line.find(' ', at) - at);
  line = wait_for_log_line(log, "resource_manager: ready, REST on ", 30s);
  if (line.empty())
    return false;
  g.rest = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  return true;
}

/// GET `path` (/nodes or /leases) once its table is dated after this call
/// began: every change the resource manager made before, a lease granted or
/// released over the fabric included, is in it (the tables are the loop's
/// snapshots, docs/resource_manager.md "Snapshots"; an idle loop redates
/// them every tick_ms, 50 here). Polls, bounded by 10 s.
json fresh(const std::string &path) {
  const uint64_t asked = wall_ms();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto r = request(g.rest, "GET", path, "", kToken);
    const std::string generated = r.header("X-Rfaas-Generated-Ms");
    if (r.status != 200 || generated.empty() || std::stoull(generated) > asked ||
        std::chrono::steady_clock::now() > deadline) {
      EXPECT_EQ(r.status, 200) << r.body;
      EXPECT_FALSE(generated.empty()) << r.headers;
      return r.status == 200 ? json::parse(r.body) : json::array();
    }
    std::this_thread::sleep_for(1ms);
  }
}

json node_view(const std::string &name = "n1") {
  for (const json &n : fresh("/nodes"))
    if (n["name"] == name)
      return n;
  return json();
}

bool wait_node(const std::string &state, const std::string &name = "n1") {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (node_view(name).value("state", "") == state)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// Up to four CPUs this process may use (the manager checks its affinity):
/// the node's cores, so that racing clients compete for more than one.
json usable_cpus() {
  json cpus = json::array();
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE && cpus.size() < 4; ++c)
      if (CPU_ISSET(c, &set))
        cpus.push_back(c);
  if (cpus.empty())
    cpus.push_back(0);
  return cpus;
}

/// Starts the executor manager of node `node` (n1: manager.json,
/// manager.log, node.secret; others: NODE-manager.json ...) registered with
/// the resource manager, and waits until the node is up. `sandbox` is the
/// executor.sandbox kind (empty: the default).
bool start_manager(Process &p, const std::string &node = "n1", const std::string &sandbox = "") {
  const std::string prefix = g.dir + "/" + (node == "n1" ? std::string() : node + "-");
  json cfg = {{"device_database", g.devices},
              {"device", g.manager_device},
              {"listen", {{"host", g.host}, {"port", 0}}},
              {"resource_manager",
               {{"enabled", true},
                {"address", g.fabric},
                {"secret_file", prefix + "node.secret"},
                {"node", node},
                {"accounting_interval_ms", 300}}},
              {"resources", {{"cores", usable_cpus()}, {"memory_mib", 1024}}},
              {"log", {{"level", "info"}}}};
  if (!sandbox.empty())
    cfg["executor"] = {{"sandbox", sandbox}};
  std::ofstream(prefix + "manager.json") << cfg.dump(2);
  p = Process({g.manager_bin, "--config", prefix + "manager.json"}, prefix + "manager.log");
  return !p.wait_for_line("listening on", 60s).empty() && wait_node("up", node);
}

/// Adds node `name` with `secret` through REST (its secret file beside it).
bool add_node(const std::string &name, const std::string &secret) {
  std::ofstream(g.dir + "/" + (name == "n1" ? std::string() : name + "-") + "node.secret")
      << secret << "\n";
  // The address is a placeholder: the executor manager registers its own.
  json node = {{"name", name},
               {"address", "127.0.0.1:1"},
               {"cores", 1},
               {"memory_mib", 1024},
               {"secret", secret}};
  auto r = request(g.rest, "POST", "/nodes", node.dump(), kToken);
  if (r.status != 201)
    std::fprintf(stderr, "adding node %s failed: %d %s\n", name.c_str(), r.status, r.body.c_str());
  return r.status == 201;
}

/// Node n2 with its executor manager, for the two-node cases (added once).
bool second_node() {
  if (g.manager2.running() && node_view("n2").value("state", "") == "up")
    return true;
  if (!node_view("n2").is_object() && !add_node("n2", kSecret2))
    return false;
  return start_manager(g.manager2, "n2");
}

/// The end of the executor manager's log (all of it with tail = 0).
std::string manager_log(size_t tail = 3000, const std::string &file = "manager.log") {
  std::ifstream f(g.dir + "/" + file);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  return tail && text.size() > tail ? text.substr(text.size() - tail) : text;
}

/// Waits (bounded) until node n1 registered (again) after `ms` (epoch ms)
/// and is up.
bool wait_registered_after(uint64_t ms) {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline) {
    json n = node_view();
    if (n.value("state", "") == "up" && n.value("registered_ms", uint64_t(0)) > ms)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// Waits (bounded) until the node's final accounting report for lease `id`
/// reached the resource manager: the node has handled the lease's end.
bool wait_final_accounting(uint64_t id) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = request(g.rest, "GET", "/accounting?lease=" + std::to_string(id), "", kToken);
    if (r.status == 200 && r.body.find("\"final\":true") != std::string::npos)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// The leases node n1's executor manager knows ended: its ended-lease file
/// (resource_manager.ended_leases_file, default: the secret file's name
/// with ".ended"), where it records every notice of a lease whose tokens
/// are still live, at the end of the loop pass that took it. A lease that
/// never had an allocation on the node gets no final accounting report, so
/// this is what shows the node heard of its end.
std::set<uint64_t> node_heard_ended() {
  std::set<uint64_t> ids;
  std::ifstream f(g.dir + "/node.secret.ended");
  uint64_t id = 0, expiry = 0;
  while (f >> id >> expiry)
    ids.insert(id);
  return ids;
}

bool wait_node_heard_end(uint64_t id) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (node_heard_ended().count(id))
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// Core indices of node n1 held by active leases, from GET /leases.
std::vector<int> leased_cores() {
  std::vector<int> cores;
  for (const json &l : fresh("/leases"))
    for (const json &p : l["parts"])
      if (p["node"] == "n1")
        for (const json &c : p["cores"])
          cores.push_back(c.get<int>());
  return cores;
}

/// Whether lease `id` is still active at the resource manager.
bool lease_active(uint64_t id) {
  for (const json &l : fresh("/leases"))
    if (l.value("id", uint64_t(0)) == id)
      return true;
  return false;
}

/// Waits (bounded) until lease `id` is no longer active and its state is `state`.
bool wait_lease_state(uint64_t id, const std::string &state) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    for (const json &l :
         json::parse(request(g.rest, "GET", "/leases?state=all&limit=1000", "", kToken).body))
      if (l.value("id", uint64_t(0)) == id && l.value("state", "") == state)
        return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

/// Waits (bounded) until some accounting report for lease `id` arrived: the
/// node ended an allocation of the lease.
bool wait_accounting(uint64_t id) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto r = request(g.rest, "GET", "/accounting?lease=" + std::to_string(id), "", kToken);
    if (r.status == 200 && r.body.find("\"node\":\"n1\"") != std::string::npos)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

rfaas::allocation_options options_of(const rfaas::lease &l, size_t part = 0) {
  rfaas::allocation_options o = l.options(part);
  o.library = g.library;
  o.hot_timeout_ms = 0;
  return o;
}

/// Allocates on part `part` of the lease, waiting out resources_unavailable
/// while the node frees the core of a previous test's executor.
void allocate(rfaas::executor &ex, const rfaas::lease &l, const rfaas::allocation_options &o,
              size_t part = 0) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    try {
      ex.allocate(l.server(part), o);
      return;
    } catch (const rfaas::Error &e) {
      if (e.code() != rfaas::status::resources_unavailable ||
          std::chrono::steady_clock::now() > deadline)
        throw;
    }
    std::this_thread::sleep_for(20ms);
  }
}

/// A lease, waiting out resources_unavailable while a previous test's lease
/// is still being released.
rfaas::lease lease(rfaas::resource_manager &rm, std::chrono::milliseconds duration = 60s) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    try {
      return rm.lease(1, 256, duration);
    } catch (const rfaas::Error &e) {
      if (e.code() != rfaas::status::resources_unavailable ||
          std::chrono::steady_clock::now() > deadline)
        throw;
    }
    std::this_thread::sleep_for(20ms);
  }
}

bool echo(rfaas::executor &ex) {
  std::vector<uint8_t> in(64), out(64);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = static_cast<uint8_t>(i * 7);
  rfaas::result r = ex.execute("echo", in, out);
  return r.ok() && r.output_size == in.size() && in == out;
}

/// allocate() on part `part`'s node must fail with lease_invalid.
void expect_refused(const rfaas::lease &l, const rfaas::allocation_options &o, const char *what,
                    size_t part = 0) {
  rfaas::executor ex(device());
  try {
    ex.allocate(l.server(part), o);
    ADD_FAILURE() << what << ": allocated";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << what << ": " << e.what() << "\n"
                                                      << manager_log();
  }
}

/// --hold-lease FABRIC: the helper process of ClientKilledMidLease. Leases
/// one core for 4 s, allocates, prints "holding lease ID" and keeps invoking
/// (so that its endpoints keep making progress) until it is killed.
int hold_lease(const std::string &fabric) {
  try {
    rfaas::resource_manager rm(device(), fabric, "victim", patient());
    rfaas::lease l = lease(rm, 4000ms);
    rfaas::executor ex(device());
    allocate(ex, l, options_of(l));
    if (!echo(ex)) {
      std::fprintf(stderr, "hold-lease: the first invocation failed\n");
      return 1;
    }
    std::printf("holding lease %llu\n", static_cast<unsigned long long>(l.id));
    std::fflush(stdout);
    for (;;) {
      echo(ex);
      std::this_thread::sleep_for(50ms);
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "hold-lease: %s\n", e.what());
    return 1;
  }
}

} // namespace

TEST(RmLease, LeaseAllocateInvokeRelease) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  ASSERT_EQ(l.parts.size(), 1u);
  EXPECT_EQ(l.parts[0].node, "n1");
  EXPECT_EQ(l.client, "tester");
  {
    rfaas::executor ex(device());
    allocate(ex, l, options_of(l));
    EXPECT_TRUE(echo(ex)) << manager_log();
    ex.deallocate();
  }
  {
    // Another client that copied the lease's id and name but not its
    // secret can neither renew nor release it.
    rfaas::resource_manager stranger(device(), g.fabric, "tester", patient());
    rfaas::lease copy = l;
    copy.secret = {};
    for (int op = 0; op < 2; ++op) {
      try {
        if (op == 0)
          stranger.renew(copy, 30s);
        else
          stranger.release(copy);
        ADD_FAILURE() << (op == 0 ? "renewed" : "released") << " without the lease secret";
      } catch (const rfaas::Error &e) {
        EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << e.what();
        EXPECT_NE(std::string(e.what()).find("wrong lease secret"), std::string::npos) << e.what();
      }
    }
  }
  rfaas::lease renewed = l;
  rm.renew(renewed, 30s);
  EXPECT_EQ(renewed.id, l.id);
  EXPECT_EQ(renewed.secret, l.secret);
  EXPECT_NE(renewed.parts[0].token, l.parts[0].token);
  {
    rfaas::executor ex(device());
    allocate(ex, renewed, options_of(renewed));
    EXPECT_TRUE(echo(ex));
  }
  rm.release(renewed);
  // The node reports the lease's accounting at its end.
  ASSERT_TRUE(wait_final_accounting(l.id)) << manager_log();
  json acc = json::parse(
      request(g.rest, "GET", "/accounting?lease=" + std::to_string(l.id), "", kToken).body);
  EXPECT_NE(acc.dump().find("\"node\":\"n1\""), std::string::npos) << acc.dump();
  EXPECT_NE(acc.dump().find("\"client\":\"tester\""), std::string::npos) << acc.dump();
  try {
    rm.release(renewed);
    ADD_FAILURE() << "released twice";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.where(), rfaas::phase::lease);
    EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << e.what();
  }
}

// A client that leases and releases back to back ends leases as fast as the
// resource manager grants them (thousands a second); each end is a notice to
// the node. The node must take the notices at least about as fast as they
// come: the resource manager keeps a bounded backlog per node and drops the
// oldest beyond it, and a dropped notice leaves a released lease's token
// valid on the node until it expires. So every notice must have reached the
// node (its ended-lease file) within twice as long as the leasing took (at
// least 2 s) after the last release. A node that read 16 messages per round
// of its loop (every 20 ms when idle) needed 3 s on tcp and 9 s on shm.
TEST(RmLease, NodeTakesLeaseEndedNoticesAsFastAsLeasesEnd) {
  constexpr size_t kLeases = 10000;
  const std::string client = "notices";
  rfaas::resource_manager rm(device(), g.fabric, client, patient());
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint64_t> ids;
  ids.reserve(kLeases);
  for (size_t i = 0; i < kLeases; ++i) {
    rfaas::lease l = lease(rm);
    rm.release(l);
    ids.push_back(l.id);
  }
  const auto released = std::chrono::steady_clock::now();
  const auto leasing = std::chrono::duration_cast<std::chrono::milliseconds>(released - t0);
  const auto deadline = released + std::max<std::chrono::milliseconds>(2 * leasing, 2s);
  // A node's notices go out in the order the leases ended: the last one
  // heard means every one before it was heard too, or dropped (counted
  // below).
  bool last_heard = false;
  std::set<uint64_t> heard;
  for (;;) {
    heard = node_heard_ended();
    last_heard = heard.count(ids.back()) > 0;
    if (last_heard || std::chrono::steady_clock::now() > deadline)
      break;
    std::this_thread::sleep_for(10ms);
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - released);
  const size_t taken = static_cast<size_t>(
      std::count_if(ids.begin(), ids.end(), [&](uint64_t id) { return heard.count(id) > 0; }));
  std::printf("%zu leases in %lld ms; %zu notices taken %lld ms after the last release\n", kLeases,
              static_cast<long long>(leasing.count()), taken,
              static_cast<long long>(waited.count()));
  EXPECT_TRUE(last_heard) << "the node had not taken the last lease-ended notice " << waited.count()
                          << " ms after the last release (the leasing took " << leasing.count()
                          << " ms); " << taken << " of " << kLeases << " were taken\n"
                          << manager_log();
  EXPECT_EQ(taken, kLeases);
  // Nothing to account for: the node reports no use of leases it never saw.
  auto acc = request(g.rest, "GET", "/accounting?lease=" + std::to_string(ids.back()), "", kToken);
  EXPECT_EQ(acc.body.find("\"final\":true"), std::string::npos) << acc.body;
  // None was dropped, by the resource manager's count and in its log.
  auto metrics = request(g.rest, "GET", "/metrics", "", kToken);
  EXPECT_NE(metrics.body.find("\nrfaas_rm_fabric_notices_dropped_total 0\n"), std::string::npos)
      << metrics.body;
  std::ifstream f(g.dir + "/rm-" + std::to_string(g.rm_starts) + ".log");
  for (std::string line; std::getline(f, line);)
    EXPECT_FALSE(line.find("notices") != std::string::npos &&
                 line.find("dropped") != std::string::npos)
        << line;
  // Late, the rest is taken all the same: the next case starts from a node
  // that is done with them.
  if (!last_heard) {
    EXPECT_TRUE(wait_node_heard_end(ids.back()));
  }
}

TEST(RmLease, ForgedExpiredForeignAndReplayedTokensAreRefused) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::allocation_options forged = options_of(l);
  forged.token[3] ^= 0x40;
  expect_refused(l, forged, "forged token");
  rfaas::allocation_options more = options_of(l);
  more.lease_cores = 4; // claims more than it was granted
  expect_refused(l, more, "altered claim");
  rfaas::allocation_options none = options_of(l);
  none.lease_id = 0;
  none.lease_cores = 0;
  expect_refused(l, none, "no lease");

  // Released: once the node heard of it (its ended-lease file shows that),
  // the token is a replay.
  rm.release(l);
  ASSERT_TRUE(wait_node_heard_end(l.id)) << manager_log();
  expect_refused(l, options_of(l), "replayed token");

  // Expired: wait out a one-second lease on the wall clock. The node refuses
  // it as expired, or as ended if the resource manager's notice came first.
  rfaas::lease short_lease = lease(rm, 1000ms);
  while (wall_ms() <= short_lease.expiry_ms + 10)
    std::this_thread::sleep_for(20ms);
  expect_refused(short_lease, options_of(short_lease), "expired lease");
  const std::string log = manager_log(0);
  EXPECT_TRUE(log.find("lease expired") != std::string::npos ||
              log.find("ended (expired)") != std::string::npos ||
              log.find("already ended on this node") != std::string::npos)
      << manager_log();
  EXPECT_NE(log.find("does not match the lease"), std::string::npos);
  EXPECT_NE(log.find("already ended on this node (replayed token)"), std::string::npos);
}

// Revokes `l` over REST and invokes until the allocation stops answering;
// the worker's goodbye must say why.
static void expect_revocation_reaches(rfaas::executor &ex, const rfaas::lease &l) {
  auto r = request(g.rest, "DELETE", "/leases/" + std::to_string(l.id), "", kToken);
  EXPECT_LT(r.status, 300) << r.body;
  // The node ends the executor: invocations stop being answered.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  bool ended = false;
  rfaas::result res;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    std::vector<uint8_t> in(8), out(8);
    res = ex.execute("echo", in, out, 2000ms);
    ended = !res.ok();
  }
  EXPECT_TRUE(ended) << manager_log();
  // The worker's goodbye says why.
  EXPECT_EQ(res.status, rfaas::status::lease_invalid) << rfaas::to_string(res.status) << "\n"
                                                      << manager_log();
}

TEST(RmLease, RevokedLeaseEndsItsExecutor) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  ASSERT_TRUE(echo(ex));
  expect_revocation_reaches(ex, l);
}

// Revoked before the executor's accounting link to its manager is up (it
// connects up to 100 ms after the library loaded): the manager tells the
// executor as the link comes up, and the client still learns why. The
// `process` sandbox has no seccomp filter, so there the link is late (with
// the filter it connects beside the workers' links, at once).
TEST(RmLease, LeaseRevokedRightAfterAllocationIsReported) {
  ASSERT_EQ(g.manager.stop(5000ms), 0);
  struct Restore {
    ~Restore() {
      if (g.manager.running())
        g.manager.stop(5000ms);
      if (!start_manager(g.manager))
        ADD_FAILURE() << "the node did not restart with the default sandbox: " << manager_log();
    }
  } restore;
  ASSERT_TRUE(start_manager(g.manager, "n1", "process")) << manager_log();
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  expect_revocation_reaches(ex, l);
}

TEST(RmLease, ResourceManagerRestartKeepsLiveAllocationsAndLeases) {
  rfaas::lease l;
  rfaas::executor ex(device());
  {
    rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
    l = lease(rm);
    allocate(ex, l, options_of(l));
    ASSERT_TRUE(echo(ex));
  }
  const std::string fabric = g.fabric;
  uint16_t port = static_cast<uint16_t>(std::stoul(fabric.substr(fabric.rfind(':') + 1)));
  const uint64_t registered = node_view().value("registered_ms", uint64_t(0));
  int status = g.rm.stop(5000ms);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // The allocation keeps serving without the resource manager.
  EXPECT_TRUE(echo(ex));
  ASSERT_TRUE(start_rm(port)) << "the resource manager did not restart on port " << port;
  EXPECT_EQ(g.fabric, fabric);
  EXPECT_TRUE(echo(ex));
  // The lease came back from SQLite, and the node registers again.
  auto leases = fresh("/leases");
  bool known = false;
  for (const json &x : leases)
    known |= x.value("id", uint64_t(0)) == l.id;
  EXPECT_TRUE(known) << leases.dump();
  // The restarted resource manager keeps the node up from its store for a
  // heartbeat timeout: "up" alone does not show that the node came back.
  EXPECT_TRUE(wait_registered_after(registered)) << node_view().dump() << manager_log();
  EXPECT_TRUE(echo(ex));
  // No invocation after this: on manual-progress datagram providers a client
  // thread blocked for seconds in connect() does not answer the workers'
  // liveness reads, and they end (docs/protocol.md, liveness).
  ex.deallocate();
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rm.renew(l, 30s);
  rm.release(l);
}

// A client that outlives a resource manager killed with SIGKILL: its
// requests and its goodbye go to a dead peer, which a reliable-datagram
// provider over TCP may refuse ("try again") while it tries to reconnect, for
// as long as the connection's post deadline (5 s by default). Each call still
// ends within its own deadline: renewals within `allocation`, the destructor
// within `shutdown`.
TEST(RmLease, ClientOfAKilledResourceManagerEndsEachCallWithinItsDeadline) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::steady_clock;
  const std::string fabric = g.fabric;
  uint16_t port = static_cast<uint16_t>(std::stoul(fabric.substr(fabric.rfind(':') + 1)));
  const uint64_t registered = node_view().value("registered_ms", uint64_t(0));
  rfaas::timeouts t = patient();
  t.allocation = 1500ms;
  std::string took;
  rfaas::lease l;
  {
    auto rm = std::make_unique<rfaas::resource_manager>(device(), g.fabric, "tester", t);
    l = lease(*rm);
    g.rm.kill_now();
    // The first renewal usually finds the provider still connected and
    // waits for an answer; the later ones find it reconnecting.
    for (int i = 0; i < 3; ++i) {
      const auto t0 = steady_clock::now();
      EXPECT_THROW(rm->renew(l, 30s), rfaas::Error);
      const auto ms = duration_cast<milliseconds>(steady_clock::now() - t0);
      took += "renew " + std::to_string(ms.count()) + " ms, ";
      EXPECT_LT(ms.count(), (t.allocation + 1s).count())
          << "ms: renewal " << i << " against a dead resource manager";
    }
    const auto t0 = steady_clock::now();
    rm.reset();
    const auto ms = duration_cast<milliseconds>(steady_clock::now() - t0);
    took += "close " + std::to_string(ms.count()) + " ms";
    EXPECT_LT(ms.count(), (t.shutdown + 1s).count())
        << "ms: the client's goodbye to a dead resource manager";
  }
  std::printf("the client of the killed resource manager: %s\n", took.c_str());
  ASSERT_TRUE(start_rm(port)) << "the resource manager did not restart on port " << port;
  EXPECT_TRUE(wait_registered_after(registered)) << node_view().dump() << manager_log();
  // The lease came back from the store: give its cores back.
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rm.release(l);
}

TEST(RmLease, SixteenClientsRaceForTheLastCores) {
  json n = node_view();
  ASSERT_TRUE(n.is_object());
  const uint32_t free_cores = n["cores"].get<uint32_t>() - n["cores_used"].get<uint32_t>();
  ASSERT_GT(free_cores, 0u) << n.dump();
  constexpr int kClients = 16;
  ASSERT_LT(free_cores, static_cast<uint32_t>(kClients));

  // Every client connects first; then all ask at once.
  std::mutex mutex;
  std::condition_variable cv;
  int connected = 0;
  bool go = false;
  std::vector<rfaas::lease> granted(kClients);
  std::vector<int> refused(kClients, -1); // status code, -1 while none
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<rfaas::resource_manager>> clients(kClients);
  for (int i = 0; i < kClients; ++i)
    threads.emplace_back([&, i] {
      try {
        clients[i] = std::make_unique<rfaas::resource_manager>(
            device(), g.fabric, "racer" + std::to_string(i), patient());
        // One round trip first (releasing a lease that does not exist):
        // reliable-datagram providers connect at the first message, and the
        // race is about leasing, not connecting.
        rfaas::lease none;
        none.id = 1;
        none.client = "racer" + std::to_string(i);
        try {
          clients[i]->release(none);
        } catch (const rfaas::Error &e) {
          if (e.code() != rfaas::status::lease_invalid)
            throw;
        }
      } catch (const std::exception &e) {
        errors[i] = std::string("connect: ") + e.what();
        clients[i].reset();
      }
      std::unique_lock<std::mutex> lock(mutex);
      ++connected;
      cv.notify_all();
      cv.wait(lock, [&] { return go; });
      lock.unlock();
      if (!clients[i])
        return;
      try {
        granted[i] = clients[i]->lease(1, 64, 30s);
      } catch (const rfaas::Error &e) {
        refused[i] = static_cast<int>(e.code());
        errors[i] = e.what();
      }
    });
  {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return connected == kClients; });
    go = true;
    cv.notify_all();
  }
  for (auto &t : threads)
    t.join();

  uint32_t grants = 0;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(clients[i]) << errors[i];
    if (granted[i].id) {
      ++grants;
      EXPECT_EQ(granted[i].parts.size(), 1u);
    } else {
      EXPECT_EQ(refused[i], static_cast<int>(rfaas::status::resources_unavailable))
          << "client " << i << ": " << errors[i];
    }
  }
  EXPECT_EQ(grants, free_cores);
  // No core is in two leases: the resource manager's own view.
  std::vector<int> cores = leased_cores();
  EXPECT_EQ(cores.size(), grants);
  std::sort(cores.begin(), cores.end());
  EXPECT_TRUE(std::adjacent_find(cores.begin(), cores.end()) == cores.end())
      << "a core is leased twice: " << json(cores).dump();
  EXPECT_EQ(node_view()["cores_used"].get<uint32_t>(), grants);
  for (int i = 0; i < kClients; ++i)
    if (granted[i].id)
      clients[i]->release(granted[i]);
  EXPECT_TRUE(leased_cores().empty());
}

TEST(RmLease, ClientKilledMidLeaseFreesItsCoresAtExpiry) {
  // A helper process (this binary) leases for 4 s, allocates and keeps
  // invoking until it is killed.
  Process victim({g.self, "--device", g.device, "--devices", g.devices, "--hold-lease", g.fabric},
                 g.dir + "/victim.log");
  std::string line = victim.wait_for_line("holding lease ", 60s);
  ASSERT_FALSE(line.empty()) << "the helper did not allocate";
  const uint64_t id = std::stoull(line.substr(line.rfind(' ') + 1));
  ASSERT_TRUE(lease_active(id));
  victim.kill_now();

  // Its executor ends (the node reports the allocation's accounting), and the
  // lease expires on its own: its core is free again.
  EXPECT_TRUE(wait_accounting(id)) << manager_log();
  EXPECT_TRUE(wait_lease_state(id, "expired"));
  EXPECT_TRUE(leased_cores().empty());
  EXPECT_TRUE(wait_final_accounting(id)) << manager_log();

  // Others keep working.
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  EXPECT_TRUE(echo(ex)) << manager_log();
  ex.deallocate();
  rm.release(l);
}

TEST(RmLease, RenewalKeepsCoresAndAnUnrenewedLeaseExpires) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  ASSERT_TRUE(echo(ex));
  // Shortened to 2 s once allocated (a cold start may take longer than that
  // on a loaded machine).
  rm.renew(l, 2000ms);
  const uint64_t first_expiry = l.expiry_ms;
  // Renewed every 200 ms, the lease outlives its first expiry by a second.
  // Invoking meanwhile keeps the client's endpoints progressing (manual
  // progress providers) and shows the allocation serving.
  while (wall_ms() <= first_expiry + 1000) {
    rm.renew(l, 2000ms);
    EXPECT_TRUE(echo(ex)) << manager_log();
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(lease_active(l.id));
  EXPECT_EQ(leased_cores().size(), 1u);
  EXPECT_GT(l.expiry_ms, first_expiry + 1000);
  EXPECT_TRUE(echo(ex)) << "the allocation ended while its lease was renewed: " << manager_log();
  // Not renewed any more: it expires and frees its core, and the node ends
  // its executor.
  EXPECT_TRUE(wait_lease_state(l.id, "expired"));
  EXPECT_TRUE(leased_cores().empty());
  EXPECT_TRUE(wait_final_accounting(l.id)) << manager_log();
  try {
    rm.renew(l, 2000ms);
    ADD_FAILURE() << "renewed an expired lease";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << e.what();
  }
}

TEST(RmLease, LiveAllocationsAreReportedPeriodically) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  ASSERT_TRUE(echo(ex));
  // resource_manager.accounting_interval_ms is 300 here: a report for the
  // live allocation arrives before the lease ends, not final.
  EXPECT_TRUE(wait_accounting(l.id)) << manager_log();
  json acc = json::parse(
      request(g.rest, "GET", "/accounting?lease=" + std::to_string(l.id), "", kToken).body);
  EXPECT_NE(acc.dump().find("\"final\":false"), std::string::npos) << acc.dump();
  EXPECT_TRUE(echo(ex));
  ex.deallocate();
  rm.release(l);
  EXPECT_TRUE(wait_final_accounting(l.id)) << manager_log();
}

TEST(RmLease, LeaseSpreadOverTwoNodesServesOnBothAndTokensStayWithTheirNode) {
  ASSERT_TRUE(second_node()) << manager_log(3000, "n2-manager.log");
  json n1 = node_view("n1"), n2 = node_view("n2");
  const uint32_t free1 = n1["cores"].get<uint32_t>() - n1["cores_used"].get<uint32_t>();
  const uint32_t free2 = n2["cores"].get<uint32_t>() - n2["cores_used"].get<uint32_t>();
  ASSERT_GT(free1, 0u) << n1.dump();
  ASSERT_GT(free2, 0u) << n2.dump();
  // More cores than either node has free: the lease spans both, 256 MiB a
  // core (what each allocation asks by default).
  const uint32_t cores = std::max(free1, free2) + 1;
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = rm.lease(cores, 256ull * cores, 60s, 2);
  ASSERT_EQ(l.parts.size(), 2u);
  EXPECT_NE(l.parts[0].node, l.parts[1].node);
  EXPECT_EQ(l.cores(), cores);
  EXPECT_EQ(node_view("n1")["cores_used"].get<uint32_t>() +
                node_view("n2")["cores_used"].get<uint32_t>(),
            cores);
  // Each part is allocated on its own node, with all its cores, and serves.
  std::vector<std::unique_ptr<rfaas::executor>> ex;
  for (size_t i = 0; i < l.parts.size(); ++i) {
    ex.push_back(std::make_unique<rfaas::executor>(device()));
    allocate(*ex[i], l, options_of(l, i), i);
    EXPECT_TRUE(echo(*ex[i])) << l.parts[i].node << ": " << manager_log();
  }
  // A part's token is good at its own node only: the other part's token,
  // presented to this node, is foreign (made with another node's name and
  // secret).
  expect_refused(l, options_of(l, 1), "the other node's token", 0);
  expect_refused(l, options_of(l, 0), "the other node's token", 1);
  for (auto &e : ex)
    e->deallocate();
  rm.release(l);
  // Released: both nodes' cores are free at once.
  EXPECT_EQ(node_view("n1")["cores_used"].get<uint32_t>(), 0u);
  EXPECT_EQ(node_view("n2")["cores_used"].get<uint32_t>(), 0u);
  EXPECT_TRUE(wait_final_accounting(l.id)) << manager_log();
}

// A quota set through REST refuses the next lease over the wire, and the
// client's error names the quota.
TEST(RmLease, QuotaRefusalNamesTheQuotaTheClientHit) {
  auto put = request(g.rest, "PUT", "/quotas/users/quota-tester", R"({"cores": 1})", kToken);
  ASSERT_EQ(put.status, 200) << put.body;
  rfaas::resource_manager rm(device(), g.fabric, "quota-tester", patient());
  rfaas::lease first = lease(rm);
  try {
    rm.lease(1, 64, 10s);
    ADD_FAILURE() << "leased beyond a quota of 1 core";
  } catch (const rfaas::Error &e) {
    std::printf("refused: %s\n", e.what());
    EXPECT_EQ(e.code(), rfaas::status::resources_unavailable) << e.what();
    EXPECT_NE(std::string(e.what()).find("quota exceeded: cores 1 of 1 in use for client "
                                         "quota-tester; this request asks for 1 more"),
              std::string::npos)
        << e.what();
  }
  json q = json::parse(request(g.rest, "GET", "/quotas/users/quota-tester", "", kToken).body);
  EXPECT_EQ(q["usage"]["cores"], 1) << q.dump();
  // At least the two above (lease() asks again while a previous test's lease
  // still holds the core).
  EXPECT_GE(q["usage"]["requests_last_minute"].get<int>(), 2) << q.dump();
  rm.release(first);
  EXPECT_EQ(request(g.rest, "DELETE", "/quotas/users/quota-tester", "", kToken).status, 200);
}

/// SIGCONT for a stopped resource manager on every way out of a test.
struct ContinueRm {
  ~ContinueRm() {
    if (g.rm.running())
      kill(g.rm.pid(), SIGCONT);
  }
};

// The node ends an allocation at its lease's expiry by its own clock: the
// resource manager, which would tell it, is stopped (SIGSTOP) meanwhile. A
// renewal before the stop reached the node (it shortened the lease to 2 s).
TEST(RmLease, AllocationEndsAtExpiryOnTheNodesClockWhileTheResourceManagerIsStopped) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, l, options_of(l));
  ASSERT_TRUE(echo(ex));
  rm.renew(l, 2000ms);
  // The renewal's notice must reach the node before the resource manager
  // stops (it leaves the resource manager after the client's answer): else
  // the node goes by the token's longer expiry.
  const std::string renewed =
      "lease " + std::to_string(l.id) + " renewed until " + std::to_string(l.expiry_ms);
  auto notice_by = std::chrono::steady_clock::now() + 10s;
  while (manager_log(0).find(renewed) == std::string::npos &&
         std::chrono::steady_clock::now() < notice_by)
    std::this_thread::sleep_for(20ms);
  ASSERT_NE(manager_log(0).find(renewed), std::string::npos)
      << "the node never heard of the renewal: " << manager_log();
  // The allocation serves until the renewed expiry.
  ASSERT_TRUE(echo(ex));
  ContinueRm resume;
  ASSERT_EQ(kill(g.rm.pid(), SIGSTOP), 0);
  auto deadline = std::chrono::steady_clock::now() + 15s;
  bool ended = false;
  rfaas::result res;
  while (!ended && std::chrono::steady_clock::now() < deadline) {
    std::vector<uint8_t> in(8), out(8);
    // A generous deadline: the end comes as an answer (lease_invalid), not
    // as a timeout, and on a loaded host (load 19 on 2 cores) a worker once
    // took over 1 s to answer while the lease was still valid.
    res = ex.execute("echo", in, out, 3000ms);
    ended = !res.ok();
    if (!ended)
      std::this_thread::sleep_for(50ms);
  }
  const uint64_t at = wall_ms();
  kill(g.rm.pid(), SIGCONT);
  ASSERT_TRUE(ended) << "the allocation outlived its lease's expiry: " << manager_log();
  std::printf("the client's invocation after the expiry: %s, %llu ms after the expiry\n",
              rfaas::to_string(res.status),
              static_cast<unsigned long long>(at > l.expiry_ms ? at - l.expiry_ms : 0));
  EXPECT_GE(at + 50, l.expiry_ms) << "ended before the expiry";
  // The client is told why: the node's manager ended the allocation because
  // its lease ended (not only a closed connection). The stopped resource
  // manager does not delay it: the node's loop never waits for it.
  EXPECT_EQ(res.status, rfaas::status::lease_invalid) << rfaas::to_string(res.status) << "\n"
                                                      << manager_log();
  const std::string log = manager_log(0);
  EXPECT_NE(log.find("lease " + std::to_string(l.id) + " expired at"), std::string::npos) << log;
  EXPECT_NE(log.find("by this node's clock"), std::string::npos) << manager_log();
  // The resource manager, running again, expires it too.
  EXPECT_TRUE(wait_lease_state(l.id, "expired"));
  EXPECT_TRUE(wait_node("up"));
}

// While the resource manager is stopped (SIGSTOP), the node keeps serving at
// its own pace: a new allocation on it completes, and the lease that ends
// meanwhile (on the node's clock) ends its allocation, although every
// heartbeat and accounting report the node has for the resource manager
// finds no reader (on shm a send to a stopped process finds no room or
// never completes; such a send once held the node's loop for 5 s, then a
// connection attempt for 3 s more). The final report of that lease, queued
// while the resource manager was away, reaches it once it runs again.
TEST(RmLease, NodeServesPromptlyWhileTheResourceManagerIsStoppedAndKeepsItsReports) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  using std::chrono::steady_clock;
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease held = lease(rm);
  rfaas::executor ex(device());
  allocate(ex, held, options_of(held));
  ASSERT_TRUE(echo(ex));
  rfaas::lease fresh = lease(rm);
  const std::string log_file =
      held.parts[0].node == "n1" ? "manager.log" : held.parts[0].node + "-manager.log";
  // The held lease ends 2 s from now on the node's clock, while the
  // resource manager is stopped (as in the case above).
  rm.renew(held, 2000ms);
  const std::string renewed =
      "lease " + std::to_string(held.id) + " renewed until " + std::to_string(held.expiry_ms);
  auto notice_by = steady_clock::now() + 10s;
  while (manager_log(0, log_file).find(renewed) == std::string::npos &&
         steady_clock::now() < notice_by)
    std::this_thread::sleep_for(20ms);
  ASSERT_NE(manager_log(0, log_file).find(renewed), std::string::npos)
      << "the node never heard of the renewal: " << manager_log(3000, log_file);
  {
    ContinueRm resume;
    ASSERT_EQ(kill(g.rm.pid(), SIGSTOP), 0);
    const auto stopped = steady_clock::now();
    // The node has heartbeats (every 200 ms) and accounting reports (every
    // 300 ms) for the stopped resource manager from now on. Its loop must
    // still take a new client: each allocation below, made while the node
    // tries to reach the resource manager, completes (~0.1 s here, more
    // under a sanitizer) well before a send that waited out rdmalib's 5 s
    // post deadline would have let it.
    constexpr auto kPrompt = 4000ms;
    std::string took;
    int rounds = 0;
    const std::string expired = "lease " + std::to_string(held.id) + " expired at";
    // The held allocation is invoked too until it ends: a client that
    // drives no progress for seconds is taken for dead by its workers on
    // manual-progress providers.
    rfaas::result res;
    while (rounds < 3 || (manager_log(0, log_file).find(expired) == std::string::npos &&
                          steady_clock::now() < stopped + 15s)) {
      if (res.ok()) {
        std::vector<uint8_t> in(8), out(8);
        res = ex.execute("echo", in, out, 3000ms);
      }
      rfaas::executor next(device());
      const auto t0 = steady_clock::now();
      allocate(next, fresh, options_of(fresh));
      const bool served = echo(next);
      const auto ms = duration_cast<milliseconds>(steady_clock::now() - t0);
      took += std::to_string(ms.count()) + " ms, ";
      EXPECT_TRUE(served) << manager_log(3000, log_file);
      EXPECT_LT(ms.count(), duration_cast<milliseconds>(kPrompt).count())
          << "ms: allocation " << rounds << " while the resource manager is stopped\n"
          << manager_log(3000, log_file);
      next.deallocate();
      ++rounds;
    }
    std::printf(
        "allocations while the resource manager was stopped: %s%d in %lld ms\n", took.c_str(),
        rounds,
        static_cast<long long>(duration_cast<milliseconds>(steady_clock::now() - stopped).count()));
    // The held lease ended on the node's clock meanwhile: its executor ends,
    // and the client is told why.
    ASSERT_NE(manager_log(0, log_file).find(expired), std::string::npos)
        << manager_log(3000, log_file);
    auto deadline = steady_clock::now() + 10s;
    while (res.ok() && steady_clock::now() < deadline) {
      std::vector<uint8_t> in(8), out(8);
      res = ex.execute("echo", in, out, 3000ms);
    }
    EXPECT_EQ(res.status, rfaas::status::lease_invalid) << rfaas::to_string(res.status) << "\n"
                                                        << manager_log(3000, log_file);
  }
  // Running again, the resource manager gets the final report the node
  // queued for it while it was stopped.
  EXPECT_TRUE(wait_final_accounting(held.id)) << manager_log(3000, log_file);
  EXPECT_TRUE(wait_node("up"));
  try {
    rm.release(fresh);
  } catch (const rfaas::Error &) {
    // Ended already: the resource manager, resumed after its heartbeat
    // timeout, may have marked the node down.
  }
}

// A lease revoked before the executor manager restarts stays refused after
// the restart, with the resource manager stopped (SIGSTOP): the manager
// kept its ended leases (resource_manager.ended_leases_file), it does not
// depend on the resource manager telling it again.
TEST(RmLease, EndedLeaseStaysRefusedAfterAnExecutorManagerRestart) {
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease l = lease(rm);
  auto r = request(g.rest, "DELETE", "/leases/" + std::to_string(l.id), "", kToken);
  ASSERT_LT(r.status, 300) << r.body;
  ASSERT_TRUE(wait_node_heard_end(l.id)) << manager_log();
  ASSERT_EQ(g.manager.stop(5000ms), 0);
  const uint64_t restarted = wall_ms();
  {
    ContinueRm resume;
    ASSERT_EQ(kill(g.rm.pid(), SIGSTOP), 0);
    g.manager =
        Process({g.manager_bin, "--config", g.dir + "/manager.json"}, g.dir + "/manager.log");
    std::string line = g.manager.wait_for_line("listening on", 60s);
    ASSERT_FALSE(line.empty()) << manager_log();
    // Its new address (the port, or an "ofi:" name, changed): the stopped
    // resource manager cannot tell the client.
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r'))
      line.pop_back();
    const rfaas::server restarted_at = rfaas::server::parse(line.substr(line.rfind(' ') + 1));
    // The manager's loop may be busy trying to reach the stopped resource
    // manager (connect_ms): the client waits for it.
    rfaas::executor ex(device(), patient());
    try {
      ex.allocate(restarted_at, options_of(l));
      ADD_FAILURE() << "a restarted executor manager accepted a revoked lease";
    } catch (const rfaas::Error &e) {
      EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << e.what() << "\n" << manager_log();
    }
    const std::string log = manager_log(0);
    EXPECT_NE(log.find("ended lease(s) whose tokens have not expired read from"), std::string::npos)
        << log;
    EXPECT_NE(log.find("already ended on this node (replayed token)"), std::string::npos) << log;
  }
  // Running again, the resource manager sees the node register again.
  EXPECT_TRUE(wait_registered_after(restarted)) << manager_log();
}

TEST(RmLease, KilledExecutorManagerIsMarkedDownAndTheOtherNodeKeepsWorking) {
  ASSERT_TRUE(wait_node("up"));
  ASSERT_TRUE(second_node()) << manager_log(3000, "n2-manager.log");
  // One lease on each node: spread puts the second on the node the first
  // left with more free cores; lease until both nodes hold one.
  rfaas::resource_manager holder(device(), g.fabric, "tester", patient());
  std::vector<rfaas::lease> held;
  rfaas::lease on1, on2;
  while (!on1.id || !on2.id) {
    ASSERT_LT(held.size(), 8u) << "no lease went to one of the nodes";
    held.push_back(lease(holder));
    rfaas::lease &l = held.back();
    if (l.parts[0].node == "n1" && !on1.id)
      on1 = l;
    else if (l.parts[0].node == "n2" && !on2.id)
      on2 = l;
  }
  rfaas::executor ex1(device()), ex2(device());
  // Several slots per worker on the node that dies: each timed-out
  // invocation keeps one, and the next call posts into another.
  constexpr uint32_t kSlots = 3;
  rfaas::allocation_options o1 = options_of(on1);
  o1.slots = kSlots;
  allocate(ex1, on1, o1);
  allocate(ex2, on2, options_of(on2));
  ASSERT_TRUE(echo(ex1));
  ASSERT_TRUE(echo(ex2));
  g.manager.kill_now();
  // The node's executors end with it: the client's invocations fail.
  // Connected endpoints report the close (`closed`); reliable-datagram
  // endpoints do not report a vanished peer, there the invocation's deadline
  // ends it (`timeout`). Each try is short and ex2 is invoked between tries:
  // on manual-progress datagram fabrics (tcp;ofi_rxm) n2's workers take a
  // client that drives no progress for ~4 s for dead (docs/client.md), and a
  // long wait here once outlasted that.
  const bool connected = device().endpoint == rdmalib::EndpointPreference::Connected;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  rfaas::result res;
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<uint8_t> in(8), out(8);
    res = ex1.execute("echo", in, out, 300ms);
    // Connected: a try may time out (then the next finds the slot held,
    // busy) before the close is seen; keep trying until it is.
    const bool before_close =
        res.status == rfaas::status::timeout || res.status == rfaas::status::busy;
    if (!res.ok() && (!before_close || !connected))
      break;
    ASSERT_TRUE(echo(ex2)) << manager_log(3000, "n2-manager.log");
  }
  if (res.status == rfaas::status::timeout) {
    // The invocation that timed out keeps its slot (its result could still
    // come): the next calls post into the other slots and time out within
    // their own deadline, although the provider may refuse posts to the
    // dead node while it tries to reconnect (tcp;ofi_rxm). With every slot
    // so held, the next call is busy (docs/client.md), or times out again
    // where the provider has failed a write by then and freed its slot.
    std::vector<uint8_t> in(8), out(8);
    for (uint32_t i = 1; i < o1.cores * kSlots; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      rfaas::result again = ex1.execute("echo", in, out, 300ms);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - t0);
      std::printf("invocation %u on the dead node: %s after %lld ms\n", i,
                  rfaas::to_string(again.status), static_cast<long long>(ms.count()));
      EXPECT_EQ(again.status, rfaas::status::timeout) << rfaas::to_string(again.status);
      EXPECT_LT(ms.count(), 1300) << "ms: invocation " << i << " with a 300 ms deadline";
      ASSERT_TRUE(echo(ex2)) << manager_log(3000, "n2-manager.log");
    }
    const auto t0 = std::chrono::steady_clock::now();
    rfaas::result again = ex1.execute("echo", in, out, 300ms);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1300ms);
    EXPECT_TRUE(again.status == rfaas::status::busy || again.status == rfaas::status::timeout)
        << rfaas::to_string(again.status);
  }
  if (connected)
    EXPECT_EQ(res.status, rfaas::status::closed) << rfaas::to_string(res.status);
  else
    EXPECT_TRUE(res.status == rfaas::status::closed || res.status == rfaas::status::timeout)
        << rfaas::to_string(res.status);
  // The other node's allocation keeps serving, all the while the resource
  // manager finds the node down: connected providers report the close at
  // once, datagram providers let the heartbeat timeout (5 s here) find it.
  // Invoking meanwhile also keeps this client alive on manual-progress
  // datagram fabrics (tcp;ofi_rxm), where the workers' liveness read
  // completes only while the client drives progress (docs/client.md).
  EXPECT_TRUE(echo(ex2)) << manager_log(3000, "n2-manager.log");
  bool down = false;
  for (auto until = std::chrono::steady_clock::now() + 30s;
       !down && std::chrono::steady_clock::now() < until;) {
    ASSERT_TRUE(echo(ex2)) << manager_log(3000, "n2-manager.log");
    down = node_view("n1").value("state", "") == "down";
    if (!down)
      std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(down) << node_view("n1").dump();
  EXPECT_EQ(node_view("n2").value("state", ""), "up");
  // Marking the node down ended its leases at once, with the reason: their
  // cores are free, and renewing one is refused with a message naming the
  // node. The other node's lease is untouched.
  EXPECT_TRUE(wait_lease_state(on1.id, "node_down"));
  EXPECT_EQ(node_view("n1")["cores_used"].get<uint32_t>(), 0u) << node_view("n1").dump();
  EXPECT_EQ(node_view("n1")["active_leases"].get<size_t>(), 0u) << node_view("n1").dump();
  EXPECT_TRUE(lease_active(on2.id));
  try {
    holder.renew(on1, 30s);
    ADD_FAILURE() << "renewed a lease of a node that is down";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.code(), rfaas::status::lease_invalid) << e.what();
    EXPECT_NE(std::string(e.what()).find("node n1 went down"), std::string::npos) << e.what();
  }
  holder.renew(on2, 60s);
  // New leases go to the node that is up, and serve.
  rfaas::resource_manager rm(device(), g.fabric, "tester", patient());
  rfaas::lease fresh = lease(rm);
  ASSERT_EQ(fresh.parts.size(), 1u);
  EXPECT_EQ(fresh.parts[0].node, "n2");
  {
    rfaas::executor ex(device());
    allocate(ex, fresh, options_of(fresh));
    EXPECT_TRUE(echo(ex)) << manager_log(3000, "n2-manager.log");
  }
  EXPECT_TRUE(echo(ex2));
  // The down node takes no new lease although it has free cores: with the
  // other node full, nothing is left.
  rm.release(fresh);
  json n1 = node_view("n1"), n2 = node_view("n2");
  ASSERT_LT(n1["cores_used"].get<uint32_t>(), n1["cores"].get<uint32_t>()) << n1.dump();
  const uint32_t free2 = n2["cores"].get<uint32_t>() - n2["cores_used"].get<uint32_t>();
  rfaas::lease fill;
  if (free2)
    fill = rm.lease(free2, 64, 30s);
  try {
    rm.lease(1, 64, 10s);
    ADD_FAILURE() << "leased from a node that is down";
  } catch (const rfaas::Error &e) {
    EXPECT_EQ(e.code(), rfaas::status::resources_unavailable) << e.what();
  }
  if (fill.id)
    rm.release(fill);
  // Giving up the dead node's allocation ends within the goodbyes' deadlines
  // (2 s each, the worker's and the manager's), not the posts' longer one:
  // a datagram provider may refuse posts to a vanished peer for 5 s.
  const auto t0 = std::chrono::steady_clock::now();
  ex1.deallocate();
  const auto took =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  EXPECT_LT(took, 2 * rfaas::timeouts{}.shutdown + 2s)
      << "deallocate took " << took.count() << " ms";
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  g.self = len > 0 ? std::string(self, static_cast<size_t>(len)) : argv[0];
  std::string hold;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      g.device = argv[++i];
    else if (a == "--devices" && i + 1 < argc)
      g.devices = argv[++i];
    else if (a == "--manager-device" && i + 1 < argc)
      g.manager_device = argv[++i];
    else if (a == "--host" && i + 1 < argc)
      g.host = argv[++i];
    else if (a == "--hold-lease" && i + 1 < argc)
      hold = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [gtest options] --device NAME [--devices FILE] "
                   "[--manager-device NAME] [--host IP]\n",
                   argv[0]);
      return 2;
    }
  }
  if (g.manager_device.empty())
    g.manager_device = g.device;
  if (!hold.empty())
    return hold_lease(hold);
  char tmpl[] = "/tmp/rfaas-rm-lease-XXXXXX";
  if (!mkdtemp(tmpl))
    return 1;
  g.dir = tmpl;
  int rc = 1;
  if (!start_rm(0)) {
    std::fprintf(stderr, "the resource manager did not start\n");
  } else if (add_node("n1", kSecret)) { // says why when it fails
    if (!start_manager(g.manager))
      std::fprintf(stderr, "the executor manager did not register:\n%s\n", manager_log().c_str());
    else
      rc = RUN_ALL_TESTS();
  }
  if (g.manager.running())
    g.manager.stop(5000ms);
  if (g.manager2.running())
    g.manager2.stop(5000ms);
  if (g.rm.running()) {
    int status = g.rm.stop(5000ms);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "the resource manager did not stop cleanly (status %d)\n", status);
      rc = 1;
    }
  }
  if (rc == 0)
    std::system(("rm -rf '" + g.dir + "'").c_str());
  else
    std::fprintf(stderr, "logs kept in %s\n", g.dir.c_str());
  return rc;
}
