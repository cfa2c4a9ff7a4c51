// bench/operand_regions.h: the spans a step's products reach, merged where they overlap, and each
// address found again in its region; an op's reads and writes paired as copies (stream_copies).
// bench/layer_bench replays the products and the ops' copies in these regions.
#include "bench/operand_regions.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <utility>
#include <vector>

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
  EXPECT_EQ(r.start(0), 1000u);
  EXPECT_EQ(r.start(2), 5000u);
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

void expect_pieces(const std::vector<CopyPiece>& got, const std::vector<CopyPiece>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].from, expected[i].from) << "piece " << i;
    EXPECT_EQ(got[i].to, expected[i].to) << "piece " << i;
    EXPECT_EQ(got[i].bytes, expected[i].bytes) << "piece " << i;
    EXPECT_EQ(got[i].from_scratch, expected[i].from_scratch) << "piece " << i;
    EXPECT_EQ(got[i].to_scratch, expected[i].to_scratch) << "piece " << i;
  }
}

TEST(StreamCopies, MoreReadThanWrittenReadsTheRestIntoTheScratch) {
  // LayerNorm's backward: dy and x read (and an empty span between), dx written; 60 bytes read,
  // 20 written: 20 copied, 40 into a scratch of 16 bytes, in pieces that end where a span does.
  expect_pieces(stream_copies({{100, 130}, {500, 500}, {200, 230}}, {{1000, 1020}}, 16),
                {{100, 1000, 20, false, false},
                 {120, 0, 10, false, true},
                 {200, 0, 16, false, true},
                 {216, 0, 14, false, true}});
}

TEST(StreamCopies, MoreWrittenThanReadWritesTheRestFromTheScratch) {
  // A dropout's forward: x read, y and its mask written.
  expect_pieces(stream_copies({{100, 140}}, {{1000, 1040}, {2000, 2010}}, 64),
                {{100, 1000, 40, false, false}, {0, 2000, 10, true, false}});
  // Two inputs into one output, then the output's rest from the scratch.
  expect_pieces(
      stream_copies({{0, 10}, {50, 55}}, {{1000, 1030}}, 64),
      {{0, 1000, 10, false, false}, {50, 1010, 5, false, false}, {0, 1015, 15, true, false}});
}

TEST(StreamCopies, EveryByteOnceWhateverTheSpans) {
  // Read and written bytes each covered once, in order: the pieces' sides add up to R and W, and
  // the scratch's to |R - W|, for spans cut at odd places.
  const std::vector<AddressSpan> reads{{0, 7}, {100, 100}, {200, 233}, {300, 301}};
  const std::vector<AddressSpan> writes{{1000, 1013}, {2000, 2005}};
  std::size_t read = 0, written = 0, scratch = 0;
  std::uintptr_t last_to = 0;
  for (const CopyPiece& p : stream_copies(reads, writes, 8)) {
    EXPECT_GT(p.bytes, 0u);
    if (p.to_scratch) {
      scratch += p.bytes;
      EXPECT_LE(p.bytes, 8u);
    } else {
      EXPECT_GE(p.to, last_to);  // the writes in order
      last_to = p.to;
      written += p.bytes;
    }
    read += p.from_scratch ? 0 : p.bytes;
  }
  EXPECT_EQ(read, 41u);
  EXPECT_EQ(written, 18u);
  EXPECT_EQ(scratch, 23u);
}

TEST(StreamCopies, NothingReadOrWrittenAndBadArgumentsAreErrorsOrNoCopy) {
  EXPECT_TRUE(stream_copies({}, {}, 8).empty());
  expect_pieces(stream_copies({}, {{0, 10}}, 8),
                {{0, 0, 8, true, false}, {0, 8, 2, true, false}});  // a fill: from the scratch
  EXPECT_THROW(stream_copies({{10, 5}}, {{0, 10}}, 8), std::invalid_argument);
  EXPECT_THROW(stream_copies({{0, 10}}, {{30, 20}}, 8), std::invalid_argument);
  EXPECT_THROW(stream_copies({{0, 10}}, {{20, 30}}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace shardscope::bench
