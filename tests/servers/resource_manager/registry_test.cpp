// The lease lifecycle and node states, driven by a manual clock.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <set>

#include "resource_manager/published_leases.hpp"
#include "resource_manager/published_nodes.hpp"
#include "resource_manager/registry.hpp"

using namespace rfaas::rm;

namespace {

struct Fixture : ::testing::Test {
  uint64_t now = 1'000'000;
  Store store{":memory:"};
  RegistryOptions opts = [] {
    RegistryOptions o;
    o.default_lease_ms = 10'000;
    o.max_lease_ms = 100'000;
    o.heartbeat_timeout_ms = 3'000;
    return o;
  }();
  std::unique_ptr<Registry> reg = make();
  NodeSecret secret_a = generate_secret();
  NodeSecret secret_b = generate_secret();

  std::unique_ptr<Registry> make() {
    return std::make_unique<Registry>(
        store, [this] { return now; }, opts);
  }
  void two_nodes() {
    ASSERT_TRUE(reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a).ok());
    ASSERT_TRUE(reg->register_node("b", "10.0.0.2:1", 4, 4096, secret_b).ok());
  }
  Result<Grant> lease(uint32_t cores, uint64_t mem = 0, uint32_t max_nodes = 1,
                      std::string client = "alice") {
    return reg->grant(LeaseRequest{client, cores, mem, 0, max_nodes, kAnonymousOwner, ""});
  }
};

} // namespace

TEST_F(Fixture, GrantCarriesAddressesAndVerifiableTokens) {
  two_nodes();
  auto g = lease(3, 1000);
  ASSERT_TRUE(g.ok()) << g.message;
  ASSERT_EQ(g.value.lease.parts.size(), 1u);
  EXPECT_EQ(g.value.lease.expiry_ms, now + 10'000);
  const std::string &node = g.value.lease.parts[0].node;
  TokenVerifier v(node, node == "a" ? secret_a : secret_b);
  EXPECT_EQ(v.verify(g.value.lease.claim(0), g.value.tokens[0], now), TokenVerdict::Ok);
  EXPECT_EQ(g.value.addresses[0], node == "a" ? "10.0.0.1:1" : "10.0.0.2:1");
  EXPECT_EQ(reg->counters().granted, 1u);
}

TEST_F(Fixture, SpreadAlternatesNodes) {
  two_nodes();
  auto g1 = lease(1), g2 = lease(1);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_NE(g1.value.lease.parts[0].node, g2.value.lease.parts[0].node);
}

TEST_F(Fixture, PackFillsOneNodeFirst) {
  opts.policy = PlacementPolicy::Pack;
  reg = make();
  two_nodes();
  auto g1 = lease(1), g2 = lease(1);
  ASSERT_TRUE(g1.ok() && g2.ok());
  EXPECT_EQ(g1.value.lease.parts[0].node, g2.value.lease.parts[0].node);
}

TEST_F(Fixture, NoCoreIsInTwoLeases) {
  two_nodes();
  std::set<std::pair<std::string, uint32_t>> held;
  for (int i = 0; i < 8; ++i) {
    auto g = lease(1, 10);
    ASSERT_TRUE(g.ok()) << i << ": " << g.message;
    for (const LeasePart &p : g.value.lease.parts)
      for (uint32_t c : p.cores)
        EXPECT_TRUE(held.insert({p.node, c}).second) << p.node << " core " << c;
  }
  auto g = lease(1);
  EXPECT_EQ(g.outcome, Outcome::Unavailable);
  EXPECT_EQ(reg->counters().refused, 1u);
}

TEST_F(Fixture, MultiNodeLeaseSpansNodesWithOneTokenEach) {
  two_nodes();
  EXPECT_EQ(lease(6).outcome, Outcome::Unavailable);
  auto g = lease(6, 600, 2);
  ASSERT_TRUE(g.ok()) << g.message;
  ASSERT_EQ(g.value.lease.parts.size(), 2u);
  EXPECT_EQ(g.value.lease.total_cores(), 6u);
  EXPECT_EQ(g.value.lease.total_memory_mib(), 600u);
  for (size_t i = 0; i < 2; ++i) {
    const std::string &n = g.value.lease.parts[i].node;
    TokenVerifier v(n, n == "a" ? secret_a : secret_b);
    EXPECT_EQ(v.verify(g.value.lease.claim(i), g.value.tokens[i], now), TokenVerdict::Ok);
  }
}

TEST_F(Fixture, MemoryLimitsLeases) {
  two_nodes();
  EXPECT_EQ(lease(1, 5000).outcome, Outcome::Unavailable);
  ASSERT_TRUE(lease(1, 4000).ok());
  ASSERT_TRUE(lease(1, 4000).ok());
  EXPECT_EQ(lease(1, 100).outcome, Outcome::Unavailable);
}

// "0 MiB" gets the configured default, never unlimited memory on the node.
TEST_F(Fixture, ZeroMemoryTakesTheConfiguredDefault) {
  two_nodes();
  auto g = lease(1, 0);
  ASSERT_TRUE(g.ok()) << g.message;
  EXPECT_EQ(g.value.lease.total_memory_mib(), RegistryOptions{}.default_memory_mib);
  EXPECT_EQ(reg->node(g.value.lease.parts[0].node)->used_memory_mib,
            RegistryOptions{}.default_memory_mib);
  // The token covers the memory the node will enforce.
  EXPECT_EQ(g.value.lease.claim(0).memory_mib, RegistryOptions{}.default_memory_mib);
}

TEST_F(Fixture, ReleaseFreesCoresAtOnce) {
  two_nodes();
  auto g = lease(4, 0, 2);
  auto h = lease(4, 0, 2);
  ASSERT_TRUE(g.ok() && h.ok());
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable);
  EXPECT_EQ(reg->release(g.value.lease.id, "mallory", g.value.secret).outcome, Outcome::Forbidden);
  ASSERT_TRUE(reg->release(g.value.lease.id, "alice", g.value.secret).ok());
  EXPECT_TRUE(lease(4).ok());
  EXPECT_EQ(reg->release(g.value.lease.id, "alice", g.value.secret).outcome, Outcome::NotFound);
  auto events = reg->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].why, LeaseState::Released);
}

