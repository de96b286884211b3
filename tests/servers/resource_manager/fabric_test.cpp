// The resource manager's fabric side with real processes: one resource_manager
// binary per run (on the device given with --device), nodes and clients
// played by this test over rdmalib and the ControlChannel, exactly as an
// executor manager and librfaas speak to it. Covers registration (and its
// refusals), heartbeats, lease / renew / release, expiry and revocation
// notices to the node, a node's connection closing (node down), and garbage
// on the wire.
//
//   rfaas_rm_fabric_tests --device lo-tcp
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include <rdmalib/rdmalib.hpp>

#include "../../e2e/process.hpp"
#include "http_client.hpp"
#include "munged.hpp"
#include "protocol/control_channel.hpp"
#include "protocol/rm_messages.hpp"
#include "resource_manager/lease_token.hpp"

namespace proto = rfaas::protocol;
using namespace std::chrono_literals;
using json = nlohmann::json;
using rfaas::http::request;

namespace {

struct Globals {
  std::string devices = RFAAS_RM_DEVICES;
  std::string device = "lo-tcp";
  std::string binary = RFAAS_RM_BINARY;
} g;

constexpr const char *kToken = "fabric-test-admin-token-0123456789";

std::string secret_hex(char c) { return std::string(64, c); }
rfaas::rm::NodeSecret secret_of(char c) {
  rfaas::rm::NodeSecret s;
  rfaas::rm::from_hex(secret_hex(c), s);
  return s;
}

uint64_t wall_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

proto::ControlClock::time_point in(std::chrono::milliseconds d) {
  return proto::ControlClock::now() + d;
}

/// One resource manager for the whole run.
class ResourceManager {
public:
  /// `fabric` overrides keys of the configuration's fabric block, `top`
  /// keys of the whole configuration.
  void start(const json &fabric_overrides = json::object(), const json &top = json::object()) {
    char tmpl[] = "/tmp/rfaas-rm-fabric-XXXXXX";
    if (!mkdtemp(tmpl))
      throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    json cfg = {{"database", dir_ + "/rm.sqlite"},
                {"http", {{"host", "127.0.0.1"}, {"port", 0}, {"token", kToken}}},
                {"fabric",
                 {{"device_database", g.devices},
                  {"device", g.device},
                  {"port", 0},
                  {"heartbeat_ms", 200},
                  // tcp;ofi_rxm connects lazily, slowly on a loaded machine.
                  {"accept_timeout_ms", 5000},
                  {"idle_timeout_ms", 2000}}},
                {"leases", {{"default_duration_ms", 60000}}},
                {"nodes", {{"heartbeat_timeout_ms", 60000}}},
                {"tick_ms", 50},
                {"log", {{"level", "warn"}}}};
    cfg["fabric"].update(fabric_overrides);
    cfg.update(top);
    std::ofstream(dir_ + "/rm.json") << cfg.dump(2);
    launch();
  }
  /// Kills it (SIGKILL: a crash, nothing flushed or committed) and starts
  /// it again on the same database and configuration.
  void crash_and_restart() {
    proc_.kill_now();
    launch();
  }
  void launch() {
    // The readiness lines go to stderr: merge it into the pipe the test reads.
    proc_ = rfaas::e2e::Process(
        {"/bin/sh", "-c", "exec \"$0\" --config \"$1\" 2>&1", g.binary, dir_ + "/rm.json"}, "");
    std::string fabric = proc_.wait_for_line("resource_manager: fabric on ", 30s);
    if (fabric.empty())
      throw std::runtime_error("resource_manager did not open its fabric (see its output)");
    fabric_line_ = fabric;
    size_t at = fabric.find(" on ") + 4;
    address_ = rdmalib::Address::parse(fabric.substr(at, fabric.find(' ', at) - at));
    std::string ready = proc_.wait_for_line("resource_manager: ready, REST on ", 30s);
    if (ready.empty())
      throw std::runtime_error("resource_manager did not become ready");
    rest_port_ = static_cast<uint16_t>(std::stoi(ready.substr(ready.rfind(':') + 1)));
  }
  void stop() {
    if (proc_.running())
      proc_.stop(5000ms);
    if (!dir_.empty())
      std::system(("rm -rf '" + dir_ + "'").c_str());
  }
  const rdmalib::Address &address() const { return address_; }
  std::string database() const { return dir_ + "/rm.sqlite"; }
  uint16_t rest() const { return rest_port_; }
  /// Its "resource_manager: fabric on ..." line.
  const std::string &fabric_line() const { return fabric_line_; }
  rfaas::e2e::Process &process() { return proc_; }

private:
  std::string dir_;
  std::string fabric_line_;
  rfaas::e2e::Process proc_;
  rdmalib::Address address_;
  uint16_t rest_port_ = 0;
};

ResourceManager *rm = nullptr;

/// A test's own resource manager, stopped when the test ends (also when an
/// assertion returns early).
struct StopAtEnd {
  ResourceManager &m;
  ~StopAtEnd() { m.stop(); }
};

rdmalib::Fabric *fabric = nullptr;

/// A connection to the resource manager, as a node or a client.
struct Peer {
  proto::ControlChannel channel;
  rdmalib::Connection conn;

  explicit Peer(ResourceManager *to = nullptr) {
    if (!to)
      to = rm;
    proto::ClientHello hello;
    uint8_t pd[sizeof hello];
    proto::encode(hello, pd, sizeof pd);
    rdmalib::ConnectionOptions opts;
    opts.recv_depth = 10;
    opts.refused_retries = 3;
    conn = rdmalib::Connection::connect(*fabric, to->address(), pd, sizeof pd, 5000ms, opts);
    proto::ControlOptions copts;
    copts.receives = 8;
    copts.receive_size = proto::kMaxLeaseGrantSize;
    copts.send_size = proto::kMaxResourceManagerRequest;
    channel = proto::ControlChannel(*fabric, conn, copts);
  }
  ~Peer() { conn.close(); }

  proto::NodeRegistered register_node(const std::string &name, char secret, uint32_t cores = 4,
                                      uint64_t timestamp = 0) {
    proto::NodeRegister reg;
    reg.cores = cores;
    reg.memory_mib = 4096;
    // The resource manager refuses a signed time it has seen (a replay): two
    // registrations within one millisecond (it answers that fast) get
    // increasing times, as two of a real node would.
    static uint64_t last_signed = 0;
    last_signed = std::max(last_signed + 1, wall_ms());
    reg.timestamp_ms = timestamp ? timestamp : last_signed;
    proto::set_text(reg.node, name);
    proto::set_text(reg.address, "127.0.0.1:" + std::to_string(20000 + name.size()));
    rfaas::rm::RegistrationClaim claim{name, proto::get_text(reg.address).data(), reg.cores,
                                       reg.memory_mib, reg.timestamp_ms};
    auto proof = rfaas::rm::registration_proof(claim, secret_of(secret));
    std::memcpy(reg.proof.bytes, proof.data(), proof.size());
    proto::NodeRegistered answer;
    proto::ChannelStatus s = channel.send_and_await(reg, answer, in(10s));
    EXPECT_EQ(s, proto::ChannelStatus::Ok) << proto::to_string(s);
    return answer;
  }

  proto::LeaseGrant request(uint32_t cores, uint64_t duration_ms,
                            std::vector<proto::LeaseGrantPart> &parts,
                            const std::string &client = "alice") {
    proto::LeaseRequest req = lease_request(cores, duration_ms, client);
    EXPECT_EQ(channel.send(req, in(5s)), proto::ChannelStatus::Ok);
    return await_grant(parts);
  }

