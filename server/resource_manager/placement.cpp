#include "resource_manager/placement.hpp"

#include <algorithm>

namespace rfaas::rm {

const char *to_string(PlacementPolicy p) {
  return p == PlacementPolicy::Spread ? "spread" : "pack";
}

bool parse_placement_policy(std::string_view text, PlacementPolicy &out) {
  if (text == "spread")
    out = PlacementPolicy::Spread;
  else if (text == "pack")
    out = PlacementPolicy::Pack;
  else
    return false;
  return true;
}

std::optional<std::vector<PlacementShare>> place(const std::vector<NodeCapacity> &nodes,
                                                 uint32_t cores, uint64_t memory_mib,
                                                 uint32_t max_nodes, PlacementPolicy policy) {
  if (cores == 0 || max_nodes == 0)
    return std::nullopt;

  // One node if any fits.
  const NodeCapacity *best = nullptr;
  for (const NodeCapacity &n : nodes) {
    if (n.free_cores < cores || n.free_memory_mib < memory_mib)
      continue;
    if (!best) {
      best = &n;
      continue;
    }
    bool better;
    if (n.free_cores != best->free_cores)
      better = policy == PlacementPolicy::Spread ? n.free_cores > best->free_cores
                                                 : n.free_cores < best->free_cores;
    else if (n.free_memory_mib != best->free_memory_mib)
      better = policy == PlacementPolicy::Spread ? n.free_memory_mib > best->free_memory_mib
                                                 : n.free_memory_mib < best->free_memory_mib;
    else
      better = n.name < best->name; // deterministic
    if (better)
      best = &n;
  }
  if (best)
    return std::vector<PlacementShare>{{best->name, cores, memory_mib}};
  if (max_nodes == 1)
    return std::nullopt;

  // Several nodes: largest first, each taking what its memory allows.
  std::vector<const NodeCapacity *> order;
  for (const NodeCapacity &n : nodes)
    if (n.free_cores > 0)
      order.push_back(&n);
  std::sort(order.begin(), order.end(), [](const NodeCapacity *a, const NodeCapacity *b) {
    if (a->free_cores != b->free_cores)
      return a->free_cores > b->free_cores;
    if (a->free_memory_mib != b->free_memory_mib)
      return a->free_memory_mib > b->free_memory_mib;
    return a->name < b->name;
  });
  const uint64_t per_core = (memory_mib + cores - 1) / cores;
  uint32_t left_cores = cores;
  uint64_t left_memory = memory_mib;
  std::vector<PlacementShare> shares;
  for (const NodeCapacity *n : order) {
    if (left_cores == 0 || shares.size() == max_nodes)
      break;
    uint32_t c = std::min(n->free_cores, left_cores);
    if (per_core > 0)
      c = static_cast<uint32_t>(std::min<uint64_t>(c, n->free_memory_mib / per_core));
    if (c == 0)
      continue;
    uint64_t m = std::min<uint64_t>(per_core * c, left_memory);
    if (c == left_cores)
      m = left_memory; // the last share takes the remainder
    if (m > n->free_memory_mib)
      continue;
    shares.push_back({n->name, c, m});
    left_cores -= c;
    left_memory -= m;
  }
  if (left_cores != 0 || left_memory != 0)
    return std::nullopt;
  return shares;
}

} // namespace rfaas::rm