// A grant whose write the store could not make durable is refused to its
// client (FabricServer::fail_held) and withdrawn: its cores and its
// owner's quota are free at once, no node is told (none saw its token),
// and it is no lease at all afterwards.
TEST_F(Fixture, AWithdrawnGrantFreesItsCoresAtOnce) {
  opts.quotas.defaults.leases = 2;
  reg = make();
  two_nodes();
  auto g = lease(4, 0, 2);
  auto h = lease(4, 0, 2);
  ASSERT_TRUE(g.ok() && h.ok());
  EXPECT_FALSE(lease(1).ok());
  reg->take_events();
  reg->withdraw_grant(g.value.lease.id);
  EXPECT_TRUE(reg->take_events().empty()) << "a node was told of a lease it never saw";
  EXPECT_FALSE(reg->active_lease(g.value.lease.id).has_value());
  EXPECT_EQ(reg->active_leases().size(), 1u);
  // Cores and the quota of leases (2) are free again.
  auto k = lease(4, 0, 2);
  EXPECT_TRUE(k.ok()) << k.message;
  EXPECT_EQ(reg->release(g.value.lease.id, "alice", g.value.secret).outcome, Outcome::NotFound);
  reg->withdraw_grant(g.value.lease.id); // not active: nothing happens
  EXPECT_EQ(reg->active_leases().size(), 2u);
}

// A lease id and its client's name (both shown by GET /leases) are not
// enough: renewing and releasing need the secret only the grant carried.
TEST_F(Fixture, OnlyTheHolderOfTheLeaseSecretRenewsOrReleases) {
  two_nodes();
  auto g = lease(2);
  ASSERT_TRUE(g.ok());
  auto h = lease(2);
  ASSERT_TRUE(h.ok());
  EXPECT_NE(g.value.secret, LeaseSecret{});
  EXPECT_NE(g.value.secret, h.value.secret);
  const uint64_t id = g.value.lease.id;
  for (const LeaseSecret &guess : {LeaseSecret{}, h.value.secret}) {
    auto r = reg->renew(id, "alice", guess, 0);
    EXPECT_EQ(r.outcome, Outcome::Forbidden);
    EXPECT_NE(r.message.find("wrong lease secret"), std::string::npos) << r.message;
    Status s = reg->release(id, "alice", guess);
    EXPECT_EQ(s.outcome, Outcome::Forbidden) << s.message;
  }
  EXPECT_TRUE(reg->active_lease(id));
  // The store keeps a hash, not the secret, and a restart keeps checking it.
  auto stored = store.load_lease(id);
  ASSERT_TRUE(stored);
  EXPECT_TRUE(lease_secret_matches(g.value.secret, stored->secret_hash));
  reg = make();
  EXPECT_EQ(reg->release(id, "alice", h.value.secret).outcome, Outcome::Forbidden);
  auto r = reg->renew(id, "alice", g.value.secret, 0);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.value.secret, LeaseSecret{}) << "a renewal does not hand the secret out again";
  EXPECT_TRUE(reg->release(id, "alice", g.value.secret).ok());
}

TEST_F(Fixture, LeasesExpireUnlessRenewed) {
  two_nodes();
  auto g = lease(4);
  auto h = lease(4);
  ASSERT_TRUE(g.ok() && h.ok());
  now += 9'000;
  reg->heartbeat("a");
  reg->heartbeat("b");
  auto r = reg->renew(h.value.lease.id, "alice", h.value.secret, 0);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.value.lease.expiry_ms, now + 10'000);
  EXPECT_NE(r.value.tokens[0], h.value.tokens[0]); // the expiry is in the token
  EXPECT_EQ(reg->renew(h.value.lease.id, "bob", h.value.secret, 0).outcome, Outcome::Forbidden);
  now += 1'000;
  EXPECT_EQ(reg->tick(), 1u);
  EXPECT_FALSE(reg->active_lease(g.value.lease.id));
  EXPECT_TRUE(reg->active_lease(h.value.lease.id));
  EXPECT_EQ(reg->counters().expired, 1u);
  EXPECT_EQ(reg->renew(g.value.lease.id, "alice", g.value.secret, 0).outcome, Outcome::NotFound);
  EXPECT_TRUE(lease(4).ok()); // the expired lease's cores are free
  EXPECT_EQ(store.load_lease(g.value.lease.id)->state, LeaseState::Expired);
}

TEST_F(Fixture, RevokeEndsLeaseAndTellsItsNodes) {
  two_nodes();
  auto g = lease(6, 0, 2);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(reg->revoke(g.value.lease.id).ok());
  auto events = reg->take_events();
  ASSERT_EQ(events.size(), 2u);
  for (const auto &e : events) {
    EXPECT_EQ(e.why, LeaseState::Revoked);
    EXPECT_EQ(e.lease_id, g.value.lease.id);
  }
  EXPECT_EQ(reg->revoke(g.value.lease.id).outcome, Outcome::NotFound);
  EXPECT_EQ(reg->counters().revoked, 1u);
}

TEST_F(Fixture, DrainedAndDownNodesTakeNoNewLeases) {
  two_nodes();
  auto g = lease(2);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(reg->drain("a", true).ok());
  for (int i = 0; i < 2; ++i) {
    auto h = lease(1);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h.value.lease.parts[0].node, "b");
  }
  EXPECT_TRUE(reg->active_lease(g.value.lease.id)); // a drain keeps leases
  now += 3'001;
  reg->heartbeat("a"); // b stays silent
  reg->tick();
  EXPECT_EQ(reg->node("b")->node.state, NodeState::Down);
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable); // a drained, b down
  ASSERT_TRUE(reg->drain("a", false).ok());
  EXPECT_TRUE(lease(1).ok());
  ASSERT_TRUE(reg->heartbeat("b").ok());
  EXPECT_EQ(reg->node("b")->node.state, NodeState::Up);
}

TEST_F(Fixture, ReRegistrationGetsTheNodeBackWithTheRightSecretOnly) {
  two_nodes();
  auto g = lease(4, 0, 1);
  ASSERT_TRUE(g.ok());
  std::string node = g.value.lease.parts[0].node;
  ASSERT_TRUE(reg->drain(node, true).ok());
  ASSERT_TRUE(reg->mark_down(node).ok());
  EXPECT_EQ(reg->register_node(node, "x:1", 4, 4096, generate_secret()).outcome,
            Outcome::Forbidden);
  auto r = reg->register_node(node, "10.9.9.9:2", 4, 4096, node == "a" ? secret_a : secret_b);
  ASSERT_TRUE(r.ok()) << r.message;
  auto v = reg->node(node);
  EXPECT_EQ(v->node.state, NodeState::Up);
  EXPECT_TRUE(v->node.drained);
  EXPECT_EQ(v->node.address, "10.9.9.9:2");
  // Going down ended its lease: it comes back with none.
  EXPECT_EQ(v->used_cores, 0u);
  EXPECT_FALSE(reg->active_lease(g.value.lease.id));
}