  static proto::LeaseRequest lease_request(uint32_t cores, uint64_t duration_ms,
                                           const std::string &client = "alice") {
    proto::LeaseRequest req;
    req.cores = cores;
    req.memory_mib = 256;
    req.duration_ms = duration_ms;
    proto::set_text(req.client, client);
    return req;
  }

  proto::LeaseGrant await_grant(std::vector<proto::LeaseGrantPart> &parts) {
    proto::LeaseGrant grant;
    proto::ControlMessage m = channel.next(in(10s));
    EXPECT_EQ(m.status, proto::ChannelStatus::Ok) << proto::to_string(m.status);
    if (m.status != proto::ChannelStatus::Ok)
      return grant;
    proto::WireResult r = proto::decode(m.data, m.size, grant, parts);
    EXPECT_TRUE(r.ok()) << proto::describe(r);
    return grant;
  }

  template <class M> proto::LeaseGrant ask(const M &m, std::vector<proto::LeaseGrantPart> &parts) {
    EXPECT_EQ(channel.send(m, in(5s)), proto::ChannelStatus::Ok);
    return await_grant(parts);
  }

  /// Notices of a LeasesEnded not handed out yet.
  std::deque<proto::LeaseEnded> notices;
  /// Messages that brought notices (LeaseEnded or LeasesEnded).
  size_t notice_messages = 0;

