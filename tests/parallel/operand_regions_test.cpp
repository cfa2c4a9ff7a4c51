// bench/operand_regions.h: the spans a step's products reach, merged where they overlap, and each
// address found again in its region. bench/layer_bench replays the products in these regions.
#include "bench/operand_regions.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <utility>

namespace shardscope::bench {
namespace {

TEST(OperandRegions, OverlappingSpansShareARegionAndTouchingOnesDoNot) {
  // A tensor written whole, then read in two overlapping pieces (a causal product's); a weight
  // read twice; a tensor that starts where another ends; an empty span.
  const OperandRegions r({{1000, 2000},
                          {1500, 2600},
                          {1100, 1200},
                          {5000, 5400},
                          {5000, 5400},
                          {2600, 2700},
                          {9000, 9000}});
  ASSERT_EQ(r.count(), 3u);
  EXPECT_EQ(r.bytes(0), 1600u);  // [1000, 2600)
  EXPECT_EQ(r.bytes(1), 100u);   // [2600, 2700)
  EXPECT_EQ(r.bytes(2), 400u);   // [5000, 5400)
  EXPECT_EQ(r.total_bytes(), 2100u);
  EXPECT_EQ(r.locate(1000), std::make_pair(std::size_t{0}, std::size_t{0}));
  EXPECT_EQ(r.locate(1550), std::make_pair(std::size_t{0}, std::size_t{550}));
  EXPECT_EQ(r.locate(2599), std::make_pair(std::size_t{0}, std::size_t{1599}));
  EXPECT_EQ(r.locate(2600), std::make_pair(std::size_t{1}, std::size_t{0}));
  EXPECT_EQ(r.locate(5399), std::make_pair(std::size_t{2}, std::size_t{399}));
}

TEST(OperandRegions, ASpanInsideAnEarlierOneKeepsTheEarliersEnd) {
  // Sorted by start, the second span ends first: the region still reaches the first's end.
  const OperandRegions r({{100, 900}, {200, 300}, {850, 950}});
  ASSERT_EQ(r.count(), 1u);
  EXPECT_EQ(r.bytes(0), 850u);
  EXPECT_EQ(r.locate(940).second, 840u);
}

TEST(OperandRegions, AnAddressOutsideEverySpanAndABackwardSpanAreErrors) {
  const OperandRegions r({{100, 200}, {300, 400}});
  EXPECT_THROW(r.locate(99), std::out_of_range);
  EXPECT_THROW(r.locate(200), std::out_of_range);  // between the two
  EXPECT_THROW(r.locate(400), std::out_of_range);
  EXPECT_THROW(OperandRegions({{10, 5}}), std::invalid_argument);
}

}  // namespace
}  // namespace shardscope::bench