TEST_F(Fixture, ADownNodeEndsItsLeasesWholeAndFreesTheirCores) {
  two_nodes();
  auto span = lease(6, 0, 2); // 3 cores on each node (spread)
  ASSERT_TRUE(span.ok()) << span.message;
  ASSERT_EQ(span.value.lease.parts.size(), 2u);
  auto on_b = lease(1);
  ASSERT_TRUE(on_b.ok());
  ASSERT_EQ(on_b.value.lease.parts[0].node, "b");
  reg->take_events();
  now += 3'001;
  ASSERT_TRUE(reg->heartbeat("b").ok()); // a stays silent
  reg->tick();
  EXPECT_EQ(reg->node("a")->node.state, NodeState::Down);
  // The spanning lease ended on both nodes; b's own lease lives on.
  EXPECT_FALSE(reg->active_lease(span.value.lease.id));
  EXPECT_TRUE(reg->active_lease(on_b.value.lease.id));
  EXPECT_EQ(reg->node("a")->used_cores, 0u);
  EXPECT_EQ(reg->node("b")->used_cores, 1u);
  EXPECT_EQ(reg->counters().node_down, 1u);
  auto stored = store.load_lease(span.value.lease.id);
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->state, LeaseState::NodeDown);
  EXPECT_EQ(stored->ended_ms, now);
  auto events = reg->take_events();
  ASSERT_EQ(events.size(), 2u);
  for (const LeaseEnded &e : events) {
    EXPECT_EQ(e.lease_id, span.value.lease.id);
    EXPECT_EQ(e.why, LeaseState::NodeDown);
  }
  auto renewed = reg->renew(span.value.lease.id, "alice", span.value.secret, 0);
  EXPECT_EQ(renewed.outcome, Outcome::NotFound);
  EXPECT_NE(renewed.message.find("node a went down"), std::string::npos) << renewed.message;
  EXPECT_EQ(reg->release(span.value.lease.id, "alice", span.value.secret).outcome,
            Outcome::NotFound);
  // Why it went down, learnt later (a pilot job's end), reaches the refusal.
  reg->explain_down("a", "SLURM ended pilot job 7 TIMEOUT");
  renewed = reg->renew(span.value.lease.id, "alice", span.value.secret, 0);
  EXPECT_NE(renewed.message.find("node a (SLURM ended pilot job 7 TIMEOUT) went down"),
            std::string::npos)
      << renewed.message;
  // A restarted registry names the lease's nodes from the store.
  reg = make();
  renewed = reg->renew(span.value.lease.id, "alice", span.value.secret, 0);
  EXPECT_NE(renewed.message.find("went down"), std::string::npos) << renewed.message;
  // The freed cores serve new leases once a is back.
  ASSERT_TRUE(reg->heartbeat("a").ok());
  EXPECT_TRUE(lease(7, 0, 2).ok());
}