  /// The next lease-ended notice, sent alone (LeaseEnded) or with others
  /// (LeasesEnded); a node receives nothing else. Lease id 0 on failure.
  proto::LeaseEnded await_ended() {
    if (notices.empty()) {
      proto::ControlMessage m = channel.next(in(10s));
      EXPECT_EQ(m.status, proto::ChannelStatus::Ok) << proto::to_string(m.status);
      if (m.status != proto::ChannelStatus::Ok)
        return {};
      ++notice_messages;
      if (m.header.type == proto::MessageType::LeaseEnded) {
        proto::LeaseEnded e;
        proto::WireResult r = proto::decode(m.data, m.size, e);
        EXPECT_TRUE(r.ok()) << proto::describe(r);
        return e;
      }
      EXPECT_EQ(m.header.type, proto::MessageType::LeasesEnded) << proto::to_string(m.header.type);
      proto::LeasesEnded head;
      std::vector<proto::LeaseEnded> got;
      proto::WireResult r = proto::decode(m.data, m.size, head, got);
      EXPECT_TRUE(r.ok()) << proto::describe(r);
      notices.insert(notices.end(), got.begin(), got.end());
      if (notices.empty())
        return {};
    }
    proto::LeaseEnded e = notices.front();
    notices.pop_front();
    return e;
  }
};

/// Adds node `name` to `m` through REST, as an operator would. Its address
/// is never dialled: the tests' nodes connect themselves.
void add_node(ResourceManager &m, const std::string &name, char secret, uint32_t cores = 4) {
  json body = {{"name", name},
               {"address", "127.0.0.1:" + std::to_string(20000 + name.size())},
               {"cores", cores},
               {"memory_mib", 4096},
               {"secret", secret_hex(secret)}};
  auto r = request(m.rest(), "POST", "/nodes", body.dump(), kToken);
  ASSERT_EQ(r.status, 201) << r.body;
}

/// The same on the resource manager the tests share.
void add_node(const std::string &name, char secret, uint32_t cores = 4) {
  add_node(*rm, name, secret, cores);
}

/// GET `path` of the REST API on `port` once its table is dated after this
/// call began (GET /nodes and /leases are the loop's snapshots: a lease
/// just granted over the fabric may miss from an earlier one). Polls,
/// bounded by 10 s.
json fresh(uint16_t port, const std::string &path) {
  const uint64_t asked = wall_ms();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  for (;;) {
    auto r = request(port, "GET", path, "", kToken);
    const std::string generated = r.header("X-Rfaas-Generated-Ms");
    if (r.status != 200 || generated.empty() || std::stoull(generated) > asked ||
        std::chrono::steady_clock::now() > deadline) {
      EXPECT_EQ(r.status, 200) << r.body;
      return r.status == 200 ? json::parse(r.body) : json::array();
    }
    std::this_thread::sleep_for(1ms);
  }
}

json node_view(const std::string &name) {
  for (const json &n : fresh(rm->rest(), "/nodes"))
    if (n["name"] == name)
      return n;
  return json();
}

/// Waits (bounded) until the node's state is `state`, polling the REST API.
bool wait_state(const std::string &name, const std::string &state) {
  auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (node_view(name).value("state", "") == state)
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

} // namespace

TEST(RmFabric, NodeRegistersAndClientLeasesRenewsReleases) {
  add_node("alpha", 'a');
  Peer node;
  proto::NodeRegistered reg = node.register_node("alpha", 'a');
  ASSERT_EQ(reg.status, proto::ErrorCode::Ok) << proto::get_text(reg.message);
  EXPECT_EQ(reg.heartbeat_ms, 200u);
  proto::Heartbeat hb;
  hb.sequence = 1;
  EXPECT_EQ(node.channel.post(hb), proto::ChannelStatus::Ok);
  EXPECT_TRUE(wait_state("alpha", "up"));

  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant grant = client.request(2, 30000, parts);
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(proto::get_text(parts[0].node), "alpha");
  EXPECT_EQ(proto::get_text(parts[0].address), "127.0.0.1:20005");
  EXPECT_EQ(parts[0].cores, 2u);
  EXPECT_GT(grant.expiry_ms, wall_ms());

  // The node verifies the token on its own, with its secret.
  rfaas::rm::TokenVerifier verifier("alpha", secret_of('a'));
  rfaas::rm::LeaseClaim claim{grant.lease_id,      "alpha",         parts[0].cores,
                              parts[0].memory_mib, grant.expiry_ms, "alice"};
  rfaas::rm::LeaseToken token;
  std::memcpy(token.data(), parts[0].token.bytes, token.size());
  EXPECT_EQ(verifier.verify(claim, token, wall_ms()), rfaas::rm::TokenVerdict::Ok);
  claim.cores = 3; // a client that claims more than it was granted
  EXPECT_EQ(verifier.verify(claim, token, wall_ms()), rfaas::rm::TokenVerdict::Forged);

  // A stranger who read the lease's id and client name (GET /leases) can
  // neither renew nor release it without the secret only the grant carried.
  EXPECT_FALSE(proto::equal(grant.secret, proto::Token{}));
  {
    Peer stranger;
    proto::LeaseRenew steal;
    steal.lease_id = grant.lease_id;
    proto::set_text(steal.client, "alice");
    std::vector<proto::LeaseGrantPart> stolen;
    proto::LeaseGrant r = stranger.ask(steal, stolen);
    EXPECT_EQ(r.status, proto::ErrorCode::LeaseInvalid);
    EXPECT_NE(std::string(proto::get_text(r.message)).find("wrong lease secret"), std::string::npos)
        << proto::get_text(r.message);
    EXPECT_TRUE(stolen.empty());
    proto::LeaseRelease end;
    end.lease_id = grant.lease_id;
    end.secret.bytes[0] = 1;
    proto::set_text(end.client, "alice");
    EXPECT_EQ(stranger.ask(end, stolen).status, proto::ErrorCode::LeaseInvalid);
  }

  proto::LeaseRenew renew;
  renew.lease_id = grant.lease_id;
  renew.duration_ms = 50000;
  renew.secret = grant.secret;
  proto::set_text(renew.client, "alice");
  std::vector<proto::LeaseGrantPart> renewed_parts;
  proto::LeaseGrant renewed = client.ask(renew, renewed_parts);
  ASSERT_EQ(renewed.status, proto::ErrorCode::Ok) << proto::get_text(renewed.message);
  EXPECT_EQ(renewed.lease_id, grant.lease_id);
  EXPECT_GT(renewed.expiry_ms, grant.expiry_ms);
  ASSERT_EQ(renewed_parts.size(), 1u);
  EXPECT_FALSE(proto::equal(renewed_parts[0].token, parts[0].token));

  EXPECT_TRUE(proto::equal(renewed.secret, proto::Token{})) << "sent once, with the grant";
  // The node hears of the renewal: it ends the lease's allocations at the
  // new expiry by its own clock.
  proto::LeaseEnded extended = node.await_ended();
  EXPECT_EQ(extended.lease_id, grant.lease_id);
  EXPECT_EQ(extended.why, proto::LeaseEndReason::Renewed);
  EXPECT_EQ(extended.expiry_ms, renewed.expiry_ms);
  // Another client cannot release it, even with the secret.
  proto::LeaseRelease release;
  release.lease_id = grant.lease_id;
  release.secret = grant.secret;
  proto::set_text(release.client, "mallory");
  std::vector<proto::LeaseGrantPart> none;
  EXPECT_EQ(client.ask(release, none).status, proto::ErrorCode::LeaseInvalid);
  proto::set_text(release.client, "alice");
  proto::LeaseGrant released = client.ask(release, none);
  EXPECT_EQ(released.status, proto::ErrorCode::Ok) << proto::get_text(released.message);
  EXPECT_TRUE(none.empty());

  proto::LeaseEnded ended = node.await_ended();
  EXPECT_EQ(ended.lease_id, grant.lease_id);
  EXPECT_EQ(ended.why, proto::LeaseEndReason::Released);
  // Released twice: the lease is unknown now.
  EXPECT_EQ(client.ask(release, none).status, proto::ErrorCode::LeaseInvalid);

  // Every answered fabric request was timed: one registration, one lease,
  // one renewal and three releases (at least: other cases share the process).
  const std::string metrics = request(rm->rest(), "GET", "/metrics").body;
  auto count = [&](const char *kind) {
    const std::string key = std::string("rfaas_rm_request_duration_seconds_count{interface=") +
                            "\"fabric\",kind=\"" + kind + "\"} ";
    size_t at = metrics.find(key);
    return at == std::string::npos ? -1 : std::atol(metrics.c_str() + at + key.size());
  };
  EXPECT_GE(count("register"), 1) << metrics;
  EXPECT_GE(count("lease"), 1) << metrics;
  EXPECT_GE(count("renew"), 1) << metrics;
  EXPECT_GE(count("release"), 3) << metrics;
}

TEST(RmFabric, RegistrationIsRefusedWithoutTheRightProof) {
  add_node("bravo", 'b');
  {
    Peer stranger;
    proto::NodeRegistered r = stranger.register_node("nobody", 'b');
    EXPECT_EQ(r.status, proto::ErrorCode::LeaseInvalid);
    EXPECT_NE(std::string(proto::get_text(r.message)).find("unknown node"), std::string::npos)
        << proto::get_text(r.message);
  }
  {
    Peer forger; // knows the name, not the secret
    proto::NodeRegistered r = forger.register_node("bravo", 'c');
    EXPECT_EQ(r.status, proto::ErrorCode::LeaseInvalid);
    EXPECT_NE(std::string(proto::get_text(r.message)).find("proof"), std::string::npos);
  }
  {
    Peer stale; // a registration signed an hour ago
    proto::NodeRegistered r = stale.register_node("bravo", 'b', 4, wall_ms() - 3600'000);
    EXPECT_EQ(r.status, proto::ErrorCode::LeaseInvalid);
  }
  uint64_t ts = wall_ms();
  {
    Peer good;
    EXPECT_EQ(good.register_node("bravo", 'b', 4, ts).status, proto::ErrorCode::Ok);
  }
  {
    Peer replay; // the same signed message again
    proto::NodeRegistered r = replay.register_node("bravo", 'b', 4, ts);
    EXPECT_EQ(r.status, proto::ErrorCode::LeaseInvalid);
    EXPECT_NE(std::string(proto::get_text(r.message)).find("replayed"), std::string::npos);
  }
}

TEST(RmFabric, ExpiryAndRevocationReachTheNodeAndFreeTheCores) {
  add_node("charlie", 'c', 2);
  Peer node;
  ASSERT_EQ(node.register_node("charlie", 'c', 2).status, proto::ErrorCode::Ok);
  // Drain the other nodes' capacity out of the way: ask for this node's two cores.
  auto r = request(rm->rest(), "POST", "/nodes/alpha/drain", "", kToken);
  request(rm->rest(), "POST", "/nodes/bravo/drain", "", kToken);
  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant short_lease = client.request(2, 1000, parts, "bob");
  ASSERT_EQ(short_lease.status, proto::ErrorCode::Ok) << proto::get_text(short_lease.message);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(proto::get_text(parts[0].node), "charlie");
  // Every core is taken now.
  EXPECT_EQ(client.request(1, 1000, parts, "bob").status, proto::ErrorCode::ResourcesUnavailable);

  proto::LeaseEnded expired = node.await_ended();
  EXPECT_EQ(expired.lease_id, short_lease.lease_id);
  EXPECT_EQ(expired.why, proto::LeaseEndReason::Expired);

  // Expiry freed both cores.
  proto::LeaseGrant second = client.request(2, 60000, parts, "bob");
  ASSERT_EQ(second.status, proto::ErrorCode::Ok) << proto::get_text(second.message);
  auto revoke =
      request(rm->rest(), "DELETE", "/leases/" + std::to_string(second.lease_id), "", kToken);
  EXPECT_LT(revoke.status, 300) << revoke.body;
  proto::LeaseEnded revoked = node.await_ended();
  EXPECT_EQ(revoked.lease_id, second.lease_id);
  EXPECT_EQ(revoked.why, proto::LeaseEndReason::Revoked);
}

TEST(RmFabric, ANodeWhoseConnectionClosesIsMarkedDownAndComesBack) {
  add_node("delta", 'd');
  {
    Peer node;
    ASSERT_EQ(node.register_node("delta", 'd').status, proto::ErrorCode::Ok);
    EXPECT_TRUE(wait_state("delta", "up"));
    proto::Shutdown bye; // what a stopping executor manager says
    EXPECT_EQ(node.channel.send(bye, in(5s)), proto::ChannelStatus::Ok);
  }
  EXPECT_TRUE(wait_state("delta", "down"));
  Peer again;
  EXPECT_EQ(again.register_node("delta", 'd').status, proto::ErrorCode::Ok);
  EXPECT_TRUE(wait_state("delta", "up"));
}

// A registered node's connection that sends a NodeRegister which is refused
// (here a replay of its own) is closed; the node goes down and the resource
// manager forgets the connection. It used to keep pointing at the freed
// connection: the node stayed "up", and the next registration or notice for
// it went through freed memory (AddressSanitizer aborts the resource manager
// in the sanitizer build).
TEST(RmFabric, ARefusedSecondRegistrationOnARegisteredConnectionMarksTheNodeDown) {
  add_node("echo", 'e');
  const uint64_t ts = wall_ms();
  {
    Peer node;
    ASSERT_EQ(node.register_node("echo", 'e', 4, ts).status, proto::ErrorCode::Ok);
    EXPECT_TRUE(wait_state("echo", "up"));
    proto::NodeRegistered again = node.register_node("echo", 'e', 4, ts);
    EXPECT_EQ(again.status, proto::ErrorCode::LeaseInvalid);
    EXPECT_NE(std::string(proto::get_text(again.message)).find("replayed"), std::string::npos)
        << proto::get_text(again.message);
    EXPECT_TRUE(wait_state("echo", "down"));
  }
  {
    // A registered connection may not speak for a second node either.
    add_node("echo2", 'f');
    Peer other;
    ASSERT_EQ(other.register_node("echo2", 'f').status, proto::ErrorCode::Ok);
    proto::NodeRegistered hijack = other.register_node("echo", 'e');
    EXPECT_EQ(hijack.status, proto::ErrorCode::BadRequest);
    EXPECT_NE(std::string(proto::get_text(hijack.message)).find("registered as node echo2"),
              std::string::npos)
        << proto::get_text(hijack.message);
    EXPECT_TRUE(wait_state("echo2", "down"));
  }
  EXPECT_EQ(node_view("echo").value("state", ""), "down");
  // The node registers again and receives its notices: nothing refers to the
  // connection that went.
  Peer node;
  ASSERT_EQ(node.register_node("echo", 'e').status, proto::ErrorCode::Ok);
  EXPECT_TRUE(wait_state("echo", "up"));
  for (const char *n : {"alpha", "bravo", "charlie", "delta"})
    request(rm->rest(), "POST", std::string("/nodes/") + n + "/drain", "", kToken);
  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant grant = client.request(1, 60000, parts, "erin");
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(proto::get_text(parts[0].node), "echo");
  auto revoke =
      request(rm->rest(), "DELETE", "/leases/" + std::to_string(grant.lease_id), "", kToken);
  EXPECT_LT(revoke.status, 300) << revoke.body;
  EXPECT_EQ(node.await_ended().lease_id, grant.lease_id);
  EXPECT_EQ(request(rm->rest(), "GET", "/health").status, 200);
}

// Hundreds of leases ending in one tick: the node receives every notice and
// stays up. The notices used to go into the node's send queue at once, whose
// limit (256 queued messages) then dropped the node and marked it down.
TEST(RmFabric, ABurstOfEndedLeasesReachesTheNodeAndLeavesItUp) {
  constexpr uint32_t kLeases = 400;
  add_node("foxtrot", '7', kLeases);
  Peer node;
  ASSERT_EQ(node.register_node("foxtrot", '7', kLeases).status, proto::ErrorCode::Ok);
  for (const char *n : {"alpha", "bravo", "charlie", "delta", "echo", "echo2"})
    request(rm->rest(), "POST", std::string("/nodes/") + n + "/drain", "", kToken);
  // The node sends heartbeats all along (it is busy, not gone): on an
  // emulated CPU the test runs past the resource manager's heartbeat
  // timeout (60 s), and on verbs a sender whose peer has no receive posted
  // retries after rdma_cm's RNR timer (655 ms), so the 400 notices take
  // tens of seconds to reach it.
  auto last_beat = std::chrono::steady_clock::now();
  uint64_t beats = 0;
  auto beat = [&] {
    if (std::chrono::steady_clock::now() - last_beat < 1s)
      return;
    proto::Heartbeat hb;
    hb.sequence = ++beats;
    EXPECT_EQ(node.channel.send(hb, in(5s)), proto::ChannelStatus::Ok);
    last_beat = std::chrono::steady_clock::now();
  };
  Peer client;
  auto lease = [&](uint64_t duration_ms) {
    proto::LeaseRequest req;
    req.cores = 1;
    req.memory_mib = 1;
    req.duration_ms = duration_ms;
    proto::set_text(req.client, "frank");
    std::vector<proto::LeaseGrantPart> parts;
    return client.ask(req, parts);
  };
  // How long granting takes here: 3 s covers 400 grants on the host, not
  // under an emulated CPU (the soft-RoCE VM runs this suite under TCG). A
  // few grants, revoked again, set the window: three times their median
  // (the first grants of a run are the slowest).
  constexpr size_t kProbes = 9;
  std::vector<int64_t> probe_us;
  for (size_t i = 0; i < kProbes; ++i) {
    const auto asked = std::chrono::steady_clock::now();
    proto::LeaseGrant probe = lease(60000);
    probe_us.push_back(std::chrono::duration_cast<std::chrono::microseconds>(
                           std::chrono::steady_clock::now() - asked)
                           .count());
    ASSERT_EQ(probe.status, proto::ErrorCode::Ok) << proto::get_text(probe.message);
    auto r = request(rm->rest(), "DELETE", "/leases/" + std::to_string(probe.lease_id), "", kToken);
    ASSERT_LT(r.status, 300) << r.body;
    EXPECT_EQ(node.await_ended().lease_id, probe.lease_id);
  }
  std::nth_element(probe_us.begin(), probe_us.begin() + kProbes / 2, probe_us.end());
  const uint64_t window_ms =
      std::max<uint64_t>(3000, 3 * kLeases * static_cast<uint64_t>(probe_us[kProbes / 2]) / 1000);
  std::printf("grants take %.1f ms here (median of %zu): leases end together in %llu ms\n",
              static_cast<double>(probe_us[kProbes / 2]) / 1000, kProbes,
              static_cast<unsigned long long>(window_ms));
  // Every lease asks to end at the same wall-clock instant, so the
  // resource manager's expiry check ends them together.
  const uint64_t end_at = wall_ms() + window_ms;
  std::set<uint64_t> granted;
  for (uint32_t i = 0; i < kLeases; ++i) {
    const uint64_t now = wall_ms();
    ASSERT_LT(now + 100, end_at) << "granting took too long for the leases to end together (" << i
                                 << " of " << kLeases << " in " << window_ms << " ms)";
    proto::LeaseGrant grant = lease(end_at - now);
    ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << i << ": " << proto::get_text(grant.message);
    granted.insert(grant.lease_id);
    beat();
  }
  const uint64_t done = wall_ms();
  ASSERT_LT(done, end_at) << "granting took too long for the leases to end together";
  // The node does not read until every lease has ended at the resource
  // manager: its notices pile up on the resource manager's side (on shm a
  // send completes only once the node takes it).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(end_at - done) + 20s;
  while (node_view("foxtrot").value("cores_used", -1) != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    beat();
    std::this_thread::sleep_for(20ms);
  }
  std::set<uint64_t> ended;
  node.notice_messages = 0;
  for (uint32_t i = 0; i < kLeases; ++i) {
    beat();
    proto::LeaseEnded e = node.await_ended();
    if (e.lease_id == 0)
      break; // await_ended reported the failure
    EXPECT_EQ(e.why, proto::LeaseEndReason::Expired);
    ended.insert(e.lease_id);
  }
  EXPECT_EQ(ended, granted);
  // Those that ended while a message was on its way went together (128 at
  // most in one): a few messages, not one per lease.
  std::printf("%zu notices in %zu messages\n", ended.size(), node.notice_messages);
  EXPECT_LE(node.notice_messages, kLeases / 8);
  EXPECT_EQ(node_view("foxtrot").value("state", ""), "up");
  EXPECT_EQ(node_view("foxtrot").value("cores_used", -1), 0);
}

// Clients cannot take the slots kept for nodes, and an idle client's
// connection closes (its slot is free again).
TEST(RmFabric, IdleClientsCloseAndSlotsStayFreeForNodes) {
  ResourceManager small;
  small.start(json{{"max_connections", 4},
                   {"reserved_for_nodes", 2},
                   {"client_idle_timeout_ms", 1500},
                   {"idle_timeout_ms", 60000}});
  StopAtEnd stop{small};
  auto ask = [](Peer &c) {
    proto::LeaseRequest req;
    req.cores = 1000; // more than anyone has: the answer names the reason
    proto::set_text(req.client, "grace");
    std::vector<proto::LeaseGrantPart> parts;
    return c.ask(req, parts);
  };
  auto a = std::make_unique<Peer>(&small);
  auto b = std::make_unique<Peer>(&small);
  EXPECT_EQ(ask(*a).status, proto::ErrorCode::ResourcesUnavailable);
  EXPECT_EQ(ask(*b).status, proto::ErrorCode::ResourcesUnavailable);
  {
    Peer third(&small);
    proto::LeaseGrant refused = ask(third);
    EXPECT_EQ(refused.status, proto::ErrorCode::ResourcesUnavailable);
    EXPECT_NE(std::string(proto::get_text(refused.message)).find("too many client connections"),
              std::string::npos)
        << proto::get_text(refused.message);
  }
  // A node still registers: the slots beyond the clients' are its.
  ASSERT_NO_FATAL_FAILURE(add_node(small, "golf", 'd', 2));
  Peer node(&small);
  ASSERT_EQ(node.register_node("golf", 'd', 2).status, proto::ErrorCode::Ok);
  // The idle clients are closed after client_idle_timeout_ms (reliable-
  // datagram providers do not tell the peer): a new client is served once
  // their slots are free again.
  bool served = false;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  while (!served && std::chrono::steady_clock::now() < deadline) {
    Peer again(&small);
    proto::LeaseGrant r = ask(again);
    served = std::string(proto::get_text(r.message)).find("too many client connections") ==
             std::string::npos;
    if (served) {
      std::vector<proto::LeaseGrantPart> parts;
      proto::LeaseGrant g = again.request(1, 10000, parts, "grace");
      EXPECT_EQ(g.status, proto::ErrorCode::Ok) << proto::get_text(g.message);
    } else {
      std::this_thread::sleep_for(100ms);
    }
  }
  EXPECT_TRUE(served) << "idle clients kept their connections";
}

// A resource manager that stood still for longer than idle_timeout_ms
// (stopped, starved of CPU) reads what came meanwhile before it closes
// silent peers: a client whose first request waits is answered.
TEST(RmFabric, AStalledResourceManagerAnswersTheRequestThatWaitedBeforeClosingIdlePeers) {
  ResourceManager small;
  small.start(json{{"idle_timeout_ms", 300}, {"client_idle_timeout_ms", 60000}});
  StopAtEnd stop{small};
  Peer client(&small);
  // Taken by the loop first (its receives posted: on verbs a send to a
  // link nobody posted receives on waits for one).
  const auto taken_by = std::chrono::steady_clock::now() + 10s;
  while (request(small.rest(), "GET", "/metrics").body.find("\nrfaas_rm_fabric_connections 1\n") ==
             std::string::npos &&
         std::chrono::steady_clock::now() < taken_by)
    std::this_thread::sleep_for(5ms);
  const pid_t pid = small.process().pid();
  {
    struct Continue {
      pid_t pid;
      ~Continue() { ::kill(pid, SIGCONT); }
    } resume{pid};
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    proto::LeaseRequest req;
    req.cores = 1000; // more than anyone has: answered with the reason
    proto::set_text(req.client, "ida");
    ASSERT_EQ(client.channel.send(req, in(5s)), proto::ChannelStatus::Ok);
    // The stall itself: twice the silence a new peer is allowed.
    std::this_thread::sleep_for(600ms);
  }
  // Closed as silent, the client sees its link end here instead.
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant g = client.await_grant(parts);
  EXPECT_EQ(g.status, proto::ErrorCode::ResourcesUnavailable) << proto::get_text(g.message);
}

// A node that registers again (after a restart of its own, or of the
// resource manager) is told again of every ended lease whose token has not
// expired, so that a token of a released lease does not come back to life.
TEST(RmFabric, ARegisteringNodeHearsAgainOfEndedLeasesWhoseTokensLive) {
  add_node("hotel", '8', 2);
  for (const char *n : {"alpha", "bravo", "charlie", "delta", "echo", "echo2", "foxtrot"})
    request(rm->rest(), "POST", std::string("/nodes/") + n + "/drain", "", kToken);
  uint64_t id = 0;
  {
    Peer node;
    ASSERT_EQ(node.register_node("hotel", '8', 2).status, proto::ErrorCode::Ok);
    Peer client;
    std::vector<proto::LeaseGrantPart> parts;
    proto::LeaseGrant g = client.request(1, 60000, parts, "henry");
    ASSERT_EQ(g.status, proto::ErrorCode::Ok) << proto::get_text(g.message);
    id = g.lease_id;
    proto::LeaseRelease rel;
    rel.lease_id = id;
    rel.secret = g.secret;
    proto::set_text(rel.client, "henry");
    ASSERT_EQ(client.ask(rel, parts).status, proto::ErrorCode::Ok);
    EXPECT_EQ(node.await_ended().lease_id, id);
    proto::AccountingReport final_report;
    final_report.lease_id = id;
    final_report.execution_us = 5;
    final_report.final = 1;
    EXPECT_EQ(node.channel.send(final_report, in(5s)), proto::ChannelStatus::Ok);
    proto::Shutdown bye;
    EXPECT_EQ(node.channel.send(bye, in(5s)), proto::ChannelStatus::Ok);
  }
  EXPECT_TRUE(wait_state("hotel", "down"));
  // The node restarted and remembers nothing: it hears of the lease again.
  Peer node;
  ASSERT_EQ(node.register_node("hotel", '8', 2).status, proto::ErrorCode::Ok);
  proto::LeaseEnded again = node.await_ended();
  EXPECT_EQ(again.lease_id, id);
  EXPECT_EQ(again.why, proto::LeaseEndReason::Released);
  // Its report of "nothing" for it does not replace the final one.
  proto::AccountingReport empty;
  empty.lease_id = id;
  empty.final = 1;
  EXPECT_EQ(node.channel.send(empty, in(5s)), proto::ChannelStatus::Ok);
  // A connection's messages are handled in order: once a registration on it
  // is answered, the report before it was taken.
  ASSERT_EQ(node.register_node("hotel", '8', 2).status, proto::ErrorCode::Ok);
  json acc = json::parse(
      request(rm->rest(), "GET", "/accounting?lease=" + std::to_string(id), "", kToken).body);
  ASSERT_EQ(acc["records"].size(), 1u) << acc.dump();
  EXPECT_EQ(acc["records"][0]["execution_us"], 5) << acc.dump();
}

TEST(RmFabric, MungeCredentialsAreCheckedAndTheOwnerRecorded) {
  const std::string missing = rfaas::rm::test::Munged::unavailable();
  if (!missing.empty())
    GTEST_SKIP() << missing;
  // This realm's munged, and another realm's (another key).
  rfaas::rm::test::Munged realm, other;
  std::string why = realm.start();
  ASSERT_EQ(why, "");
  why = other.start();
  ASSERT_EQ(why, "");
  ResourceManager secure;
  secure.start(json::object(), json{{"auth", "munge"}, {"munge_socket", realm.socket()}});
  StopAtEnd stop{secure};
  EXPECT_NE(secure.fabric_line().find("auth munge"), std::string::npos) << secure.fabric_line();
  // The shared resource manager (auth none) says its clients are anonymous.
  EXPECT_NE(rm->fabric_line().find("clients are anonymous"), std::string::npos)
      << rm->fabric_line();

  ASSERT_NO_FATAL_FAILURE(add_node(secure, "mike", '5', 8));
  Peer node(&secure);
  ASSERT_EQ(node.register_node("mike", '5', 8).status, proto::ErrorCode::Ok);

  // An expired credential: made now with a time to live of 1 s, sent once
  // munged counts it as expired (its check is in whole seconds).
  proto::LeaseRequest old_req = Peer::lease_request(1, 30000);
  const std::string old_cred = realm.credential(old_req, "", 1);
  ASSERT_FALSE(old_cred.empty());
  const auto old_made = std::chrono::steady_clock::now();

  Peer client(&secure);
  std::vector<proto::LeaseGrantPart> parts;
  auto refusal = [&](proto::LeaseRequest req, const std::string &credential) {
    proto::set_text(req.credential, credential);
    proto::LeaseGrant g = client.ask(req, parts);
    EXPECT_EQ(g.status, proto::ErrorCode::LeaseInvalid) << proto::get_text(g.message);
    EXPECT_TRUE(parts.empty());
    return std::string(proto::get_text(g.message));
  };

  // Valid: granted, the uid recorded with the job id, and the token covers
  // the uid.
  proto::LeaseRequest req = Peer::lease_request(2, 30000);
  const std::string cred = realm.credential(req, "4242");
  ASSERT_FALSE(cred.empty());
  proto::set_text(req.credential, cred);
  proto::LeaseGrant grant = client.ask(req, parts);
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].owner_uid, ::getuid());
  rfaas::rm::TokenVerifier verifier("mike", secret_of('5'));
  rfaas::rm::LeaseClaim claim{grant.lease_id,  "mike",  parts[0].cores,    parts[0].memory_mib,
                              grant.expiry_ms, "alice", parts[0].owner_uid};
  rfaas::rm::LeaseToken token;
  std::memcpy(token.data(), parts[0].token.bytes, token.size());
  EXPECT_EQ(verifier.verify(claim, token, wall_ms()), rfaas::rm::TokenVerdict::Ok);
  claim.owner_uid = ::getuid() + 1; // a client claiming another owner
  EXPECT_EQ(verifier.verify(claim, token, wall_ms()), rfaas::rm::TokenVerdict::Forged);
  const json leases = fresh(secure.rest(), "/leases");
  bool listed = false;
  for (const json &l : leases)
    if (l["id"] == grant.lease_id) {
      listed = true;
      EXPECT_EQ(l["owner_uid"], ::getuid()) << l.dump();
      EXPECT_EQ(l["job_id"], "4242") << l.dump();
    }
  EXPECT_TRUE(listed) << leases.dump();

