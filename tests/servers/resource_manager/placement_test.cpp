// Placement: fit by cores and memory; spread or pack; several nodes only when
// one does not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "resource_manager/placement.hpp"

using namespace rfaas::rm;

namespace {
std::vector<NodeCapacity> nodes() { return {{"a", 8, 8000}, {"b", 4, 4000}, {"c", 2, 16000}}; }
} // namespace

TEST(Placement, SpreadTakesTheEmptiestNode) {
  auto p = place(nodes(), 2, 1000, 1, PlacementPolicy::Spread);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->size(), 1u);
  EXPECT_EQ((*p)[0].node, "a");
}

TEST(Placement, PackTakesTheFullestNodeThatFits) {
  auto p = place(nodes(), 2, 1000, 1, PlacementPolicy::Pack);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0].node, "c");
  p = place(nodes(), 3, 1000, 1, PlacementPolicy::Pack);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0].node, "b");
}

TEST(Placement, MemoryMustFitToo) {
  auto p = place(nodes(), 2, 10000, 1, PlacementPolicy::Spread);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0].node, "c");
  EXPECT_FALSE(place(nodes(), 3, 10000, 1, PlacementPolicy::Spread));
}

TEST(Placement, SingleNodeRefusesWhatOnlySeveralHold) {
  EXPECT_FALSE(place(nodes(), 10, 1000, 1, PlacementPolicy::Spread));
}

TEST(Placement, SeveralNodesLargestFirstWithProportionalMemory) {
  auto p = place(nodes(), 10, 1000, 3, PlacementPolicy::Spread);
  ASSERT_TRUE(p);
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].node, "a");
  EXPECT_EQ((*p)[0].cores, 8u);
  EXPECT_EQ((*p)[0].memory_mib, 800u);
  EXPECT_EQ((*p)[1].node, "b");
  EXPECT_EQ((*p)[1].cores, 2u);
  EXPECT_EQ((*p)[1].memory_mib, 200u);
}

TEST(Placement, NodeLimitIsRespected) {
  EXPECT_FALSE(place(nodes(), 14, 0, 2, PlacementPolicy::Spread));
  auto p = place(nodes(), 14, 0, 3, PlacementPolicy::Spread);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->size(), 3u);
}

TEST(Placement, NothingFreeNothingPlaced) {
  EXPECT_FALSE(place({}, 1, 0, 4, PlacementPolicy::Pack));
  EXPECT_FALSE(place({{"a", 0, 100}}, 1, 0, 4, PlacementPolicy::Pack));
  EXPECT_FALSE(place(nodes(), 0, 0, 1, PlacementPolicy::Pack));
}

// The index must answer exactly as place() over the same nodes: random
// fleets whose capacity changes between requests, both policies, one and
// several nodes. Few core and memory values, so that ties (broken by name)
// are common.
TEST(CapacityIndex, AgreesWithPlaceOnChangingFleets) {
  std::mt19937 rng(20261129);
  auto pick = [&](uint64_t lo, uint64_t hi) {
    return std::uniform_int_distribution<uint64_t>(lo, hi)(rng);
  };
  for (int fleet = 0; fleet < 40; ++fleet) {
    CapacityIndex index;
    std::map<std::string, NodeCapacity> nodes;
    for (int step = 0; step < 300; ++step) {
      const std::string name = "n" + std::to_string(pick(0, 30));
      if (pick(0, 9) == 0) {
        index.remove(name);
        nodes.erase(name);
      } else {
        NodeCapacity c{name, static_cast<uint32_t>(pick(0, 8)), pick(0, 4) * 1000};
        index.update(c.name, c.free_cores, c.free_memory_mib);
        nodes[name] = c;
      }
      std::vector<NodeCapacity> flat;
      for (const auto &[n, c] : nodes)
        flat.push_back(c);
      // Shuffled: place() must not depend on the order it is given.
      std::shuffle(flat.begin(), flat.end(), rng);
      ASSERT_EQ(index.size(), flat.size());
      const auto cores = static_cast<uint32_t>(pick(1, 12));
      const uint64_t memory = pick(0, 6) * 500;
      const auto max_nodes = static_cast<uint32_t>(pick(1, 4));
      for (PlacementPolicy policy : {PlacementPolicy::Spread, PlacementPolicy::Pack}) {
        auto want = place(flat, cores, memory, max_nodes, policy);
        auto got = index.place(cores, memory, max_nodes, policy);
        ASSERT_EQ(want.has_value(), got.has_value())
            << "fleet " << fleet << " step " << step << ": " << cores << " cores, " << memory
            << " MiB, " << max_nodes << " nodes, " << to_string(policy);
        if (!want)
          continue;
        ASSERT_EQ(want->size(), got->size());
        for (size_t i = 0; i < want->size(); ++i) {
          EXPECT_EQ((*want)[i].node, (*got)[i].node) << "fleet " << fleet << " step " << step;
          EXPECT_EQ((*want)[i].cores, (*got)[i].cores);
          EXPECT_EQ((*want)[i].memory_mib, (*got)[i].memory_mib);
        }
      }
    }
  }
}

// Among 20,000 nodes a lease looks at a handful of index entries: at most
// two per distinct free-core count (here 0..64), whatever the fleet's size.
// A count, not a time.
TEST(CapacityIndex, LooksAtFewEntriesWhateverTheFleet) {
  std::mt19937 rng(7);
  CapacityIndex index;
  std::vector<NodeCapacity> flat;
  for (int i = 0; i < 20'000; ++i) {
    NodeCapacity c{"node" + std::to_string(i), std::uniform_int_distribution<uint32_t>(0, 64)(rng),
                   std::uniform_int_distribution<uint64_t>(0, 256)(rng) * 1024};
    index.update(c.name, c.free_cores, c.free_memory_mib);
    flat.push_back(c);
  }
  const size_t bound = 2 * 65 + 1;
  for (PlacementPolicy policy : {PlacementPolicy::Spread, PlacementPolicy::Pack})
    for (uint32_t cores : {1u, 8u, 63u})
      for (uint64_t memory : {0ull, 1024ull, 200'000ull, 262'144ull, 300'000ull}) {
        auto got = index.place(cores, memory, 1, policy);
        EXPECT_LE(index.last_examined(), bound) << cores << " cores, " << memory << " MiB";
        auto want = place(flat, cores, memory, 1, policy);
        ASSERT_EQ(want.has_value(), got.has_value());
        if (want) {
          EXPECT_EQ((*want)[0].node, (*got)[0].node);
        }
      }
  // Updating a node moves it: the emptiest node changes.
  index.update("node5", 64, 300'000);
  auto p = index.place(1, 290'000, 1, PlacementPolicy::Spread);
  ASSERT_TRUE(p);
  EXPECT_EQ((*p)[0].node, "node5");
  index.remove("node5");
  EXPECT_FALSE(index.place(1, 290'000, 1, PlacementPolicy::Spread));
  EXPECT_EQ(index.size(), 19'999u);
}