// A recorded registration replayed after a restart of the resource manager
// is refused: the last accepted signed time is in the database.
TEST_F(Fixture, AReplayedRegistrationIsRefusedAlsoAfterARestart) {
  two_nodes();
  ASSERT_TRUE(reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a, 7'000).ok());
  auto again = reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a, 7'000);
  EXPECT_EQ(again.outcome, Outcome::Forbidden);
  EXPECT_NE(again.message.find("registration replayed"), std::string::npos) << again.message;
  reg = make();
  again = reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a, 7'000);
  EXPECT_EQ(again.outcome, Outcome::Forbidden) << "replayed after a restart";
  EXPECT_EQ(reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a, 6'999).outcome,
            Outcome::Forbidden);
  EXPECT_TRUE(reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a, 7'001).ok());
  EXPECT_EQ(store.load_nodes()[0].registration_signed_ms, 7'001u);
}

// retention_days: ended leases and their accounting go once older than the
// retention; active leases and their records stay.
TEST_F(Fixture, RetentionPrunesEndedLeasesAndAccounting) {
  opts.retention_days = 1;
  reg = make();
  two_nodes();
  auto old_lease = lease(1, 10);
  auto live = lease(1, 10);
  ASSERT_TRUE(old_lease.ok() && live.ok());
  const uint64_t old_id = old_lease.value.lease.id, live_id = live.value.lease.id;
  const std::string old_node = old_lease.value.lease.parts[0].node;
  const std::string live_node = live.value.lease.parts[0].node;
  ASSERT_TRUE(
      reg->record_accounting({old_id, old_node, "", 0, 1, 1, 1, 10, false, kAnonymousOwner, ""})
          .ok());
  ASSERT_TRUE(
      reg->record_accounting({live_id, live_node, "", 0, 1, 1, 1, 10, false, kAnonymousOwner, ""})
          .ok());
  ASSERT_TRUE(reg->release(old_id, "alice", old_lease.value.secret).ok());
  // A day and a half later (renewing the live lease and its nodes' heartbeats).
  for (int h = 0; h < 36; ++h) {
    now += 3'600'000;
    reg->heartbeat("a");
    reg->heartbeat("b");
    ASSERT_TRUE(reg->renew(live_id, "alice", live.value.secret, 100'000).ok());
    reg->tick();
  }
  EXPECT_FALSE(store.load_lease(old_id)) << "the ended lease outlived the retention";
  EXPECT_TRUE(store.accounting_for_lease(old_id).empty());
  EXPECT_TRUE(store.load_lease(live_id));
  EXPECT_EQ(store.accounting_for_lease(live_id).size(), 1u);
}

TEST_F(Fixture, OperatorNodesAndRemoval) {
  auto n = reg->add_node("c", "10.0.0.3:1", 2, 1024, std::nullopt);
  ASSERT_TRUE(n.ok()) << n.message;
  EXPECT_EQ(reg->add_node("c", "x:1", 2, 1024, std::nullopt).outcome, Outcome::Conflict);
  EXPECT_EQ(reg->add_node("bad name", "x:1", 2, 1024, std::nullopt).outcome, Outcome::Invalid);
  EXPECT_EQ(reg->add_node("d", "x:1", 0, 1024, std::nullopt).outcome, Outcome::Invalid);
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable); // added, never registered: down
  EXPECT_EQ(reg->heartbeat("c").outcome, Outcome::NotFound);
  ASSERT_TRUE(reg->register_node("c", "10.0.0.3:1", 2, 1024, n.value.secret).ok());
  auto g = lease(1);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(reg->remove_node("c", false).outcome, Outcome::Conflict);
  ASSERT_TRUE(reg->remove_node("c", true).ok());
  EXPECT_FALSE(reg->active_lease(g.value.lease.id));
  EXPECT_EQ(store.load_lease(g.value.lease.id)->state, LeaseState::Revoked);
  EXPECT_TRUE(reg->nodes().empty());
  EXPECT_EQ(reg->remove_node("c", false).outcome, Outcome::NotFound);
}

TEST_F(Fixture, InvalidRequestsAreRefused) {
  two_nodes();
  EXPECT_EQ(lease(0).outcome, Outcome::Invalid);
  EXPECT_EQ(lease(1, 0, 0).outcome, Outcome::Invalid);
  EXPECT_EQ(lease(1, 0, 1, "").outcome, Outcome::Invalid);
  EXPECT_EQ(reg->grant(LeaseRequest{"alice", 1, 0, 100'001, 1, kAnonymousOwner, ""}).outcome,
            Outcome::Invalid);
  EXPECT_EQ(reg->counters().refused, 4u);
}

TEST_F(Fixture, RestartKeepsLiveLeasesValid) {
  two_nodes();
  auto g = lease(3, 100);
  auto h = lease(2, 100);
  ASSERT_TRUE(g.ok() && h.ok());
  ASSERT_TRUE(reg->release(h.value.lease.id, "alice", h.value.secret).ok());
  ASSERT_TRUE(reg->drain("b", true).ok());
  reg = make(); // a restart on the same database
  auto live = reg->active_lease(g.value.lease.id);
  ASSERT_TRUE(live);
  EXPECT_EQ(live->parts[0].cores, g.value.lease.parts[0].cores);
  EXPECT_FALSE(reg->active_lease(h.value.lease.id));
  EXPECT_TRUE(reg->node("b")->node.drained);
  auto nodes = reg->nodes();
  uint32_t used = 0;
  for (auto &v : nodes)
    used += v.used_cores;
  EXPECT_EQ(used, 3u);
  // The renewed token still verifies with the node's restored secret.
  auto r = reg->renew(g.value.lease.id, "alice", g.value.secret, 0);
  ASSERT_TRUE(r.ok());
  const std::string &n = r.value.lease.parts[0].node;
  TokenVerifier v(n, n == "a" ? secret_a : secret_b);
  EXPECT_EQ(v.verify(r.value.lease.claim(0), r.value.tokens[0], now), TokenVerdict::Ok);
  // Nodes that were up get a heartbeat timeout to come back.
  now += 2'000;
  reg->tick();
  EXPECT_EQ(reg->node("a")->node.state, NodeState::Up);
}

// A node's final report arrives just after its lease ends: the registry
// answers it from the leases it saw end, with no database look-up (only the
// write), and after a restart, which forgets them, from the database.
TEST_F(Fixture, TheFinalReportOfAJustEndedLeaseCostsOnlyItsWrite) {
  two_nodes();
  auto live = lease(1);
  auto ended = lease(1);
  ASSERT_TRUE(live.ok() && ended.ok());
  const LeasePart &lp = live.value.lease.parts[0], &ep = ended.value.lease.parts[0];
  uint64_t before = store.statements_run();
  ASSERT_TRUE(reg->record_accounting(
                     {live.value.lease.id, lp.node, "", 0, 1, 1, 1, 1, false, kAnonymousOwner, ""})
                  .ok());
  const uint64_t write_only = store.statements_run() - before;
  ASSERT_TRUE(reg->release(ended.value.lease.id, "alice", ended.value.secret).ok());
  before = store.statements_run();
  ASSERT_TRUE(reg->record_accounting(
                     {ended.value.lease.id, ep.node, "", 0, 2, 2, 2, 2, true, kAnonymousOwner, ""})
                  .ok());
  EXPECT_EQ(store.statements_run() - before, write_only);
  reg = make();
  before = store.statements_run();
  ASSERT_TRUE(reg->record_accounting(
                     {ended.value.lease.id, ep.node, "", 0, 3, 3, 3, 3, true, kAnonymousOwner, ""})
                  .ok());
  EXPECT_GT(store.statements_run() - before, write_only) << "after a restart it is looked up";
  auto rows = store.accounting_for_lease(ended.value.lease.id);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].client, "alice");
  EXPECT_EQ(rows[0].allocation_us, 2u) << "a final report stays the last word";
}

TEST_F(Fixture, AccountingIsStoredPerLeaseAndClient) {
  two_nodes();
  auto g = lease(1);
  ASSERT_TRUE(g.ok());
  std::string node = g.value.lease.parts[0].node;
  uint64_t id = g.value.lease.id;
  ASSERT_TRUE(
      reg->record_accounting({id, node, "", 0, 100, 50, 40, 64, false, kAnonymousOwner, ""}).ok());
  ASSERT_TRUE(reg->release(id, "alice", g.value.secret).ok());
  ASSERT_TRUE(
      reg->record_accounting({id, node, "", 0, 200, 90, 80, 64, true, kAnonymousOwner, ""}).ok());
  EXPECT_EQ(reg->record_accounting(
                   {id, node == "a" ? "b" : "a", "", 0, 1, 1, 1, 1, true, kAnonymousOwner, ""})
                .outcome,
            Outcome::Forbidden);
  EXPECT_EQ(
      reg->record_accounting({12345, node, "", 0, 1, 1, 1, 1, true, kAnonymousOwner, ""}).outcome,
      Outcome::NotFound);
  auto rows = store.accounting_for_client("alice");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].allocation_us, 200u);
  EXPECT_TRUE(rows[0].final);
  EXPECT_EQ(rows[0].reported_ms, now);
}

// ---- quotas ------------------------------------------------------------------------

namespace {

LeaseRequest request_of(const std::string &client, uint32_t cores, uint64_t mem,
                        std::optional<uint32_t> uid = std::nullopt) {
  return LeaseRequest{client, cores, mem, 0, 1, uid.value_or(kAnonymousOwner), uid ? "77" : ""};
}

} // namespace

TEST_F(Fixture, CoreQuotaCountsTheUidAcrossClientNames) {
  opts.quotas.defaults = QuotaLimits{4, 0, 0, 0};
  opts.quotas.users["1000"] = QuotaLimits{2, std::nullopt, std::nullopt, std::nullopt};
  reg = make();
  two_nodes();
  // uid 1000 holds 2 cores under two client names: the uid is the user.
  ASSERT_TRUE(reg->grant(request_of("alice@h1", 1, 10, 1000)).ok());
  auto second = reg->grant(request_of("alice@h2", 1, 10, 1000));
  ASSERT_TRUE(second.ok()) << second.message;
  EXPECT_EQ(second.value.lease.owner_uid, 1000u);
  EXPECT_EQ(second.value.lease.job_id, "77");
  auto third = reg->grant(request_of("alice@h3", 1, 10, 1000));
  EXPECT_EQ(third.outcome, Outcome::QuotaExceeded);
  EXPECT_EQ(third.message,
            "quota exceeded: cores 2 of 2 in use for uid 1000; this request asks for 1 more");
  // Another uid, and an anonymous client, get the default (4 cores).
  EXPECT_TRUE(reg->grant(request_of("bob", 1, 10, 1001)).ok());
  EXPECT_TRUE(reg->grant(request_of("carol", 3, 10)).ok());
  auto over = reg->grant(request_of("carol", 2, 10));
  EXPECT_EQ(over.message,
            "quota exceeded: cores 3 of 4 in use for client carol; this request asks for 2 more");
  EXPECT_EQ(reg->counters().refused_quota, 2u);
  // Releasing frees the quota as well as the cores.
  ASSERT_TRUE(reg->release(second.value.lease.id, "alice@h2", second.value.secret).ok());
  EXPECT_TRUE(reg->grant(request_of("alice@h3", 1, 10, 1000)).ok());
}

TEST_F(Fixture, MemoryAndLeaseCountQuotasNameTheirLimit) {
  opts.quotas.defaults = QuotaLimits{0, 1000, 2, 0};
  reg = make();
  two_nodes();
  ASSERT_TRUE(reg->grant(request_of("dave", 1, 600)).ok());
  auto mem = reg->grant(request_of("dave", 1, 500));
  EXPECT_EQ(mem.outcome, Outcome::QuotaExceeded);
  EXPECT_EQ(mem.message, "quota exceeded: memory 600 of 1000 MiB in use for client dave; this "
                         "request asks for 500 MiB more");
  ASSERT_TRUE(reg->grant(request_of("dave", 1, 400)).ok());
  auto count = reg->grant(request_of("dave", 1, 0));
  EXPECT_EQ(count.message, "quota exceeded: leases 2 of 2 active for client dave");
  // A lease for 0 MiB counts with the default memory it gets.
  opts.quotas.defaults = QuotaLimits{0, 1000, 0, 0};
  opts.default_memory_mib = 1024;
  reg = make();
  EXPECT_EQ(reg->grant(request_of("erin", 1, 0)).outcome, Outcome::QuotaExceeded);
}

TEST_F(Fixture, RequestRateQuotaSlidesWithTheClock) {
  opts.quotas.defaults = QuotaLimits{0, 0, 0, 3};
  reg = make();
  two_nodes();
  // Refused requests count too (here: too many cores for any node).
  EXPECT_EQ(reg->grant(request_of("frank", 100, 10)).outcome, Outcome::Unavailable);
  EXPECT_TRUE(reg->grant(request_of("frank", 1, 10)).ok());
  now += 30'000;
  EXPECT_TRUE(reg->grant(request_of("frank", 1, 10)).ok());
  auto fourth = reg->grant(request_of("frank", 1, 10));
  EXPECT_EQ(fourth.outcome, Outcome::QuotaExceeded);
  EXPECT_EQ(fourth.message,
            "quota exceeded: lease requests 3 of 3 per minute for client frank; retry in 30 s");
  // Another user is not affected; frank is again once the first two left
  // the window (the refused fourth was not counted).
  EXPECT_TRUE(reg->grant(request_of("grace", 1, 10)).ok());
  now += 30'000;
  EXPECT_TRUE(reg->grant(request_of("frank", 1, 10)).ok());
  EXPECT_TRUE(reg->grant(request_of("frank", 1, 10)).ok());
  EXPECT_EQ(reg->grant(request_of("frank", 1, 10)).outcome, Outcome::QuotaExceeded);
}

TEST_F(Fixture, QuotasSetByTheOperatorWinAndSurviveARestart) {
  opts.quotas.defaults = QuotaLimits{1, 0, 0, 0};
  reg = make();
  two_nodes();
  ASSERT_TRUE(
      reg->set_quota("1000", QuotaLimits{3, std::nullopt, std::nullopt, std::nullopt}).ok());
  ASSERT_TRUE(reg->set_quota("", QuotaLimits{2, std::nullopt, std::nullopt, std::nullopt}).ok());
  reg = make(); // the same store: a restart
  QuotaSource src;
  EXPECT_EQ(*reg->quotas().effective(QuotaUser{1000u, "x"}, &src).cores, 3u);
  EXPECT_EQ(src, QuotaSource::Rest);
  EXPECT_EQ(*reg->quotas().effective(QuotaUser{std::nullopt, "x"}, &src).cores, 2u);
  EXPECT_EQ(src, QuotaSource::Default);
  EXPECT_TRUE(reg->grant(request_of("x", 3, 10, 1000)).ok());
  EXPECT_EQ(reg->grant(request_of("y", 3, 10)).outcome, Outcome::QuotaExceeded);
  // Removing the REST default brings the configuration's back.
  ASSERT_TRUE(reg->remove_quota("").ok());
  EXPECT_EQ(reg->remove_quota("").outcome, Outcome::NotFound);
  EXPECT_EQ(reg->grant(request_of("y", 2, 10)).outcome, Outcome::QuotaExceeded);
  EXPECT_TRUE(reg->grant(request_of("y", 1, 10)).ok());
}

// Nodes end allocations at the expiry they know, on their own clock: a
// renewal is told to each node of the lease, and a node that registers again
// hears the expiry of each active lease it holds a part of.
TEST_F(Fixture, RenewalsAndRegistrationsTellTheNodesTheExpiry) {
  two_nodes();
  auto g = lease(6, 100, 2); // spans both nodes
  ASSERT_TRUE(g.ok()) << g.message;
  ASSERT_EQ(g.value.lease.parts.size(), 2u);
  reg->take_events();
  now += 1000;
  auto r = reg->renew(g.value.lease.id, "alice", g.value.secret, 2000);
  ASSERT_TRUE(r.ok()) << r.message;
  auto events = reg->take_events();
  ASSERT_EQ(events.size(), 2u);
  std::set<std::string> nodes;
  for (const LeaseEnded &e : events) {
    EXPECT_EQ(e.lease_id, g.value.lease.id);
    EXPECT_EQ(e.why, LeaseState::Active);
    EXPECT_EQ(e.expiry_ms, now + 2000);
    nodes.insert(e.node);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{"a", "b"}));
  ASSERT_TRUE(reg->register_node("a", "10.0.0.1:1", 4, 4096, secret_a).ok());
  events = reg->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].node, "a");
  EXPECT_EQ(events[0].why, LeaseState::Active);
  EXPECT_EQ(events[0].expiry_ms, now + 2000);
}