  // Replayed: the same request with the same credential once more.
  std::string msg = refusal(req, cred);
  EXPECT_NE(msg.find("replayed MUNGE credential"), std::string::npos) << msg;
  // Moved to another request (more cores): refused, whatever munged says.
  proto::LeaseRequest bigger = Peer::lease_request(2, 30000);
  const std::string small_cred = realm.credential(Peer::lease_request(1, 30000));
  msg = refusal(bigger, small_cred);
  EXPECT_NE(msg.find("made for another request"), std::string::npos) << msg;
  // Missing.
  msg = refusal(Peer::lease_request(1, 30000), "");
  EXPECT_NE(msg.find("missing MUNGE credential"), std::string::npos) << msg;
  // Another realm.
  proto::LeaseRequest foreign = Peer::lease_request(1, 30000);
  msg = refusal(foreign, other.credential(foreign));
  EXPECT_NE(msg.find("another realm"), std::string::npos) << msg;
  // Not a credential at all.
  msg = refusal(Peer::lease_request(1, 30000), "MUNGE:garbage:");
  EXPECT_NE(msg.find("MUNGE credential"), std::string::npos) << msg;
  // Expired: munged's time to live is checked in whole seconds.
  std::this_thread::sleep_until(old_made + 2100ms);
  msg = refusal(old_req, old_cred);
  EXPECT_NE(msg.find("expired MUNGE credential"), std::string::npos) << msg;

