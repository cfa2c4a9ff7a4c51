// The CPU backend's dropout draws: cpu::philox_words (16 Philox blocks side by side on AVX-512, 8
// on AVX2) gives kernels::philox_bits's words bit for bit, across the carry of the block's low word
// into its high word; and the backend's integer keep test is kernels::dropout_keep's, at the
// boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "autograd/context.h"
#include "autograd/cpu/philox_words.h"
#include "autograd/cpu/x86_features.h"
#include "autograd/errors.h"
#include "autograd/kernels/philox.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"

namespace shardscope {
namespace {

constexpr std::uint64_t kSeed = 0x0123456789abcdefull;
constexpr std::uint32_t kStream = 7, kStep = 3;

// Every first block and count the vector paths can meet: from 0, across 2^32 (the high word's
// carry inside a group of 16 or 8), near the last block of a 64-bit element index (2^62 - 1);
// counts under, at and over 8 and 16.
const std::vector<std::uint64_t> kFirstBlocks = {0, 5, (std::uint64_t{1} << 32) - 7,
                                                 (std::uint64_t{1} << 33) + 3,
                                                 (std::uint64_t{1} << 62) - 40};
const std::vector<std::uint64_t> kCounts = {0, 1, 7, 8, 9, 15, 16, 17, 37, 64};

TEST(PhiloxWords, ScalarWordsAreThePhiloxBitsOfEachElement) {
  for (std::uint64_t first : kFirstBlocks) {
    std::vector<std::uint32_t> words(4 * 20);
    cpu::philox_words_scalar(first, 20, kStream, kStep, kSeed, words.data());
    for (std::uint64_t i = 0; i < words.size(); ++i) {
      ASSERT_EQ(words[i], kernels::philox_bits(kSeed, kStream, kStep, 4 * first + i))
          << "block " << first << " + " << i / 4 << ", word " << i % 4;
    }
  }
}

// Each vector width this CPU has gives the scalar words for every first block and count.
void expect_lanes_give_the_scalar_bits(int lanes) {
  for (std::uint64_t first : kFirstBlocks) {
    for (std::uint64_t count : kCounts) {
      std::vector<std::uint32_t> fast(4 * count + 1, 0xdeadbeefu),
          plain(4 * count + 1, 0xdeadbeefu);
      cpu::philox_words_lanes(lanes, first, count, kStream, kStep, kSeed, fast.data());
      cpu::philox_words_scalar(first, count, kStream, kStep, kSeed, plain.data());
      ASSERT_EQ(fast, plain) << lanes << " lanes, first block " << first << ", " << count
                             << " blocks";
    }
  }
}

TEST(PhiloxWords, SixteenBlocksAtOnceGiveTheScalarBits) {
  if (!cpu::cpu_has_avx512f()) {
    GTEST_SKIP() << "this CPU (or the OS) has no AVX512F: the 16-block path cannot run here";
  }
  expect_lanes_give_the_scalar_bits(16);
}

TEST(PhiloxWords, EightBlocksAtOnceGiveTheScalarBits) {
  if (!cpu::cpu_has_avx2()) {
    GTEST_SKIP() << "this CPU (or the OS) has no AVX2: the 8-block path cannot run here";
  }
  expect_lanes_give_the_scalar_bits(8);
}

// Listed blocks (causal dropout's visible keys, row after row): runs with gaps between them, a
// block listed twice, blocks across the carry into the high word and near 2^62; every count from
// 0 to past three groups of 8, so that the vector path (where this CPU has AVX2) and the scalar
// tail both run, each block's words where the list puts them.
TEST(PhiloxWords, ListedBlocksGiveEachBlocksScalarBits) {
  std::vector<std::uint64_t> listed;
  for (std::uint64_t b = 3; b < 9; ++b) listed.push_back(b);
  for (std::uint64_t b = 40; b < 43; ++b) listed.push_back(b);
  listed.push_back(41);
  for (std::uint64_t b = (std::uint64_t{1} << 32) - 5; b < (std::uint64_t{1} << 32) + 6; ++b) {
    listed.push_back(b);
  }
  listed.push_back((std::uint64_t{1} << 62) - 1);
  listed.push_back(0);
  listed.push_back(17);
  listed.push_back(5);
  ASSERT_GT(listed.size(), 24u);
  for (std::size_t count = 0; count <= listed.size(); ++count) {
    std::vector<std::uint32_t> words(4 * count + 1, 0xdeadbeefu);
    cpu::philox_words_listed(listed.data(), count, kStream, kStep, kSeed, words.data());
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t plain[4];
      cpu::philox_words_scalar(listed[i], 1, kStream, kStep, kSeed, plain);
      for (std::size_t w = 0; w < 4; ++w) {
        ASSERT_EQ(words[4 * i + w], plain[w])
            << count << " listed: entry " << i << " (block " << listed[i] << "), word " << w;
      }
    }
    EXPECT_EQ(words[4 * count], 0xdeadbeefu) << count << " listed: a word written past them";
  }
}

TEST(PhiloxWords, TheCpusWidestPathIsTheDefaultAndOthersAreRefused) {
  const int lanes = cpu::philox_lanes();
  const int widest = cpu::cpu_has_avx512f() ? 16 : cpu::cpu_has_avx2() ? 8 : 1;
  const char* choice = std::getenv("SHARDSCOPE_CPU_PHILOX");
  if (choice == nullptr) {
    EXPECT_EQ(lanes, widest) << "dropout does not take this CPU's widest Philox path";
  } else {
    EXPECT_LE(lanes, widest) << "SHARDSCOPE_CPU_PHILOX=" << choice;
  }
  std::vector<std::uint32_t> words(4 * 32);
  try {
    cpu::philox_words_lanes(4, 0, 32, kStream, kStep, kSeed, words.data());
    FAIL() << "4 lanes accepted";
  } catch (const StateError& e) {
    EXPECT_NE(std::string(e.what()).find("4 blocks side by side"), std::string::npos) << e.what();
  }
  if (!cpu::cpu_has_avx512f()) {
    EXPECT_THROW(cpu::philox_words_lanes(16, 0, 32, kStream, kStep, kSeed, words.data()),
                 StateError);
  }
  if (!cpu::cpu_has_avx2()) {
    EXPECT_THROW(cpu::philox_words_lanes(8, 0, 32, kStream, kStep, kSeed, words.data()),
                 StateError);
  }
}

// An element whose uniform draw u equals p is kept (dropout_keep tests u >= p) and dropped when p
// is the next double above u; the same for every element around it.
TEST(PhiloxWords, DropoutKeepsExactlyTheElementsDropoutKeepKeeps) {
  Context ctx;
  const std::int64_t n = 1000;
  DropoutSpec spec;
  spec.seed = kSeed;
  spec.stream = kStream;
  spec.step = kStep;
  const std::uint64_t probe = 123;
  const double u = kernels::uniform_from_bits(kernels::philox_bits(kSeed, kStream, kStep, probe));
  ASSERT_GT(u, 0.0);
  ASSERT_LT(u, 1.0);
  for (double p : {u, std::nextafter(u, 1.0), std::nextafter(u, 0.0)}) {
    spec.p = p;
    const Tensor x = Tensor::full(ctx, Shape{n}, 1.0);
    const std::vector<double> y = dropout(x, spec).to_vector();
    for (std::int64_t i = 0; i < n; ++i) {
      const bool keep =
          kernels::dropout_keep(kSeed, kStream, kStep, static_cast<std::uint64_t>(i), p);
      ASSERT_EQ(y[static_cast<std::size_t>(i)] != 0.0, keep) << "element " << i << ", p " << p;
    }
    EXPECT_EQ(y[probe] != 0.0, p <= u) << "the probe, p " << p << ", u " << u;
  }
}

}  // namespace
}  // namespace shardscope