namespace {

/// What quota_usage() must say, counted the slow way from the active leases.
QuotaUsage recount(const Registry &r, const QuotaUser &user) {
  QuotaUsage u;
  for (const Lease &l : r.active_leases()) {
    const std::optional<uint32_t> owner = known_owner(l.owner_uid);
    if (user.uid ? owner != user.uid : (owner || l.client != user.client))
      continue;
    u.cores += l.total_cores();
    u.memory_mib += l.total_memory_mib();
    ++u.leases;
  }
  return u;
}

void expect_usage(const Registry &r, const QuotaUser &user, uint64_t leases) {
  const QuotaUsage want = recount(r, user), got = r.quota_usage(user);
  EXPECT_EQ(got.leases, leases) << user.describe();
  EXPECT_EQ(got.leases, want.leases) << user.describe();
  EXPECT_EQ(got.cores, want.cores) << user.describe();
  EXPECT_EQ(got.memory_mib, want.memory_mib) << user.describe();
}

/// node_totals() against a recount over nodes().
void expect_totals(const Registry &r) {
  NodeTotals want;
  for (const NodeView &v : r.nodes()) {
    (v.node.state == NodeState::Up ? want.up : want.down) += 1;
    want.drained += v.node.drained;
    want.cores += v.node.cores;
    want.cores_leased += v.used_cores;
  }
  const NodeTotals got = r.node_totals();
  EXPECT_EQ(got.up, want.up);
  EXPECT_EQ(got.down, want.down);
  EXPECT_EQ(got.drained, want.drained);
  EXPECT_EQ(got.cores, want.cores);
  EXPECT_EQ(got.cores_leased, want.cores_leased);
}

} // namespace

