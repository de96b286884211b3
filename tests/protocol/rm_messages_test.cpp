// Resource-manager messages: layout, round trips, and rejection of what a
// peer could get wrong (empty names, limits, inconsistent grants, truncation).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "protocol/rm_messages.hpp"

namespace p = rfaas::protocol;

namespace {

struct FieldCounter {
  size_t bytes = 0;
  template <class T> void operator()(const T &v) {
    if constexpr (std::is_integral<T>::value || std::is_enum<T>::value || std::is_array<T>::value ||
                  p::detail::is_reserved<T>::value || std::is_same<T, p::Token>::value)
      bytes += sizeof(T);
    else
      T::fields(v, *this);
  }
};

p::Token token_with(uint8_t seed) {
  p::Token t;
  for (size_t i = 0; i < p::kTokenSize; ++i)
    t.bytes[i] = static_cast<uint8_t>(seed + 31 * i);
  return t;
}

template <class M> M sample();
template <> p::NodeRegister sample() {
  p::NodeRegister m;
  m.cores = 8;
  m.memory_mib = 65536;
  m.timestamp_ms = 1'790'000'000'000ull;
  m.proof = token_with(3);
  p::set_text(m.node, "node-a");
  p::set_text(m.address, "10.0.0.1:10000");
  return m;
}
template <> p::NodeRegistered sample() {
  p::NodeRegistered m;
  m.heartbeat_ms = 1000;
  m.now_ms = 42;
  p::set_text(m.message, "welcome back");
  return m;
}
template <> p::Heartbeat sample() {
  p::Heartbeat m;
  m.sequence = 7;
  m.allocations = 2;
  return m;
}
template <> p::LeaseRequest sample() {
  p::LeaseRequest m;
  m.cores = 4;
  m.max_nodes = 2;
  m.memory_mib = 1024;
  m.duration_ms = 30'000;
  p::set_text(m.client, "alice");
  return m;
}
template <> p::LeaseRenew sample() {
  p::LeaseRenew m;
  m.lease_id = 0x1234567890ull;
  m.duration_ms = 5000;
  p::set_text(m.client, "alice");
  return m;
}
template <> p::LeaseRelease sample() {
  p::LeaseRelease m;
  m.lease_id = 99;
  p::set_text(m.client, "alice");
  return m;
}
template <> p::LeaseGrant sample() {
  p::LeaseGrant m;
  m.lease_id = 77;
  m.expiry_ms = 1'790'000'060'000ull;
  return m;
}
template <> p::LeaseEnded sample() {
  p::LeaseEnded m;
  m.lease_id = 77;
  m.expiry_ms = 5;
  m.why = p::LeaseEndReason::Revoked;
  return m;
}
template <> p::AccountingReport sample() {
  p::AccountingReport m;
  m.lease_id = 77;
  m.allocation_us = 1;
  m.hot_polling_us = 2;
  m.execution_us = 3;
  m.memory_mib = 4;
  m.final = 1;
  return m;
}
template <> p::LeaseProof sample() {
  p::LeaseProof m;
  m.lease_id = 77;
  m.expiry_ms = 123;
  m.memory_mib = 512;
  m.cores = 2;
  m.token = token_with(9);
  p::set_text(m.client, "alice");
  return m;
}

p::LeaseGrantPart part(const char *node, uint32_t cores) {
  p::LeaseGrantPart g;
  g.cores = cores;
  g.memory_mib = 256;
  g.token = token_with(static_cast<uint8_t>(cores));
  p::set_text(g.node, node);
  p::set_text(g.address, "127.0.0.1:10000");
  return g;
}

} // namespace

template <class M> class RmMessage : public ::testing::Test {};
using RmMessages = ::testing::Types<p::NodeRegister, p::NodeRegistered, p::Heartbeat,
                                    p::LeaseRequest, p::LeaseRenew, p::LeaseRelease, p::LeaseGrant,
                                    p::LeaseEnded, p::AccountingReport, p::LeaseProof>;
TYPED_TEST_SUITE(RmMessage, RmMessages);

TYPED_TEST(RmMessage, FieldsCoverTheWholeStruct) {
  TypeParam m{};
  FieldCounter c;
  TypeParam::fields(static_cast<const TypeParam &>(m), c);
  EXPECT_EQ(c.bytes, sizeof(TypeParam));
  EXPECT_LE(sizeof(TypeParam), p::kMaxResourceManagerRequest);
}

