// diagnose: each shape of difference it names, planted into a tensor of random values: a factor of
// t and of 1/t, another ratio, a sign flip, zeros, blocks permuted along a dim, one rank's block
// wrong (and how), and noise that fits none of them; equal tensors give none.
#include "parallel/run/diagnosis.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace shardscope {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = Diagnosis::Kind;

constexpr double kRtol = 1e-4, kAtol = 1e-6;

std::vector<double> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);  // away from zero: no accidental matches
  std::vector<double> v(n);
  for (double& x : v) x = (gen() % 2 ? 1 : -1) * u(gen);
  return v;
}

// [4, 6]: element (i, j) at i * 6 + j.
const Shape kShape{4, 6};

TEST(Diagnose, EqualTensorsGiveNone) {
  const auto b = random_values(24, 1);
  EXPECT_EQ(diagnose(b, b, kShape, 4, kRtol, kAtol).kind, Kind::none);
}

TEST(Diagnose, AnOffsetRepeatedAtEveryPositionIsAnExtraBias) {
  const auto b = random_values(24, 11);
  const auto bias = random_values(6, 12);
  std::vector<double> per_feature = b, constant = b;
  for (std::size_t i = 0; i < b.size(); ++i) {
    per_feature[i] += bias[i % 6];
    constant[i] += 0.25;
  }
  const Diagnosis d = diagnose(per_feature, b, kShape, 2, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::offset) << d.text;
  EXPECT_THAT(d.text, HasSubstr("the same vector of 6 values at every position"));
  const Diagnosis c = diagnose(constant, b, kShape, 2, kRtol, kAtol);
  EXPECT_EQ(c.kind, Kind::offset) << c.text;
  EXPECT_THAT(c.text, HasSubstr("a constant offset: a = b + 0.25"));
  per_feature[7] += 1;  // one element off the pattern: no longer an offset
  EXPECT_NE(diagnose(per_feature, b, kShape, 2, kRtol, kAtol).kind, Kind::offset);
}

TEST(Diagnose, ASingleValueIsOnlyComparedUnlessItIsAFactorOfT) {
  const Diagnosis d = diagnose({2.1}, {2.0}, Shape{1}, 2, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::unstructured);
  EXPECT_EQ(d.text, "a = 2.1 where b = 2 (a single value)");
  const Diagnosis t = diagnose({4.0}, {2.0}, Shape{1}, 2, kRtol, kAtol);
  EXPECT_EQ(t.kind, Kind::ratio);
  EXPECT_THAT(t.text, HasSubstr("a factor of t = 2"));
}

TEST(Diagnose, RatiosOfTAndOneOverTAreNamed) {
  const auto b = random_values(24, 2);
  std::vector<double> times_t = b, over_t = b, other = b;
  for (double& x : times_t) x *= 4;
  for (double& x : over_t) x /= 4;
  for (double& x : other) x *= 1.5;
  Diagnosis d = diagnose(times_t, b, kShape, 4, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::ratio);
  EXPECT_DOUBLE_EQ(d.ratio, 4);
  EXPECT_THAT(d.text, HasSubstr("a = 4 x b: a factor of t = 4"));
  EXPECT_THAT(diagnose(over_t, b, kShape, 4, kRtol, kAtol).text,
              HasSubstr("a = 0.25 x b: a factor of 1/t (t = 4)"));
  d = diagnose(other, b, kShape, 4, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::ratio);
  EXPECT_EQ(d.text, "a constant ratio: a = 1.5 x b");
}

TEST(Diagnose, ASignFlipAndZerosAreNamed) {
  const auto b = random_values(24, 3);
  std::vector<double> flipped = b, zeroed = b;
  for (double& x : flipped) x = -x;
  for (int j = 0; j < 6; ++j) zeroed[static_cast<std::size_t>(2 * 6 + j)] = 0;  // row 2
  EXPECT_EQ(diagnose(flipped, b, kShape, 2, kRtol, kAtol).kind, Kind::sign_flip);
  const Diagnosis d = diagnose(zeroed, b, kShape, 2, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::zeros);
  EXPECT_THAT(d.text, HasSubstr("zeros where values were expected (6 of 24 elements)"));
}

TEST(Diagnose, PermutedBlocksAreNamedWithThePermutation) {
  const auto b = random_values(24, 4);
  std::vector<double> a = b;  // dim 1 cut into 3 blocks of 2 columns: blocks 0 and 1 swapped
  for (int i = 0; i < 4; ++i) {
    for (int c = 0; c < 2; ++c) {
      std::swap(a[static_cast<std::size_t>(i * 6 + c)], a[static_cast<std::size_t>(i * 6 + 2 + c)]);
    }
  }
  const Diagnosis d = diagnose(a, b, kShape, 3, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::blocks_permuted);
  EXPECT_EQ(d.dim, 1);
  EXPECT_EQ(d.blocks, 3);
  EXPECT_THAT(d.permutation, ElementsAre(1, 0, 2));
}

TEST(Diagnose, OneRanksBlockWrongIsNamedWithWhatIsWrongThere) {
  const auto b = random_values(24, 5);
  std::vector<double> a = b;  // rank 2 of 4 along dim 0 (row 2) doubled
  for (int j = 0; j < 6; ++j) a[static_cast<std::size_t>(2 * 6 + j)] *= 2;
  const Diagnosis d = diagnose(a, b, kShape, 4, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::one_block_wrong);
  EXPECT_EQ(d.dim, 0);
  EXPECT_EQ(d.block, 2);
  EXPECT_THAT(d.text, HasSubstr("only block 2 of 4 along dim 0 differs (rank 2's slice"));
  EXPECT_THAT(d.text, HasSubstr("there, a constant ratio: a = 2 x b"));
}

TEST(Diagnose, NoiseIsUnstructured) {
  const auto b = random_values(24, 6);
  const auto a = random_values(24, 7);
  const Diagnosis d = diagnose(a, b, kShape, 4, kRtol, kAtol);
  EXPECT_EQ(d.kind, Kind::unstructured);
  EXPECT_THAT(d.text, HasSubstr("no simple pattern"));
}

}  // namespace
}  // namespace shardscope