// The per-user tally quota_usage() reads follows every way a lease starts
// and ends, and a restart rebuilds it.
TEST_F(Fixture, QuotaTallyFollowsGrantRenewAndEveryEnd) {
  two_nodes();
  const QuotaUser uid7{7u, ""}, alice{std::nullopt, "alice"}, bob{std::nullopt, "bob"};
  auto as = [&](uint32_t uid, const std::string &client, uint32_t cores, uint32_t max_nodes = 1) {
    auto g = reg->grant(LeaseRequest{client, cores, 100, 0, max_nodes, uid, ""});
    EXPECT_TRUE(g.ok()) << g.message;
    return g.value;
  };
  // uid 7 under two client names counts once, apart from anonymous alice.
  Grant a = as(7, "x", 1), b = as(7, "y", 2, 2), c = as(kAnonymousOwner, "alice", 1);
  Grant d = as(kAnonymousOwner, "bob", 1);
  expect_usage(*reg, uid7, 2);
  expect_usage(*reg, alice, 1);
  expect_usage(*reg, bob, 1);
  ASSERT_TRUE(reg->renew(a.lease.id, "x", a.secret, 50'000).ok());
  expect_usage(*reg, uid7, 2);
  ASSERT_TRUE(reg->release(c.lease.id, "alice", c.secret).ok());
  expect_usage(*reg, alice, 0);
  ASSERT_TRUE(reg->revoke(d.lease.id).ok());
  expect_usage(*reg, bob, 0);
  now += 10'000; // b expires, a (renewed) does not
  reg->heartbeat("a");
  reg->heartbeat("b");
  EXPECT_EQ(reg->tick(), 1u);
  expect_usage(*reg, uid7, 1);
  Grant e = as(kAnonymousOwner, "alice", 3);
  expect_usage(*reg, alice, 1);
  reg = make(); // rebuilt from the store
  expect_usage(*reg, uid7, 1);
  expect_usage(*reg, alice, 1);
  ASSERT_TRUE(reg->mark_down(a.lease.parts[0].node).ok());
  ASSERT_TRUE(reg->mark_down(e.lease.parts[0].node).ok());
  expect_usage(*reg, uid7, 0);
  expect_usage(*reg, alice, 0);
}

// tick() looks at the leases that are due and the nodes that are silent,
// not at all of them; mark_down() and a registration at the node's own
// leases. Counts of entries looked at (Registry::work()), not times.
TEST_F(Fixture, PerEventWorkDoesNotGrowWithTheFleet) {
  constexpr int kNodes = 400;
  for (int i = 0; i < kNodes; ++i)
    ASSERT_TRUE(reg->register_node("n" + std::to_string(i), "h:1", 4, 4096, secret_a).ok());
  // Three leases per node, with durations 1..30 s (spread puts one on
  // each node before a second on any).
  std::vector<Grant> grants;
  for (int i = 0; i < 3 * kNodes; ++i) {
    auto g = reg->grant(LeaseRequest{"c" + std::to_string(i % 5), 1, 10,
                                     1'000 + static_cast<uint64_t>(i % 30) * 1'000, 1,
                                     kAnonymousOwner, ""});
    ASSERT_TRUE(g.ok()) << i << ": " << g.message;
    grants.push_back(g.value);
  }
  // A grant among 400 nodes of equal size looks at one or two entries.
  Work before = reg->work();
  auto extra = lease(1);
  ASSERT_TRUE(extra.ok());
  EXPECT_LE(reg->work().placement - before.placement, 2u);
  // This one by its id: lease ids are random, so the last active lease may
  // be any of the grants (a 1 s one now and then, which then never expires).
  reg->revoke(extra.value.lease.id);

  // Nothing due, nobody silent: one lease and one node looked at.
  before = reg->work();
  EXPECT_EQ(reg->tick(), 0u);
  EXPECT_LE(reg->work().leases - before.leases, 1u);
  EXPECT_LE(reg->work().nodes - before.nodes, 1u);

  // 1.5 s later exactly the 1 s leases are due.
  now += 1'500;
  for (int i = 0; i < kNodes; ++i)
    reg->heartbeat("n" + std::to_string(i));
  size_t due = 0;
  for (const Grant &g : grants)
    due += g.lease.expiry_ms <= now;
  // One lease of them renewed: it must not expire at its old expiry.
  const Grant &first = grants[0];
  ASSERT_LE(first.lease.expiry_ms, now);
  now -= 1'000;
  ASSERT_TRUE(reg->renew(first.lease.id, first.lease.client, first.secret, 60'000).ok());
  now += 1'000;
  before = reg->work();
  EXPECT_EQ(reg->tick(), due - 1);
  EXPECT_LE(reg->work().leases - before.leases, due + 1);
  EXPECT_TRUE(reg->active_lease(first.lease.id));
  for (const Lease &l : reg->active_leases())
    EXPECT_GT(l.expiry_ms, now) << "lease " << l.id << " should have expired";

  // Half the nodes fall silent: tick looks at those and one more.
  now += 3'001 - 1'500;
  for (int i = 0; i < kNodes; i += 2)
    reg->heartbeat("n" + std::to_string(i));
  now += 1'500;
  before = reg->work();
  reg->tick();
  EXPECT_LE(reg->work().nodes - before.nodes, static_cast<uint64_t>(kNodes / 2 + 1));
  for (int i = 0; i < kNodes; ++i)
    EXPECT_EQ(reg->node("n" + std::to_string(i))->node.state,
              i % 2 ? NodeState::Down : NodeState::Up)
        << i;
  expect_totals(*reg);

  // A node going down looks at its own leases only, and ends just those.
  const NodeView n0 = *reg->node("n0");
  ASSERT_GT(n0.active_leases, 0u);
  const size_t active = reg->active_count();
  before = reg->work();
  ASSERT_TRUE(reg->mark_down("n0").ok());
  EXPECT_EQ(reg->work().leases - before.leases, n0.active_leases);
  EXPECT_EQ(reg->active_count(), active - n0.active_leases);
  EXPECT_EQ(reg->node("n0")->used_cores, 0u);
  // A registration tells the node of its own leases, looking at no other.
  const NodeView n2 = *reg->node("n2");
  reg->take_events();
  before = reg->work();
  ASSERT_TRUE(reg->register_node("n2", "h:1", 4, 4096, secret_a).ok());
  EXPECT_EQ(reg->work().leases - before.leases, n2.active_leases);
  EXPECT_EQ(reg->take_events().size(), n2.active_leases);
  expect_totals(*reg);
}

// The capacity index and the totals follow drains, downs, re-registrations
// with fewer cores, removals and restarts.
TEST_F(Fixture, CapacityIndexFollowsEveryNodeChange) {
  two_nodes();
  auto g = lease(4); // all of one node (spread: a, the first name)
  ASSERT_TRUE(g.ok());
  const std::string full = g.value.lease.parts[0].node;
  const std::string other = full == "a" ? "b" : "a";
  expect_totals(*reg);
  // The full node re-registers with 2 cores while its lease holds 4.
  ASSERT_TRUE(reg->register_node(full, "x:1", 2, 4096, full == "a" ? secret_a : secret_b).ok());
  EXPECT_EQ(reg->node(full)->used_cores, 4u);
  expect_totals(*reg);
  ASSERT_TRUE(reg->drain(other, true).ok());
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable);
  expect_totals(*reg);
  ASSERT_TRUE(reg->drain(other, false).ok());
  auto h = lease(4);
  ASSERT_TRUE(h.ok()) << h.message;
  EXPECT_EQ(h.value.lease.parts[0].node, other);
  ASSERT_TRUE(reg->release(g.value.lease.id, "alice", g.value.secret).ok());
  // Only the 2 cores it has now are free on it.
  EXPECT_EQ(lease(3).outcome, Outcome::Unavailable);
  auto k = lease(2);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k.value.lease.parts[0].node, full);
  expect_totals(*reg);
  reg = make();
  expect_totals(*reg);
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable); // both full after the restart
  ASSERT_TRUE(reg->remove_node(other, true).ok());
  EXPECT_FALSE(reg->active_lease(h.value.lease.id));
  expect_totals(*reg);
  ASSERT_TRUE(reg->release(k.value.lease.id, "alice", k.value.secret).ok());
  EXPECT_TRUE(lease(2).ok());
  ASSERT_TRUE(reg->mark_down(full).ok());
  EXPECT_EQ(lease(1).outcome, Outcome::Unavailable);
  ASSERT_TRUE(reg->heartbeat(full).ok());
  EXPECT_TRUE(lease(2).ok());
  expect_totals(*reg);
}

// What the loop publishes for GET /nodes after an event is the nodes the
// event touched, not the fleet (published_nodes.hpp): counts, not times.
TEST_F(Fixture, ChangedNodesAreThoseAnEventTouched) {
  constexpr int kNodes = 10'000;
  for (int i = 0; i < kNodes; ++i)
    ASSERT_TRUE(reg->register_node("n" + std::to_string(i), "h:1", 4, 4096, secret_a).ok());
  PublishedNodes published;
  auto t0 = std::chrono::steady_clock::now();
  published.publish(*reg); // the first: every node
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_TRUE(published.page().body);
  // The hand-over after a read notes what the reader took (here every
  // node, once): amortised, one entry per change.
  published.publish(*reg);
  EXPECT_TRUE(reg->take_changed_nodes().empty());

  auto g = lease(2);
  ASSERT_TRUE(g.ok()) << g.message;
  auto changed = reg->take_changed_nodes();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].first, g.value.lease.parts[0].node);
  ASSERT_TRUE(changed[0].second);
  EXPECT_EQ(changed[0].second->used_cores, 2u);

  // A lease over three nodes touches those three; its release the same.
  auto wide = lease(10, 0, 3);
  ASSERT_TRUE(wide.ok()) << wide.message;
  EXPECT_EQ(reg->take_changed_nodes().size(), wide.value.lease.parts.size());
  ASSERT_TRUE(reg->release(wide.value.lease.id, "alice", wide.value.secret).ok());
  EXPECT_EQ(reg->take_changed_nodes().size(), wide.value.lease.parts.size());

  now += 100;
  ASSERT_TRUE(reg->heartbeat("n42").ok());
  ASSERT_TRUE(reg->heartbeat("n42").ok());
  changed = reg->take_changed_nodes();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].second->node.last_heartbeat_ms, now);

  ASSERT_TRUE(reg->drain("n7", true).ok());
  ASSERT_TRUE(reg->remove_node("n7", false).ok());
  changed = reg->take_changed_nodes();
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_EQ(changed[0].first, "n7");
  EXPECT_FALSE(changed[0].second) << "removed";

  // One publication after a grant, beside a copy of every node (what a GET
  // /nodes used to cost the loop), for the log.
  ASSERT_TRUE(lease(1).ok());
  ASSERT_TRUE(reg->remove_node("n8", false).ok());
  auto t2 = std::chrono::steady_clock::now();
  published.publish(*reg);
  auto t3 = std::chrono::steady_clock::now();
  auto copy = reg->nodes();
  auto t4 = std::chrono::steady_clock::now();
  auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  std::printf("%d nodes: first publication %.0f us, one after a grant and a removal %.1f us, a "
              "copy of every node %.0f us\n",
              kNodes, us(t1 - t0), us(t3 - t2), us(t4 - t3));
  EXPECT_EQ(copy.size(), static_cast<size_t>(kNodes - 2));
  const std::string body = *published.page().body;
  EXPECT_EQ(body.find("\"n8\""), std::string::npos);
  EXPECT_NE(body.find("\"n9\""), std::string::npos);
}

