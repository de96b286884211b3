// librfaas's one mapping from a ControlChannel outcome to rfaas::status
// (rfaas/src/channel_status.hpp): every channel status maps, and to the
// status both the executor and the resource-manager client report.
#include "channel_status.hpp"

#include <map>
#include <string>

#include <gtest/gtest.h>

namespace proto = rfaas::protocol;
using rfaas::status;
using rfaas::detail::from_channel;

namespace {

// What each channel status must read as, with a decode verdict that is not a
// version mismatch. A ChannelStatus added without an entry here fails
// EveryChannelStatusMaps.
const std::map<proto::ChannelStatus, status> kExpected = {
    {proto::ChannelStatus::Ok, status::ok},
    {proto::ChannelStatus::Timeout, status::timeout},
    {proto::ChannelStatus::Closed, status::closed},
    {proto::ChannelStatus::Shutdown, status::closed},
    {proto::ChannelStatus::BadMessage, status::bad_request},
    {proto::ChannelStatus::Unexpected, status::bad_request},
    {proto::ChannelStatus::SendFailed, status::network_error},
};

} // namespace

TEST(ChannelStatus, EveryChannelStatusMaps) {
  const proto::WireResult truncated{proto::WireError::Truncated, 0, "test"};
  // Walk the enumeration until to_string() no longer knows the value ("?"): a new
  // ChannelStatus is named there, so it is visited here too.
  int known = 0;
  for (int v = 0; v < 256; ++v) {
    auto s = static_cast<proto::ChannelStatus>(v);
    if (std::string(proto::to_string(s)) == "?")
      break;
    ++known;
    auto it = kExpected.find(s);
    ASSERT_NE(it, kExpected.end()) << "channel status " << v << " (" << proto::to_string(s)
                                   << ") has no expected rfaas::status in this test";
    EXPECT_EQ(from_channel(s, truncated), it->second)
        << proto::to_string(s) << " maps to " << rfaas::to_string(from_channel(s, truncated));
    EXPECT_STRNE(rfaas::to_string(from_channel(s, truncated)), "unknown");
  }
  EXPECT_EQ(known, static_cast<int>(kExpected.size()));
}

TEST(ChannelStatus, OnlyOkIsOk) {
  // Even with a decode verdict of Ok (a caller that passed none), no failure
  // of the channel reads as success.
  for (const auto &[channel, expected] : kExpected) {
    (void)expected;
    if (channel != proto::ChannelStatus::Ok) {
      EXPECT_NE(from_channel(channel, {}), status::ok) << proto::to_string(channel);
    }
  }
}

TEST(ChannelStatus, PeerOfAnotherVersionIsVersionMismatch) {
  const proto::WireResult other_version{proto::WireError::VersionMismatch, 0, "Header"};
  EXPECT_EQ(from_channel(proto::ChannelStatus::BadMessage, other_version),
            status::version_mismatch);
  for (proto::WireError e :
       {proto::WireError::Truncated, proto::WireError::BadMagic, proto::WireError::UnknownType,
        proto::WireError::TooLarge, proto::WireError::InvalidField, proto::WireError::Inconsistent})
    EXPECT_EQ(from_channel(proto::ChannelStatus::BadMessage, {e, 0, "x"}), status::bad_request)
        << proto::to_string(e);
}

TEST(ChannelStatus, OutOfRangeIsNeverOk) {
  EXPECT_EQ(from_channel(static_cast<proto::ChannelStatus>(200), {}), status::network_error);
}
