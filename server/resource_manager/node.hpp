// An executor-manager node as the resource manager knows it.
#pragma once

#include <cstdint>
#include <string>

#include "resource_manager/lease_token.hpp"

namespace rfaas::rm {

/// Up: heartbeats arrive (or it just registered). Down: none within the
/// heartbeat timeout, or an operator added it and it never registered.
enum class NodeState { Up, Down };
const char *to_string(NodeState s);
/// Parses "up" / "down"; returns false on anything else.
bool parse_node_state(const std::string &text, NodeState &out);

struct Node {
  std::string name;
  /// Where clients reach its executor manager ("host:port" or the provider's
  /// printable address); handed to clients in a grant.
  std::string address;
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
  NodeSecret secret{};
  NodeState state = NodeState::Down;
  /// A drained node keeps its leases but takes no new ones.
  bool drained = false;
  uint64_t registered_ms = 0;     ///< last registration (0: never)
  uint64_t last_heartbeat_ms = 0; ///< last heartbeat or registration
  /// The node's own signed timestamp (NodeRegister::timestamp_ms) of its last
  /// accepted registration: a registration not newer is a replay, also after
  /// a restart of the resource manager.
  uint64_t registration_signed_ms = 0;
};

} // namespace rfaas::rm