  // Only the valid request took cores; the accounting export names its owner.
  proto::AccountingReport report;
  report.lease_id = grant.lease_id;
  report.allocation_us = 10;
  report.final = 1;
  EXPECT_EQ(node.channel.post(report), proto::ChannelStatus::Ok);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::string csv;
  while (std::chrono::steady_clock::now() < deadline) {
    csv = request(secure.rest(), "GET", "/accounting.csv", "", kToken).body;
    if (csv.find(std::to_string(grant.lease_id)) != std::string::npos)
      break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_NE(csv.find("owner_uid,job_id\n"), std::string::npos) << csv;
  EXPECT_NE(csv.find("," + std::to_string(::getuid()) + ",4242\n"), std::string::npos) << csv;
}

TEST(RmFabric, WithAuthNoneLeasesAreAnonymous) {
  add_node("november", '6', 2);
  Peer node;
  ASSERT_EQ(node.register_node("november", '6', 2).status, proto::ErrorCode::Ok);
  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  // A credential is not needed, and one that is there is not checked (any
  // node may take the lease: its owner is what counts here).
  proto::LeaseRequest req = Peer::lease_request(1, 30000);
  proto::set_text(req.credential, "MUNGE:not-checked:");
  proto::LeaseGrant grant = client.ask(req, parts);
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].owner_uid, proto::kAnonymousUid);
  const json leases = fresh(rm->rest(), "/leases");
  for (const json &l : leases)
    if (l["id"] == grant.lease_id) {
      EXPECT_TRUE(l["owner_uid"].is_null()) << l.dump();
      EXPECT_EQ(l["job_id"], "") << l.dump();
    }
}

