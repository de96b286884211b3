// Lease tokens: a token verifies on its node only, for exactly the fields it
// was issued for, until its expiry, and never after its lease ended there.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "resource_manager/lease_token.hpp"

using namespace rfaas::rm;

namespace {

LeaseClaim claim() {
  return LeaseClaim{0x1234567890abcdefull, "node-a", 4, 2048, 1'000'000, "client-1", 1000};
}

} // namespace

TEST(LeaseToken, ValidTokenIsAccepted) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret);
  LeaseToken t = compute_token(claim(), secret);
  EXPECT_EQ(v.verify(claim(), t, 999'999), TokenVerdict::Ok);
}

TEST(LeaseToken, TokenIsDeterministicAndSixteenBytes) {
  NodeSecret secret = generate_secret();
  EXPECT_EQ(compute_token(claim(), secret), compute_token(claim(), secret));
  EXPECT_EQ(sizeof(LeaseToken), 16u);
}

TEST(LeaseToken, EveryFieldIsCovered) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret);
  LeaseToken t = compute_token(claim(), secret);
  std::vector<LeaseClaim> altered(8, claim());
  altered[0].lease_id += 1;
  altered[1].cores = 5;
  altered[2].memory_mib = 4096;
  altered[3].expiry_ms += 1;
  altered[4].client = "client-2";
  altered[5].client = "client-1x";
  // The owner's uid: a node runs the lease's executors as it.
  altered[6].owner_uid = 0;
  altered[7].owner_uid = kAnonymousOwner;
  for (const LeaseClaim &c : altered)
    EXPECT_EQ(v.verify(c, t, 0), TokenVerdict::Forged) << c.lease_id << " " << c.client;
}

TEST(LeaseToken, ForgedTokenIsRefused) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret);
  LeaseToken t = compute_token(claim(), secret);
  t[7] ^= 1;
  EXPECT_EQ(v.verify(claim(), t, 0), TokenVerdict::Forged);
  // Issued with another secret (a client guessing, or a stale node secret).
  EXPECT_EQ(v.verify(claim(), compute_token(claim(), generate_secret()), 0), TokenVerdict::Forged);
  LeaseToken zero{};
  EXPECT_EQ(v.verify(claim(), zero, 0), TokenVerdict::Forged);
}

TEST(LeaseToken, ExpiredTokenIsRefused) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret);
  LeaseToken t = compute_token(claim(), secret);
  EXPECT_EQ(v.verify(claim(), t, claim().expiry_ms), TokenVerdict::Expired);
  EXPECT_EQ(v.verify(claim(), t, claim().expiry_ms + 1), TokenVerdict::Expired);
}

TEST(LeaseToken, ForeignTokenIsRefused) {
  // Node b has the same secret by accident: the node name still tells.
  NodeSecret secret = generate_secret();
  TokenVerifier b("node-b", secret);
  LeaseToken t = compute_token(claim(), secret);
  EXPECT_EQ(b.verify(claim(), t, 0), TokenVerdict::Foreign);
  LeaseClaim renamed = claim();
  renamed.node = "node-b"; // the client edits the node name: the MAC breaks
  EXPECT_EQ(b.verify(renamed, t, 0), TokenVerdict::Forged);
}

