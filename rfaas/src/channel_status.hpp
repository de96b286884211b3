// Internal to librfaas: the one translation of a ControlChannel outcome into
// the status an rfaas::Error or rfaas::result carries, shared by the executor
// (executor manager and workers) and the resource-manager client, so that the
// same failure reads the same whichever peer it came from.
#pragma once

#include <rfaas/errors.hpp>

#include "protocol/control_channel.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::detail {

/// The status a ControlChannel call's outcome `s` stands for. `wire` is the
/// decode verdict that came with it (ControlMessage::wire, or await()'s
/// WireResult); it only matters for BadMessage, where a peer of another
/// protocol version reads version_mismatch (the user must upgrade one side)
/// and any other undecodable message bad_request.
inline status from_channel(protocol::ChannelStatus s, const protocol::WireResult &wire) noexcept {
  switch (s) {
  case protocol::ChannelStatus::Ok:
    return status::ok;
  case protocol::ChannelStatus::Timeout:
    return status::timeout;
  case protocol::ChannelStatus::Closed:
  case protocol::ChannelStatus::Shutdown:
    return status::closed;
  case protocol::ChannelStatus::BadMessage:
    return wire.error == protocol::WireError::VersionMismatch ? status::version_mismatch
                                                              : status::bad_request;
  case protocol::ChannelStatus::Unexpected:
    // A well-formed message of the wrong type: the peer broke the exchange.
    // Its WireResult says UnexpectedType, but a caller that passed none must
    // still not read "ok".
    return status::bad_request;
  case protocol::ChannelStatus::SendFailed:
    return status::network_error;
  }
  // A value outside the enumeration (memory damage): never "ok".
  return status::network_error;
}

} // namespace rfaas::detail