// A lease answered is known after a crash: the resource manager is killed
// (SIGKILL) right after its answers, within the time its lease writes wait
// for their commit (their records are in the grant journal only), and
// started again on the same database: every lease is there, in the state
// its last answer gave it.
TEST(RmFabric, LeasesAnsweredBeforeACrashAreKnownAfterARestart) {
  ResourceManager own;
  own.start();
  StopAtEnd stop{own};
  ASSERT_NO_FATAL_FAILURE(add_node(own, "kilo", 'c', 64));
  std::vector<uint64_t> ids;
  uint64_t renewed_expiry = 0;
  {
    Peer node(&own);
    ASSERT_EQ(node.register_node("kilo", 'c', 64).status, proto::ErrorCode::Ok);
    Peer client(&own);
    std::vector<proto::LeaseGrantPart> parts;
    proto::Token first_secret{};
    for (int i = 0; i < 12; ++i) { // 256 MiB each of the node's 4096
      proto::LeaseGrant grant = client.request(1, 60000, parts);
      ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
      ids.push_back(grant.lease_id);
      if (i == 0)
        first_secret = grant.secret;
    }
    // A renewal and a release: the journal's other kind of record.
    proto::LeaseRenew renew;
    renew.lease_id = ids[0];
    renew.duration_ms = 90000;
    renew.secret = first_secret;
    proto::set_text(renew.client, "alice");
    proto::LeaseGrant renewed = client.ask(renew, parts);
    ASSERT_EQ(renewed.status, proto::ErrorCode::Ok) << proto::get_text(renewed.message);
    renewed_expiry = renewed.expiry_ms;
    proto::LeaseRelease release;
    release.lease_id = ids[0];
    release.secret = first_secret;
    proto::set_text(release.client, "alice");
    ASSERT_EQ(client.ask(release, parts).status, proto::ErrorCode::Ok);
    own.process().kill_now();
  }
  own.crash_and_restart();
  auto r = request(own.rest(), "GET", "/leases?state=all", "", kToken);
  ASSERT_EQ(r.status, 200) << r.body;
  std::map<uint64_t, json> known;
  for (const json &l : json::parse(r.body))
    known[l["id"].get<uint64_t>()] = l;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = known.find(ids[i]);
    ASSERT_NE(it, known.end()) << "lease " << ids[i] << " (" << i + 1 << " of " << ids.size()
                               << ") was answered but is unknown after the restart: " << r.body;
    EXPECT_EQ(it->second["state"], i == 0 ? "released" : "active") << it->second.dump();
  }
  EXPECT_EQ(known[ids[0]]["expiry_ms"].get<uint64_t>(), renewed_expiry) << known[ids[0]].dump();
}