TEST(LeaseToken, ReplayedTokenIsRefused) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret, 10'000);
  LeaseToken t = compute_token(claim(), secret);
  ASSERT_EQ(v.verify(claim(), t, 500), TokenVerdict::Ok);
  EXPECT_TRUE(v.mark_ended(claim().lease_id, claim().expiry_ms, 600));
  EXPECT_EQ(v.verify(claim(), t, 700), TokenVerdict::Replayed);
  // Told again (a node's registration repeats the ends it may have missed).
  EXPECT_FALSE(v.mark_ended(claim().lease_id, claim().expiry_ms, 650));
  // Remembered until the expiry has passed, then refused as expired.
  v.mark_ended(42, 800, 700); // prunes nothing still relevant
  EXPECT_EQ(v.ended_count(), 2u);
  EXPECT_EQ(v.verify(claim(), t, claim().expiry_ms + 1), TokenVerdict::Replayed);
  v.mark_ended(43, 0, claim().expiry_ms + 20'000); // prunes the first two
  EXPECT_EQ(v.ended_count(), 1u);
  EXPECT_EQ(v.verify(claim(), t, claim().expiry_ms + 20'000), TokenVerdict::Expired);
}

// Each lease-ended notice forgets only the entries that are due: marking
// 20,000 leases looks at each entry about once, where a scan of the whole
// map per notice looked at about 20,000 x 1,000 (the retention window).
TEST(LeaseToken, ForgettingEndedLeasesDoesNotScan) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret, 1'000);
  constexpr uint64_t kLeases = 20'000;
  for (uint64_t i = 0; i < kLeases; ++i)
    v.mark_ended(i + 1, 0, i);
  EXPECT_LE(v.ended_count(), 1'001u);
  EXPECT_LE(v.prune_steps(), kLeases);
  // Marked again later, a lease is kept until its later date.
  TokenVerifier w("node-a", secret, 1'000);
  w.mark_ended(7, 0, 0);      // until 1000
  w.mark_ended(7, 5'000, 10); // until 5000
  w.mark_ended(8, 0, 2'000);  // 7 stays
  EXPECT_EQ(w.ended_count(), 2u);
  w.mark_ended(9, 0, 5'000); // now 7 and 8 are due
  EXPECT_EQ(w.ended_count(), 1u);
}

// An end whose latest token expiry the resource manager told is kept until
// then and no longer, however long the retention: a node's table holds the
// leases whose tokens could still verify, not a day of churn. One the node
// decided itself (0) is kept for the retention. mark_ended says when it
// made the entry last longer, which is when a node writes it down.
TEST(LeaseToken, AnEndIsKeptUntilItsLatestTokenExpiresWhenThatIsKnown) {
  NodeSecret secret = generate_secret();
  TokenVerifier v("node-a", secret); // the default day
  EXPECT_EQ(v.mark_ended(1, 5'000, 1'000), 5'000u);
  EXPECT_EQ(v.mark_ended(1, 5'000, 1'500), 0u) << "told again: nothing new";
  EXPECT_EQ(v.mark_ended(1, 4'000, 1'600), 0u) << "never shortened";
  EXPECT_EQ(v.mark_ended(2, 0, 2'000), 2'000u + 24ull * 3600 * 1000);
  EXPECT_EQ(v.mark_ended(1, 7'000, 2'100), 7'000u) << "a later token is news";
  v.mark_ended(3, 9'000, 7'000); // prunes lease 1, keeps 2
  EXPECT_EQ(v.ended_count(), 2u);
  LeaseClaim c = claim();
  c.lease_id = 1;
  c.expiry_ms = 7'000;
  EXPECT_EQ(v.verify(c, compute_token(c, secret), 7'000), TokenVerdict::Expired);
  c.expiry_ms = 9'000; // lease 3 is remembered until its tokens expire
  c.lease_id = 3;
  EXPECT_EQ(v.verify(c, compute_token(c, secret), 7'000), TokenVerdict::Replayed);

  // The node ended lease 4 by its own clock (a guess: a day); the resource
  // manager's notice, which knows every token, brings the date forward. The
  // node's own date never replaces the resource manager's.
  EXPECT_EQ(v.mark_ended(4, 0, 7'000), 7'000u + 24ull * 3600 * 1000);
  EXPECT_EQ(v.mark_ended(4, 7'500, 7'100), 7'500u);
  EXPECT_EQ(v.keep_ended_until(4, 90'000, 7'200), 0u);
  EXPECT_EQ(v.mark_ended(4, 0, 7'300), 0u);
  v.mark_ended(5, 0, 7'500);      // prunes lease 4 (nothing stale is left behind)
  EXPECT_EQ(v.ended_count(), 3u); // 2, 3 and 5
  LeaseClaim d = claim();
  d.lease_id = 4;
  d.expiry_ms = 7'500;
  EXPECT_EQ(v.verify(d, compute_token(d, secret), 7'500), TokenVerdict::Expired);
  // A date read back from the node's file is a guess too.
  EXPECT_EQ(v.keep_ended_until(6, 50'000, 7'600), 50'000u);
  EXPECT_EQ(v.mark_ended(6, 8'000, 7'700), 8'000u);
}

TEST(LeaseToken, ReasonsAreDistinctAndNameLeaseInvalid) {
  std::set<std::string> texts;
  for (TokenVerdict r : {TokenVerdict::Forged, TokenVerdict::Expired, TokenVerdict::Foreign,
                         TokenVerdict::Replayed}) {
    std::string t = reason_text(r);
    EXPECT_EQ(t.rfind("lease_invalid: ", 0), 0u) << t;
    texts.insert(t);
  }
  EXPECT_EQ(texts.size(), 4u);
}

// Secrets are random; lease ids are unique and rise, so that consecutive
// leases' rows share the database's pages.
TEST(LeaseToken, SecretsAreRandomAndIdsRise) {
  EXPECT_NE(generate_secret(), generate_secret());
  uint64_t prev = 0;
  for (int i = 0; i < 1000; ++i) {
    uint64_t id = generate_lease_id();
    EXPECT_LT(id, 1ull << 53);
    EXPECT_GT(id, prev) << "after " << i << " ids";
    prev = id;
  }
  // The milliseconds since 2024 lead: an id of now is above one of 2025.
  EXPECT_GT(prev, uint64_t{31'536'000'000} << 12);
}

TEST(LeaseToken, SecretsNeverRepeatAcrossBlocksAndThreads) {
  // The generator hands out a block at a time and rekeys: thousands of
  // secrets cross many blocks. Every thread keys its own from the kernel.
  std::set<LeaseSecret> seen;
  size_t ones = 0, bits = 0;
  auto take = [&](const LeaseSecret &s) {
    EXPECT_TRUE(seen.insert(s).second) << "a lease secret repeated after " << seen.size();
    for (uint8_t b : s)
      ones += static_cast<size_t>(__builtin_popcount(b));
    bits += s.size() * 8;
  };
  for (int i = 0; i < 4000; ++i)
    take(generate_lease_secret());
  std::vector<LeaseSecret> other(4000);
  std::thread t([&] {
    for (LeaseSecret &s : other)
      s = generate_lease_secret();
  });
  t.join();
  for (const LeaseSecret &s : other)
    take(s);
  // 8000 x 128 bits: a fair source lands within 0.5% of half (about 11
  // standard deviations); a stuck or zeroed stream does not.
  EXPECT_NEAR(static_cast<double>(ones) / static_cast<double>(bits), 0.5, 0.005);
  EXPECT_NE(generate_secret(), NodeSecret{});
}

TEST(LeaseToken, HexRoundTrip) {
  NodeSecret s = generate_secret();
  std::string hex = to_hex(s);
  EXPECT_EQ(hex.size(), 64u);
  NodeSecret back{};
  ASSERT_TRUE(from_hex(hex, back));
  EXPECT_EQ(back, s);
  EXPECT_FALSE(from_hex(hex.substr(1), back));
  EXPECT_FALSE(from_hex(std::string(64, 'g'), back));
}

TEST(LeaseToken, RegistrationProofCoversEveryFieldAndTheSecret) {
  NodeSecret s = generate_secret();
  RegistrationClaim c{"node-a", "10.0.0.1:10000", 8, 4096, 1'790'000'000'000ull};
  LeaseToken proof = registration_proof(c, s);
  EXPECT_TRUE(verify_registration(c, proof, s));
  EXPECT_FALSE(verify_registration(c, proof, generate_secret()));
  for (int field = 0; field < 5; ++field) {
    RegistrationClaim d = c;
    switch (field) {
    case 0:
      d.node = "node-b";
      break;
    case 1:
      d.address = "10.0.0.1:10001";
      break;
    case 2:
      d.cores = 9;
      break;
    case 3:
      d.memory_mib = 4097;
      break;
    case 4:
      d.timestamp_ms += 1;
      break;
    }
    EXPECT_FALSE(verify_registration(d, proof, s)) << "field " << field;
  }
  // Not interchangeable with a lease token over similar fields.
  LeaseClaim lc{1, "node-a", 8, 4096, c.timestamp_ms, "10.0.0.1:10000"};
  EXPECT_NE(compute_token(lc, s), proof);
}

TEST(LeaseToken, SecretFileIsReadOrRefusedWithTheFix) {
  std::string path = ::testing::TempDir() + "/rfaas-secret-test";
  NodeSecret s = generate_secret();
  { std::ofstream(path) << to_hex(s) << "\n"; }
  EXPECT_EQ(read_secret_file(path), s);
  { std::ofstream(path) << "not hex\n"; }
  try {
    read_secret_file(path);
    ADD_FAILURE() << "a bad secret file was accepted";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("openssl rand -hex 32"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
  EXPECT_THROW(read_secret_file(path), std::runtime_error);
}
