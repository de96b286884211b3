// Placement: which nodes a lease's cores and memory go to. A pure function of
// the free capacity, so it is tested without a registry.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rfaas::rm {

/// Spread: a lease goes to the node with the most free cores (load
/// balancing, fewer neighbours). Pack: to the node with the fewest free cores
/// that still fits (keeps whole nodes free for large leases).
enum class PlacementPolicy { Spread, Pack };
const char *to_string(PlacementPolicy p);
bool parse_placement_policy(std::string_view text, PlacementPolicy &out);

/// A node that may take new leases (up, not drained), with what it has free.
struct NodeCapacity {
  std::string name;
  uint32_t free_cores = 0;
  uint64_t free_memory_mib = 0;
};

struct PlacementShare {
  std::string node;
  uint32_t cores = 0;
  uint64_t memory_mib = 0;
};

/// Places `cores` cores and `memory_mib` MiB (the lease's total) on at most
/// `max_nodes` nodes of `nodes`. One node is always preferred when one fits
/// (chosen by `policy`); otherwise, if max_nodes > 1, the nodes with the most
/// free cores are filled first so that the lease touches as few nodes as
/// possible, and each share's memory is proportional to its cores (rounded
/// up per core, the last share taking the remainder). nullopt: it does not
/// fit. cores must be > 0.
std::optional<std::vector<PlacementShare>> place(const std::vector<NodeCapacity> &nodes,
                                                 uint32_t cores, uint64_t memory_mib,
                                                 uint32_t max_nodes, PlacementPolicy policy);

} // namespace rfaas::rm