TYPED_TEST(RmMessage, RoundTripIsByteExact) {
  TypeParam m = sample<TypeParam>();
  p::WireResult r;
  std::vector<uint8_t> first = p::to_bytes(m, &r);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(first[0], 'R');
  EXPECT_EQ(first[6] | first[7] << 8, static_cast<int>(TypeParam::kType));
  TypeParam back{};
  r = p::decode(first.data(), first.size(), back);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, sizeof(TypeParam));
  EXPECT_EQ(p::to_bytes(back), first);
  EXPECT_STRNE(p::to_string(TypeParam::kType), "unknown_message_type");
}

TYPED_TEST(RmMessage, TruncatedInputIsRefused) {
  std::vector<uint8_t> b = p::to_bytes(sample<TypeParam>());
  TypeParam back{};
  p::WireResult r = p::decode(b.data(), b.size() - 1, back);
  EXPECT_EQ(r.error, p::WireError::Truncated) << p::describe(r);
}

TEST(RmMessages, NamesAndTextFieldsAreChecked) {
  p::NodeRegister reg = sample<p::NodeRegister>();
  std::memset(reg.node, 0, sizeof reg.node);
  EXPECT_EQ(p::to_bytes(reg).size(), 0u) << "an empty node name must not be sent";
  reg = sample<p::NodeRegister>();
  std::vector<uint8_t> b = p::to_bytes(reg);
  std::memset(&b[offsetof(p::NodeRegister, address)], 'x', p::kNodeAddressCapacity);
  p::NodeRegister back;
  p::WireResult r = p::decode(b.data(), b.size(), back);
  EXPECT_EQ(r.error, p::WireError::InvalidField);
  EXPECT_NE(p::describe(r).find("NodeRegister.address"), std::string::npos) << p::describe(r);

  p::LeaseRequest req = sample<p::LeaseRequest>();
  req.max_nodes = p::kMaxLeaseNodes + 1;
  EXPECT_EQ(req.validate().error, p::WireError::TooLarge);
  req.max_nodes = 1;
  req.cores = 0;
  EXPECT_EQ(req.validate().error, p::WireError::InvalidField);

  p::LeaseEnded ended = sample<p::LeaseEnded>();
  b = p::to_bytes(ended);
  b[24] = 9; // why
  p::LeaseEnded eback;
  EXPECT_EQ(p::decode(b.data(), b.size(), eback).error, p::WireError::InvalidField);

  p::AccountingReport acc = sample<p::AccountingReport>();
  acc.final = 2;
  EXPECT_FALSE(acc.validate().ok());
}

TEST(RmMessages, LeasesEndedCarriesItsNoticesInOrder) {
  std::vector<p::LeaseEnded> ends(p::kMaxLeasesEndedEntries);
  for (size_t i = 0; i < ends.size(); ++i) {
    ends[i].lease_id = 1000 + i;
    ends[i].expiry_ms = 1'790'000'000'000ull + i;
    ends[i].why = static_cast<p::LeaseEndReason>(i % (p::kMaxLeaseEndReason + 1));
  }
  std::vector<uint8_t> b(p::kMaxLeasesEndedSize);
  p::LeasesEnded head;
  p::WireResult r = p::encode(ends.data(), ends.size(), head, b.data(), b.size());
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, b.size());
  EXPECT_EQ(head.count, p::kMaxLeasesEndedEntries);
  EXPECT_FALSE(p::encode(ends.data(), ends.size(), head, b.data(), b.size() - 1).ok());

  p::LeasesEnded back;
  std::vector<p::LeaseEnded> got{sample<p::LeaseEnded>()}; // appended to
  r = p::decode(b.data(), b.size(), back, got);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  ASSERT_EQ(got.size(), ends.size() + 1);
  for (size_t i = 0; i < ends.size(); ++i) {
    EXPECT_EQ(got[i + 1].lease_id, ends[i].lease_id);
    EXPECT_EQ(got[i + 1].expiry_ms, ends[i].expiry_ms);
    EXPECT_EQ(got[i + 1].why, ends[i].why);
  }
  // A message shorter than its count says is refused and appends nothing.
  got.clear();
  EXPECT_EQ(p::decode(b.data(), b.size() - 1, back, got).error, p::WireError::Truncated);
  EXPECT_TRUE(got.empty());
  // One bad entry refuses the whole message.
  b[sizeof(p::LeasesEnded) + 5 * sizeof(p::LeaseEndedEntry) + 16] = 9; // why
  EXPECT_EQ(p::decode(b.data(), b.size(), back, got).error, p::WireError::InvalidField);
  EXPECT_TRUE(got.empty());
  // Neither none nor more than the maximum.
  EXPECT_FALSE(p::encode(ends.data(), 0, head, b.data(), b.size()).ok());
  ends.push_back(ends.back());
  EXPECT_EQ(p::encode(ends.data(), ends.size(), head, b.data(), b.size() + 64).error,
            p::WireError::TooLarge);
  b.assign(p::leases_ended_size(1), 0);
  ASSERT_TRUE(p::encode(ends.data(), 1, head, b.data(), b.size()).ok());
  b[8] = 200; // count beyond kMaxLeasesEndedEntries
  EXPECT_EQ(p::decode(b.data(), b.size(), back, got).error, p::WireError::TooLarge);
}

