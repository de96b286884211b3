// Placement: fit by cores and memory; spread or pack; several nodes only when
// one does not fit.
#include <gtest/gtest.h>

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
