#include "resource_manager/placement.hpp"

#include <algorithm>
#include <iterator>
#include <tuple>

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

bool CapacityIndex::Entry::operator<(const Entry &o) const {
  return std::tie(cores, memory_mib, name) < std::tie(o.cores, o.memory_mib, o.name);
}

void CapacityIndex::update(const std::string &name, uint32_t free_cores, uint64_t free_memory_mib) {
  auto it = where_.find(name);
  if (it != where_.end()) {
    if (it->second->cores == free_cores && it->second->memory_mib == free_memory_mib)
      return;
    entries_.erase(it->second);
    it->second = entries_.insert(Entry{free_cores, free_memory_mib, name}).first;
    return;
  }
  where_.emplace(name, entries_.insert(Entry{free_cores, free_memory_mib, name}).first);
}

void CapacityIndex::remove(const std::string &name) {
  auto it = where_.find(name);
  if (it == where_.end())
    return;
  entries_.erase(it->second);
  where_.erase(it);
}

// The entries form groups of equal free cores, ascending. Within a group,
// the one with the most memory is its last entry and the one with the least
// memory that still fits is a lower_bound: so each group costs one or two
// searches, and a search that fails skips the whole group.
CapacityIndex::Set::const_iterator CapacityIndex::best_single(uint32_t cores, uint64_t memory_mib,
                                                              PlacementPolicy policy) const {
  if (policy == PlacementPolicy::Pack) {
    // The fewest free cores that fit, then the least memory that fits.
    auto it = entries_.lower_bound(Entry{cores, memory_mib, {}});
    while (it != entries_.end()) {
      ++examined_;
      if (it->memory_mib >= memory_mib)
        return it;
      // First of a larger group, with too little memory: its fitting part.
      it = entries_.lower_bound(Entry{it->cores, memory_mib, {}});
    }
    return entries_.end();
  }
  // Spread: the most free cores, then the most memory, then the first name.
  auto group_end = entries_.end();
  while (group_end != entries_.begin()) {
    const Entry &last = *std::prev(group_end);
    ++examined_;
    if (last.cores < cores)
      break;
    if (last.memory_mib >= memory_mib)
      return entries_.lower_bound(Entry{last.cores, last.memory_mib, {}});
    // Not even this group's largest memory fits: the next smaller group.
    group_end = entries_.lower_bound(Entry{last.cores, 0, {}});
  }
  return entries_.end();
}

std::optional<std::vector<PlacementShare>>
CapacityIndex::place_several(uint32_t cores, uint64_t memory_mib, uint32_t max_nodes) const {
  // As place(): largest first (free cores, then memory, descending; equal
  // ones by name), each node taking what its memory allows.
  const uint64_t per_core = (memory_mib + cores - 1) / cores;
  uint32_t left_cores = cores;
  uint64_t left_memory = memory_mib;
  std::vector<PlacementShare> shares;
  auto group_end = entries_.end();
  while (group_end != entries_.begin() && left_cores != 0 && shares.size() < max_nodes) {
    const Entry &last = *std::prev(group_end);
    if (last.cores == 0)
      break;
    const auto group_begin = entries_.lower_bound(Entry{last.cores, last.memory_mib, {}});
    for (auto it = group_begin; it != group_end; ++it) {
      if (left_cores == 0 || shares.size() == max_nodes)
        break;
      ++examined_;
      uint32_t c = std::min(it->cores, left_cores);
      if (per_core > 0)
        c = static_cast<uint32_t>(std::min<uint64_t>(c, it->memory_mib / per_core));
      if (c == 0)
        continue;
      uint64_t m = std::min<uint64_t>(per_core * c, left_memory);
      if (c == left_cores)
        m = left_memory;
      if (m > it->memory_mib)
        continue;
      shares.push_back({it->name, c, m});
      left_cores -= c;
      left_memory -= m;
    }
    group_end = group_begin;
  }
  if (left_cores != 0 || left_memory != 0)
    return std::nullopt;
  return shares;
}

std::optional<std::vector<PlacementShare>> CapacityIndex::place(uint32_t cores, uint64_t memory_mib,
                                                                uint32_t max_nodes,
                                                                PlacementPolicy policy) const {
  examined_ = 0;
  if (cores == 0 || max_nodes == 0)
    return std::nullopt;
  if (auto best = best_single(cores, memory_mib, policy); best != entries_.end())
    return std::vector<PlacementShare>{{best->name, cores, memory_mib}};
  if (max_nodes == 1)
    return std::nullopt;
  return place_several(cores, memory_mib, max_nodes);
}

} // namespace rfaas::rm