// Nobody reading GET /leases or /nodes for a long time costs no memory: an
// ended lease no reader saw is dropped from what waits for the readers; one
// a reader saw leaves its table at the next read.
TEST_F(Fixture, PublishedTablesStayBoundedWithoutReaders) {
  two_nodes();
  PublishedLeases leases;
  PublishedNodes nodes;
  leases.publish(*reg);
  nodes.publish(*reg);
  for (int i = 0; i < 1000; ++i) {
    auto g = lease(1);
    ASSERT_TRUE(g.ok()) << g.message;
    ASSERT_TRUE(reg->release(g.value.lease.id, "alice", g.value.secret).ok());
    leases.publish(*reg);
    nodes.publish(*reg);
  }
  EXPECT_EQ(leases.pending(), 0u);
  EXPECT_LE(nodes.pending(), 2u);

  auto g = lease(1);
  ASSERT_TRUE(g.ok()) << g.message;
  leases.publish(*reg);
  const std::string id = "\"id\":" + std::to_string(g.value.lease.id);
  EXPECT_NE(leases.page().body->find(id), std::string::npos);
  ASSERT_TRUE(reg->release(g.value.lease.id, "alice", g.value.secret).ok());
  leases.publish(*reg);
  EXPECT_EQ(leases.pending(), 1u) << "the reader's table has it: its end waits for the reader";
  EXPECT_EQ(*leases.page().body, "[]\n");
  std::string expected = "[";
  for (const NodeView &v : reg->nodes())
    expected += (expected.size() > 1 ? "," : "") + node_json(v).dump();
  EXPECT_EQ(*nodes.page().body, expected + "]\n");
}