TEST(RmMessages, LeaseGrantCarriesItsParts) {
  p::LeaseGrant g = sample<p::LeaseGrant>();
  g.parts = 2;
  std::vector<p::LeaseGrantPart> parts{part("node-a", 3), part("node-b", 1)};
  std::vector<uint8_t> b(p::lease_grant_size(2));
  p::WireResult r = p::encode(g, parts, b.data(), b.size());
  ASSERT_TRUE(r.ok()) << p::describe(r);
  EXPECT_EQ(r.size, b.size());
  EXPECT_FALSE(p::encode(g, parts, b.data(), b.size() - 1).ok());

  p::LeaseGrant back;
  std::vector<p::LeaseGrantPart> back_parts;
  r = p::decode(b.data(), b.size(), back, back_parts);
  ASSERT_TRUE(r.ok()) << p::describe(r);
  ASSERT_EQ(back_parts.size(), 2u);
  EXPECT_EQ(p::get_text(back_parts[1].node), "node-b");
  EXPECT_EQ(back_parts[0].cores, 3u);
  EXPECT_TRUE(p::equal(back_parts[0].token, parts[0].token));
  EXPECT_EQ(back.lease_id, 77u);

  // A grant whose parts are cut off is refused and leaves no parts.
  r = p::decode(b.data(), b.size() - 10, back, back_parts);
  EXPECT_EQ(r.error, p::WireError::Truncated);
  EXPECT_TRUE(back_parts.empty());
  // A part with an empty address is refused.
  std::memset(&b[sizeof(p::LeaseGrant) + offsetof(p::LeaseGrantPart, address)], 0, 4);
  EXPECT_EQ(p::decode(b.data(), b.size(), back, back_parts).error, p::WireError::InvalidField);
  // Parts count must match.
  EXPECT_EQ(p::encode(g, {parts[0]}, b.data(), b.size()).error, p::WireError::Inconsistent);
  // An error carries no parts, a success needs a lease id.
  g.status = p::ErrorCode::ResourcesUnavailable;
  EXPECT_EQ(g.validate().error, p::WireError::Inconsistent);
  g.parts = 0;
  EXPECT_TRUE(g.validate().ok());
  g.status = p::ErrorCode::Ok;
  g.lease_id = 0;
  EXPECT_FALSE(g.validate().ok());
  EXPECT_LE(p::kMaxLeaseGrantSize, 4096u);
}

TEST(RmMessages, LeaseRequestBindingCoversEveryFieldButTheCredential) {
  const p::LeaseRequest base = sample<p::LeaseRequest>();
  const std::vector<uint8_t> bound = p::lease_request_binding(base);
  // The credential does not bind itself: attaching it keeps the binding.
  p::LeaseRequest with = base;
  p::set_text(with.credential, "MUNGE:AwQ...:");
  EXPECT_EQ(p::lease_request_binding(with), bound);
  // Every other field changes it: a credential cannot move to a request with
  // more cores, memory, time, nodes or another name.
  std::vector<p::LeaseRequest> altered(5, base);
  altered[0].cores += 1;
  altered[1].max_nodes += 1;
  altered[2].memory_mib += 1;
  altered[3].duration_ms += 1;
  p::set_text(altered[4].client, "alicf");
  for (const p::LeaseRequest &a : altered)
    EXPECT_NE(p::lease_request_binding(a), bound);
}

TEST(RmMessages, LeaseRequestCredentialMustBeTerminated) {
  p::LeaseRequest m = sample<p::LeaseRequest>();
  std::memset(m.credential, 'A', sizeof m.credential);
  EXPECT_EQ(m.validate().error, p::WireError::InvalidField);
}
