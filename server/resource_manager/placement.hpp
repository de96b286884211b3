// Placement: which nodes a lease's cores and memory go to. place() is the
// policy as a pure function of the free capacity (linear in the nodes);
// CapacityIndex keeps the same answer up to date as capacity changes, so
// that a lease finds its node without visiting every node. Both are tested
// without a registry, and against each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
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

/// The nodes that may take new leases, ordered by free capacity, so that
/// place() costs O(log n) per distinct free-core count instead of O(n): its
/// answers are exactly those of the free function place() over the same
/// nodes. The registry updates a node's entry whenever its free cores or
/// memory, its state or its drain flag change. Not thread-safe (the loop
/// thread owns it, with the registry).
class CapacityIndex {
public:
  /// Adds node `name`, or moves it to its new free capacity. O(log n).
  void update(const std::string &name, uint32_t free_cores, uint64_t free_memory_mib);
  /// Takes node `name` out (down, drained or removed); no-op when absent.
  void remove(const std::string &name);
  size_t size() const { return where_.size(); }
  /// As place() over the indexed nodes. With one node: O(k log n), k the
  /// number of distinct free-core counts that have enough cores (at most the
  /// largest node's cores). Several nodes (only when no single one fits)
  /// visit the nodes largest first until the lease is placed.
  std::optional<std::vector<PlacementShare>>
  place(uint32_t cores, uint64_t memory_mib, uint32_t max_nodes, PlacementPolicy policy) const;
  /// Index entries the last place() looked at: a count, not a time, for
  /// tests that check the cost does not grow with the nodes.
  size_t last_examined() const { return examined_; }

private:
  /// Ascending by free cores, then free memory, then name.
  struct Entry {
    uint32_t cores;
    uint64_t memory_mib;
    std::string name;
    bool operator<(const Entry &o) const;
  };
  using Set = std::set<Entry>;
  Set::const_iterator best_single(uint32_t cores, uint64_t memory_mib,
                                  PlacementPolicy policy) const;
  std::optional<std::vector<PlacementShare>> place_several(uint32_t cores, uint64_t memory_mib,
                                                           uint32_t max_nodes) const;

  Set entries_;
  std::unordered_map<std::string, Set::const_iterator> where_;
  mutable size_t examined_ = 0;
};

} // namespace rfaas::rm