// A grant looks nothing up to find a new id: ids are above the highest the
// database held at start, even when the clock now reads earlier than the
// one that named it (here an id from far in the future).
TEST_F(Fixture, NewLeaseIdsAreAboveEveryStoredOne) {
  two_nodes();
  Lease old;
  old.id = (uint64_t{1} << 52) + 7;
  old.client = "alice";
  old.state = LeaseState::Released;
  old.granted_ms = now;
  old.expiry_ms = now + 1;
  old.ended_ms = now + 1;
  store.put_lease(old);
  reg = make();
  auto g = lease(1);
  ASSERT_TRUE(g.ok()) << g.message;
  EXPECT_GT(g.value.lease.id, old.id);
  auto g2 = lease(1);
  ASSERT_TRUE(g2.ok()) << g2.message;
  EXPECT_GT(g2.value.lease.id, g.value.lease.id);
}

// A renewal that shortens a lease leaves its first token valid until that
// token's own expiry. The end's notice carries that later date, so a node
// refuses the first token as a replay for as long as it would verify, also
// with a retention shorter than the gap (the 24 h default otherwise hid a
// lease longer than a day), and after a restart of the resource manager.
TEST_F(Fixture, TheEndOfAShortenedLeaseIsKeptUntilItsLatestTokenExpires) {
  two_nodes();
  auto g = reg->grant(LeaseRequest{"alice", 1, 0, 80'000, 1, kAnonymousOwner, ""});
  ASSERT_TRUE(g.ok()) << g.message;
  const uint64_t id = g.value.lease.id;
  const uint64_t first_expiry = g.value.lease.expiry_ms;
  EXPECT_EQ(g.value.lease.tokens_until_ms, first_expiry);
  now += 1'000;
  auto shorter = reg->renew(id, "alice", g.value.secret, 5'000);
  ASSERT_TRUE(shorter.ok()) << shorter.message;
  EXPECT_EQ(shorter.value.lease.expiry_ms, now + 5'000);
  EXPECT_EQ(shorter.value.lease.tokens_until_ms, first_expiry);
  // Restarted: the bound comes back from the database.
  reg = make();
  ASSERT_TRUE(reg->active_lease(id));
  EXPECT_EQ(reg->active_lease(id)->tokens_until_ms, first_expiry);
  reg->take_events();
  ASSERT_TRUE(reg->release(id, "alice", g.value.secret).ok());
  std::vector<LeaseEnded> events = reg->take_events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].why, LeaseState::Released);
  EXPECT_EQ(events[0].expiry_ms, first_expiry);

  const std::string &n = g.value.lease.parts[0].node;
  TokenVerifier v(n, n == "a" ? secret_a : secret_b, 1'000);
  v.mark_ended(id, events[0].expiry_ms, now);
  // Past the shortened expiry and the retention, before the first token's.
  const uint64_t later = now + 30'000;
  v.mark_ended(id + 1, 0, later); // prunes what is due by then
  EXPECT_EQ(v.verify(g.value.lease.claim(0), g.value.tokens[0], later), TokenVerdict::Replayed);
  // Once every token expired, the entry goes: nothing could be replayed.
  v.mark_ended(id + 2, 0, first_expiry);
  EXPECT_EQ(v.ended_count(), 1u);
  EXPECT_EQ(v.verify(g.value.lease.claim(0), g.value.tokens[0], first_expiry),
            TokenVerdict::Expired);

  // A node that registers again is told the end while a token could verify.
  ASSERT_TRUE(reg->register_node(n, "10.0.0.9:1", 4, 4096, n == "a" ? secret_a : secret_b).ok());
  auto told = store.ended_unexpired_on(n, now + 30'000);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].tokens_until_ms, first_expiry);
  EXPECT_TRUE(store.ended_unexpired_on(n, first_expiry).empty());
}
