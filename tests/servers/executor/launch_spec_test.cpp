// The manager -> executor launch spec survives a round trip and rejects
// damage.
#include <gtest/gtest.h>

#include "common/launch_spec.hpp"

using rfaas::server::bytes_from_hex;
using rfaas::server::LaunchSpec;
using rfaas::server::SpecError;
using rfaas::server::to_hex;

namespace {
LaunchSpec sample() {
  LaunchSpec s;
  s.allocation_id = 0xfeedfacecafebeefull;
  for (int i = 0; i < 16; ++i)
    s.secret.bytes[i] = static_cast<uint8_t>(i * 17);
  s.cores = {1, 3};
  s.memory_mib = 256;
  s.device.name = "lo-tcp";
  s.device.provider = "tcp;ofi_rxm";
  s.device.ip_address = "127.0.0.1";
  s.manager_host = "127.0.0.1";
  s.manager_port = 4242;
  s.connect_ms = 1234;
  s.library_loaded_ms = 5678;
  s.owner_uid = 1000;
  s.request = {0, 1, 2, 250, 255};
  return s;
}
} // namespace

TEST(LaunchSpec, RoundTrip) {
  LaunchSpec s = sample();
  LaunchSpec t = LaunchSpec::parse(s.serialize());
  EXPECT_EQ(t.allocation_id, s.allocation_id);
  EXPECT_TRUE(rfaas::protocol::equal(t.secret, s.secret));
  EXPECT_EQ(t.cores, s.cores);
  EXPECT_EQ(t.memory_mib, 256u);
  EXPECT_EQ(t.device.provider, "tcp;ofi_rxm");
  EXPECT_EQ(t.device.ip_address, "127.0.0.1");
  EXPECT_EQ(t.manager_port, 4242);
  EXPECT_EQ(t.connect_ms, 1234u);
  EXPECT_EQ(t.library_loaded_ms, 5678u);
  EXPECT_EQ(t.request, s.request);
  // Whom the executor runs as (a root zygote): the lease's owner.
  EXPECT_EQ(t.owner_uid, 1000u);
  s.owner_uid = rfaas::protocol::kAnonymousUid;
  EXPECT_EQ(LaunchSpec::parse(s.serialize()).owner_uid, rfaas::protocol::kAnonymousUid);
}

TEST(LaunchSpec, RejectsDamage) {
  std::string text = sample().serialize();
  EXPECT_THROW(LaunchSpec::parse(text.substr(0, text.size() / 2)), SpecError);
  EXPECT_THROW(LaunchSpec::parse("bogus 1\n" + text), SpecError);
  EXPECT_THROW(LaunchSpec::parse("end\n"), SpecError);
}

// Found by fuzzing (tests/fuzz/regressions/executor_messages/): ten lines were
// taken for ten keys, so a repeated line hid a missing "device".
TEST(LaunchSpec, RejectsRepeatedOrMissingKeys) {
  std::string text = sample().serialize();
  auto line_of = [&](const std::string &key) {
    size_t at = text.find("\n" + key + " ") + 1;
    return text.substr(at, text.find('\n', at) + 1 - at);
  };
  std::string device = line_of("device");
  std::string without_device = text;
  without_device.replace(without_device.find(device), device.size(), line_of("manager_port"));
  try {
    LaunchSpec::parse(without_device);
    FAIL() << "a spec without \"device\" was accepted";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("manager_port"), std::string::npos) << e.what();
  }
  std::string no_device = text;
  no_device.erase(no_device.find(device), device.size());
  try {
    LaunchSpec::parse(no_device);
    FAIL() << "a spec without \"device\" was accepted";
  } catch (const SpecError &e) {
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
}

TEST(Hex, RoundTripAndErrors) {
  const uint8_t b[] = {0x00, 0x7f, 0x80, 0xff};
  EXPECT_EQ(to_hex(b, 4), "007f80ff");
  EXPECT_EQ(bytes_from_hex("007f80ff"), std::vector<uint8_t>(b, b + 4));
  EXPECT_THROW(bytes_from_hex("abc"), SpecError);
  EXPECT_THROW(bytes_from_hex("zz"), SpecError);
}