// A node whose backlog overflows (more than 65,536 notices wait) loses the
// oldest: the resource manager's log says which node lost how many, at most
// once a second, and every drop reaches the log, also those after its last
// line (the periodic sweep writes them) and those just before it stops. The
// overflow: ended leases with live tokens, written into the database while
// the resource manager is stopped, are all told again when their node
// registers, and the node reads none of them.
TEST(RmFabric, EveryDroppedNoticeIsLoggedWithItsNode) {
  if (std::system("command -v sqlite3 >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs the sqlite3 command";
  ResourceManager own;
  own.start();
  StopAtEnd stop{own};
  ASSERT_NO_FATAL_FAILURE(add_node(own, "lima", 'd', 4));
  own.process().stop();
  constexpr long long kEnded = 70000, kMaxBacklog = 65536;
  const std::string now = std::to_string(wall_ms());
  const std::string ids =
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < " +
      std::to_string(kEnded) + ") ";
  const std::string sql =
      "BEGIN; " + ids +
      "INSERT INTO leases (id, client, state, granted_ms, expiry_ms, ended_ms) SELECT 1000000 + "
      "i, 'alice', 'released', " +
      now + ", " + now + " + 3600000, " + now + " FROM n; " + ids +
      "INSERT INTO lease_parts (lease_id, idx, node, cores, memory_mib) SELECT 1000000 + i, 0, "
      "'lima', '0', 256 FROM n; COMMIT;";
  ASSERT_EQ(std::system(("sqlite3 '" + own.database() + "' \"" + sql + "\"").c_str()), 0);
  own.launch();
  auto dropped = [&] {
    const std::string page = request(own.rest(), "GET", "/metrics").body;
    const std::string key = "\nrfaas_rm_fabric_notices_dropped_total ";
    const size_t at = page.find(key);
    return at == std::string::npos ? -1 : std::atoll(page.c_str() + at + key.size());
  };
  // The drop lines' counts, summed until they reach `total` or 5 s pass.
  long long logged = 0;
  int lines = 0;
  auto read_lines = [&](long long total) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (logged < total && std::chrono::steady_clock::now() < deadline) {
      std::string line = own.process().wait_for_line(" dropped since the last such line", 1s);
      if (line.empty())
        continue;
      ++lines;
      const std::string node = "fabric: node lima: ";
      const size_t at = line.find(node);
      ASSERT_NE(at, std::string::npos) << line;
      logged += std::atoll(line.c_str() + at + node.size());
    }
  };
  {
    Peer node(&own);
    ASSERT_EQ(node.register_node("lima", 'd').status, proto::ErrorCode::Ok);
    // Told again at its registration, in one go: the oldest beyond the
    // backlog's bound are dropped at once.
    const long long first = dropped();
    EXPECT_EQ(first, kEnded - kMaxBacklog);
    // The first drop is said at once, the others by the sweep a second
    // later: no drop follows that would say them.
    read_lines(first);
    EXPECT_EQ(logged, first);
    EXPECT_EQ(lines, 2);
  }
  // Registering again (a restarted node), it is told again of what was
  // dropped and what its first connection took: more drops, said at the
  // stop that follows at once, within the second after the last line.
  Peer again(&own);
  ASSERT_EQ(again.register_node("lima", 'd').status, proto::ErrorCode::Ok);
  const long long total = dropped();
  EXPECT_GT(total, kEnded - kMaxBacklog);
  ASSERT_EQ(kill(own.process().pid(), SIGTERM), 0);
  read_lines(total);
  EXPECT_EQ(logged, total);
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t at = stat.rfind(") ");
  if (at == std::string::npos)
    return -1;
  std::istringstream fields(stat.substr(at + 2));
  std::string f;
  long utime = 0, stime = 0;
  // Fields 3.. of proc(5): utime and stime are the 14th and 15th.
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14)
      utime = std::stol(f);
    if (i == 15)
      stime = std::stol(f);
  }
  return utime + stime;
}

// With a node registered and nothing to do, the loop sleeps between its
// periodic checks. On tcp 1.17 a link's wait descriptor used to stay
// readable for good (a provider signal nothing reset), and the idle
// resource manager spun at 15-70% of a core.
TEST(RmFabric, AnIdleResourceManagerWithANodeSleeps) {
  add_node("idle", 'f');
  Peer node;
  ASSERT_EQ(node.register_node("idle", 'f').status, proto::ErrorCode::Ok);
  ASSERT_TRUE(wait_state("idle", "up"));
  const pid_t pid = rm->process().pid();
  const long before = cpu_ticks(pid);
  ASSERT_GE(before, 0);
  // A measurement over a fixed interval, not a wait for readiness.
  std::this_thread::sleep_for(1s);
  const long used = cpu_ticks(pid) - before;
  const long hz = sysconf(_SC_CLK_TCK);
  // A tenth of a core at most: the periodic checks (tick_ms 50) and, on
  // links without a descriptor (shm), a look every millisecond cost far less.
  EXPECT_LT(used, hz / 10) << "the idle resource manager used " << used << " of " << hz
                           << " clock ticks in one second";
  request(rm->rest(), "POST", "/nodes/idle/drain", "", kToken);
}

namespace {

/// GET `path` (/nodes or /leases), polled until its table is dated after
/// `after_ms` (the wall clock, ms): then every change the resource manager
/// made before that time is in it (docs/resource_manager.md, "Snapshots").
/// Bounded: empty on timeout.
json table_after(const std::string &path, uint64_t after_ms) {
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 10s) {
    auto r = request(rm->rest(), "GET", path, "", kToken);
    const uint64_t received = wall_ms();
    EXPECT_EQ(r.status, 200) << r.body;
    const std::string generated = r.header("X-Rfaas-Generated-Ms");
    EXPECT_FALSE(generated.empty()) << r.headers;
    if (r.status != 200 || generated.empty())
      return json();
    const uint64_t at = std::stoull(generated);
    EXPECT_LE(at, received) << "a table dated in the future";
    if (at > after_ms) {
      std::printf("GET %s dated %llu ms after the change, %lld ms of polling\n", path.c_str(),
                  static_cast<unsigned long long>(at - after_ms),
                  static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - start)
                                             .count()));
      return json::parse(r.body);
    }
    // The table is redated at least every tick (tick_ms: 50 here).
    std::this_thread::sleep_for(1ms);
  }
  ADD_FAILURE() << "GET " << path << " stayed dated before " << after_ms << " for 10 s";
  return json();
}
json nodes_after(uint64_t after_ms) { return table_after("/nodes", after_ms); }

bool holds_lease(const json &leases, uint64_t id) {
  for (const json &l : leases)
    if (l.value("id", uint64_t{0}) == id)
      return true;
  return false;
}

json find_node(const json &nodes, const std::string &name) {
  for (const json &n : nodes)
    if (n.value("name", "") == name)
      return n;
  return json();
}

} // namespace

// GET /nodes and GET /leases answer from the tables the loop publishes, not
// from a task: a registration, a grant and a release made over the fabric
// are in every table dated after they were answered, and the tables say
// when they were made.
TEST(RmFabric, NodesAndLeasesShowFabricChangesOnceDatedAfterThem) {
  add_node("kilo", '9', 2);
  Peer node;
  ASSERT_EQ(node.register_node("kilo", '9', 2).status, proto::ErrorCode::Ok);
  const uint64_t registered = wall_ms();
  json kilo = find_node(nodes_after(registered), "kilo");
  ASSERT_TRUE(kilo.is_object()) << "kilo is missing";
  EXPECT_EQ(kilo["state"], "up");
  EXPECT_GT(kilo["registered_ms"].get<uint64_t>(), 0u);
  EXPECT_LE(kilo["registered_ms"].get<uint64_t>(), registered);

  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant grant = client.request(1, 30000, parts, "kate");
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);
  ASSERT_EQ(parts.size(), 1u);
  const std::string on(proto::get_text(parts[0].node));
  const uint64_t granted = wall_ms();
  EXPECT_TRUE(holds_lease(table_after("/leases", granted), grant.lease_id));
  json held = find_node(nodes_after(granted), on);
  ASSERT_TRUE(held.is_object()) << on << " is missing";
  const uint32_t used = held["cores_used"].get<uint32_t>();
  ASSERT_GE(used, 1u);

  proto::LeaseRelease release;
  release.lease_id = grant.lease_id;
  release.secret = grant.secret;
  proto::set_text(release.client, "kate");
  std::vector<proto::LeaseGrantPart> none;
  ASSERT_EQ(client.ask(release, none).status, proto::ErrorCode::Ok);
  const uint64_t released = wall_ms();
  EXPECT_FALSE(holds_lease(table_after("/leases", released), grant.lease_id));
  json freed = find_node(nodes_after(released), on);
  ASSERT_TRUE(freed.is_object()) << on << " is missing";
  EXPECT_EQ(freed["cores_used"].get<uint32_t>(), used - 1);
  EXPECT_EQ(freed["active_leases"].get<uint32_t>(), held["active_leases"].get<uint32_t>() - 1);
  request(rm->rest(), "POST", "/nodes/kilo/drain", "", kToken);
}

namespace {
/// A counter or gauge of the resource manager's /metrics; -1 when absent.
long long metric_value(const std::string &name) {
  const std::string page = request(rm->rest(), "GET", "/metrics").body;
  const std::string key = "\n" + name + " ";
  const size_t at = page.find(key);
  return at == std::string::npos ? -1 : std::atoll(page.c_str() + at + key.size());
}
} // namespace

// A pass of the loop serves every client but at most 64 other peers
// (fabric_server.cpp, kNodePeersPerPass); the others wait for the next
// pass. A pass's answers leave after the whole pass, so without the bound
// a lease request waited for every heartbeat that arrived with it, and
// lease latency grew with the fleet. The burst is made certain by stopping
// the resource manager while 100 nodes and a client send.
TEST(RmFabric, APassServesABoundedNumberOfNodesAndClientsFirst) {
  constexpr int kNodes = 100;
  std::vector<std::unique_ptr<Peer>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    const std::string name = "burst-" + std::to_string(i);
    add_node(name, 'b', 2);
    nodes.push_back(std::make_unique<Peer>());
    ASSERT_EQ(nodes.back()->register_node(name, 'b', 2).status, proto::ErrorCode::Ok) << name;
  }
  Peer client;
  const long long deferred_before = metric_value("rfaas_rm_fabric_peers_deferred_total");
  ASSERT_GE(deferred_before, 0) << "no rfaas_rm_fabric_peers_deferred_total in /metrics";
  const pid_t pid = rm->process().pid();
  {
    // Continued on every way out of this block.
    struct Continue {
      pid_t pid;
      ~Continue() { ::kill(pid, SIGCONT); }
    } resume{pid};
    ASSERT_EQ(::kill(pid, SIGSTOP), 0);
    proto::Heartbeat hb;
    hb.sequence = 2;
    for (auto &n : nodes)
      ASSERT_EQ(n->channel.post(hb), proto::ChannelStatus::Ok);
    ASSERT_EQ(client.channel.send(Peer::lease_request(1, 30000), in(5s)), proto::ChannelStatus::Ok);
  }
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseGrant grant = client.await_grant(parts);
  ASSERT_EQ(grant.status, proto::ErrorCode::Ok) << proto::get_text(grant.message);

  const long long deferred = metric_value("rfaas_rm_fabric_peers_deferred_total");
  const long long largest = metric_value("rfaas_rm_fabric_pass_peers_max");
  std::printf("%d heartbeats and a lease request in one burst: %lld peers deferred, at most "
              "%lld nodes in a pass\n",
              kNodes, deferred - deferred_before, largest);
  // The pass the burst reached served at most 64 of the nodes...
  EXPECT_GE(largest, 1);
  EXPECT_LE(largest, 64) << "a pass served more nodes than its budget";
  // ...and the deferring ended with the burst: quiet links waiting to be
  // armed by a sleep once kept every pass over the budget, so the loop
  // never slept and deferred peers by the hundred thousand. How many
  // deferrals a burst takes to drain depends on how the passes fall
  // between the links' reads (625 once in a sanitizer build, over the
  // 400 allowed then), so the bound sits well above that and far below the
  // failure it guards against.
  EXPECT_LE(deferred - deferred_before, 20 * kNodes) << "passes went on deferring quiet peers";
  // ...and left the rest to the next (else the burst never met one pass,
  // and the bound was not exercised). Certain where links share an
  // endpoint: the provider took every message in while the resource
  // manager stood still. On connected links the test's own sends may leave
  // only as it drives their progress, a few per pass.
  if (fabric->capabilities().shared_endpoint)
    EXPECT_GT(deferred, deferred_before) << "no peer was left for a later pass";
  else if (deferred == deferred_before)
    std::printf("connected links: the burst did not reach one pass here; only the bound was "
                "checked\n");

  std::vector<proto::LeaseGrantPart> none;
  proto::LeaseRelease release;
  release.lease_id = grant.lease_id;
  release.secret = grant.secret;
  proto::set_text(release.client, "alice");
  EXPECT_EQ(client.ask(release, none).status, proto::ErrorCode::Ok);
  for (int i = 0; i < kNodes; ++i)
    request(rm->rest(), "POST", "/nodes/burst-" + std::to_string(i) + "/drain", "", kToken);
}

TEST(RmFabric, GarbageEndsOnlyItsOwnConnection) {
  {
    Peer bad;
    // A message the resource manager does not take, then nothing more.
    proto::WorkerHello hello;
    hello.workers = 1;
    EXPECT_EQ(bad.channel.send(hello, in(5s)), proto::ChannelStatus::Ok);
    proto::ControlMessage m = bad.channel.next(in(10s));
    EXPECT_TRUE(m.status == proto::ChannelStatus::Closed ||
                m.status == proto::ChannelStatus::Shutdown ||
                m.status == proto::ChannelStatus::Timeout)
        << proto::to_string(m.status);
  }
  {
    Peer heartbeat_first; // a heartbeat without a registration
    proto::Heartbeat hb;
    EXPECT_EQ(heartbeat_first.channel.send(hb, in(5s)), proto::ChannelStatus::Ok);
  }
  // The resource manager still answers.
  Peer client;
  std::vector<proto::LeaseGrantPart> parts;
  proto::LeaseRequest req;
  req.cores = 1000;
  proto::set_text(req.client, "carol");
  EXPECT_EQ(client.ask(req, parts).status, proto::ErrorCode::ResourcesUnavailable);
  EXPECT_EQ(request(rm->rest(), "GET", "/health").status, 200);
}

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      g.device = argv[++i];
    else if (a == "--devices" && i + 1 < argc)
      g.devices = argv[++i];
    else if (a == "--binary" && i + 1 < argc)
      g.binary = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [gtest options] --device NAME [--devices FILE]\n", argv[0]);
      return 2;
    }
  }
  ResourceManager manager;
  int rc = 1;
  try {
    auto db = rdmalib::DeviceDatabase::load(g.devices);
    rdmalib::Fabric f(db.find(g.device));
    fabric = &f;
    manager.start();
    rm = &manager;
    rc = RUN_ALL_TESTS();
    rm = nullptr;
    // SIGTERM ends it promptly and cleanly.
    int status = manager.process().stop(5000ms);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "resource_manager did not exit cleanly on SIGTERM (status %d)\n",
                   status);
      rc = 1;
    }
    manager.stop();
    fabric = nullptr;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rm fabric tests: %s\n", e.what());
    manager.stop();
    return 1;
  }
  return rc;
}
