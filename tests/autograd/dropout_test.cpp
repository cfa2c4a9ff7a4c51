// Dropout: a shard draws exactly the mask of the same elements of the full tensor, masks change
// with step, stream and seed, the kept fraction is 1 - p, kept values are scaled by 1 / (1 - p).
#include <cmath>
#include <limits>

#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using testing::const64;
using ::testing::HasSubstr;

// The kept fraction of n = 131072 Bernoulli(1 - p) draws has a standard deviation of at most
// sqrt(0.25 / n) = 0.0014; 0.01 is seven of them, so a right generator never fails and a biased
// one (a wrong comparison, a lost bit) does.
constexpr double kKeptFractionTol = 0.01;

DropoutSpec make_spec(double p) {
  DropoutSpec s;
  s.p = p;
  s.seed = 2024;
  s.stream = dropout_stream(3, 2);
  s.step = 5;
  return s;
}

// Elements [start, start + count) of `t` along `dim`, as a new tensor (a shard).
Tensor slice(const Tensor& t, int dim, std::int64_t start, std::int64_t count) {
  const std::int64_t rest = t.shape().dim(dim) - start - count;
  return split(t, dim, {start, count, rest})[1];
}

std::int64_t count_kept(const Tensor& y) {
  std::int64_t kept = 0;
  for (double v : y.to_vector()) kept += v != 0.0;
  return kept;
}

class Dropout : public ::testing::Test {
 protected:
  // Random values: an output element is 0 exactly when it was dropped.
  Context ctx;
  const Shape global{8, 3, 16};  // [s, b, h]
  const Tensor x = const64(ctx, global, 11);
  const Tensor y = dropout(x, make_spec(0.4));
};

// Runs dropout on the shard of x at `offset` with `sizes` and expects exactly the full output's
// elements there (same bits: sharded and unsharded runs must agree exactly).
void expect_shard_matches(const Tensor& x, const Tensor& y, const std::vector<std::int64_t>& offset,
                          const std::vector<std::int64_t>& sizes) {
  Tensor xs = x, ys = y;
  for (int d = 0; d < x.rank(); ++d) {
    xs = slice(xs, d, offset[static_cast<std::size_t>(d)], sizes[static_cast<std::size_t>(d)]);
    ys = slice(ys, d, offset[static_cast<std::size_t>(d)], sizes[static_cast<std::size_t>(d)]);
  }
  DropoutSpec spec = make_spec(0.4);
  spec.global_shape = x.shape();
  spec.offset = offset;
  const std::vector<double> got = dropout(xs, spec).to_vector(), want = ys.to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST_F(Dropout, ShardAlongSequenceDrawsTheFullTensorsMask) {
  expect_shard_matches(x, y, {2, 0, 0}, {3, 3, 16});
}

TEST_F(Dropout, ShardAlongHiddenDrawsTheFullTensorsMask) {
  expect_shard_matches(x, y, {0, 0, 8}, {8, 3, 4});
}

TEST_F(Dropout, ShardAlongSeveralDimsDrawsTheFullTensorsMask) {
  expect_shard_matches(x, y, {4, 1, 4}, {4, 2, 12});
}

TEST_F(Dropout, ShardWithoutItsOffsetDrawsADifferentMask) {
  // The negative control of the tests above: the offset is what makes them agree.
  const Tensor xs = slice(x, 2, 8, 4);
  DropoutSpec spec = make_spec(0.4);
  spec.global_shape = global;
  const std::vector<double> got = dropout(xs, spec).to_vector();
  const std::vector<double> want = slice(y, 2, 8, 4).to_vector();
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) differ += (got[i] == 0.0) != (want[i] == 0.0);
  EXPECT_GT(differ, 10);  // of 96 elements, about 46 expected
}

TEST_F(Dropout, MaskChangesWithStepStreamAndSeed) {
  const Tensor ones = Tensor::full(ctx, {64, 64}, 1.0, DType::f64);
  const std::vector<double> base = dropout(ones, make_spec(0.5)).to_vector();
  DropoutSpec step = make_spec(0.5), stream = make_spec(0.5), seed = make_spec(0.5);
  step.step += 1;
  stream.stream = dropout_stream(3, 3);
  seed.seed += 1;
  for (const DropoutSpec& s : {step, stream, seed}) {
    const std::vector<double> other = dropout(ones, s).to_vector();
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < base.size(); ++i) differ += (base[i] == 0.0) != (other[i] == 0.0);
    EXPECT_GT(differ, 1500) << "of 4096; independent masks differ in about 2048";
  }
  EXPECT_EQ(dropout(ones, make_spec(0.5)).to_vector(), base);  // and only with them
}

TEST(DropoutStream, DistinctForEachLayerAndSite) {
  EXPECT_NE(dropout_stream(0, 1), dropout_stream(1, 1));
  EXPECT_NE(dropout_stream(0, 1), dropout_stream(0, 2));
  EXPECT_NE(dropout_stream(1, 0), dropout_stream(0, 1));
}

TEST_F(Dropout, KeptFractionIsOneMinusP) {
  const Tensor ones = Tensor::full(ctx, {256, 512}, 1.0, DType::f64);
  for (double p : {0.1, 0.5, 0.9}) {
    const double kept = static_cast<double>(count_kept(dropout(ones, make_spec(p)))) /
                        static_cast<double>(ones.numel());
    EXPECT_NEAR(kept, 1.0 - p, kKeptFractionTol) << "p = " << p;
  }
}

TEST_F(Dropout, KeptValuesAreScaledByInverseKeepProbability) {
  const std::vector<double> in = x.to_vector(), out = y.to_vector();
  std::int64_t kept = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (out[i] == 0.0) continue;
    ++kept;
    EXPECT_NEAR(out[i], in[i] / 0.6, testing::kF64Tol) << "element " << i;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.numel());
}

TEST_F(Dropout, ZeroProbabilityIsTheIdentityAndSavesNothing) {
  Tensor leaf = x.detach();
  leaf.set_requires_grad(true);
  const Tensor out = dropout(leaf, make_spec(0.0));
  EXPECT_EQ(out.to_vector(), x.to_vector());
  ASSERT_TRUE(out.grad_fn());
  EXPECT_EQ(out.grad_fn()->saved_count(), 0u);
}

TEST_F(Dropout, ProbabilityOutsideZeroToOneThrows) {
  for (double p : {-0.1, 1.0, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    const std::string msg = testing::message_of<ArgumentError>([&] { dropout(x, make_spec(p)); });
    EXPECT_THAT(msg, HasSubstr("op 'dropout'"));
    EXPECT_THAT(msg, HasSubstr("[0, 1)"));
  }
}

// Causal probabilities [.., s_q, s_k]: the keys after each query's visible ones are dropped (their
// mask and output 0); every other element keeps what dropout without `causal` gives it, bit for
// bit. Square and with more keys than queries (queries aligned to the end of the keys).
TEST_F(Dropout, CausalDropsTheMaskedKeysAndKeepsTheOthersBits) {
  for (const Shape& shape : {Shape{2, 3, 16, 16}, Shape{3, 6, 10}}) {
    SCOPED_TRACE(shape.str());
    const Tensor ones = Tensor::full(ctx, shape, 1.0, DType::f64);
    DropoutSpec causal = make_spec(0.3);
    causal.causal = true;
    const std::vector<double> got = dropout(ones, causal).to_vector();
    const std::vector<double> plain = dropout(ones, make_spec(0.3)).to_vector();
    const std::int64_t sq = shape.dim(-2), sk = shape.dim(-1);
    std::int64_t visible_kept = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const auto e = static_cast<std::int64_t>(i);
      const std::int64_t query = e / sk % sq, key = e % sk;
      if (key > query + sk - sq) {
        EXPECT_EQ(got[i], 0.0) << "element " << i << " (query " << query << ", key " << key
                               << ") is after the query's keys";
      } else {
        EXPECT_EQ(got[i], plain[i])
            << "element " << i << " (query " << query << ", key " << key << ")";
        visible_kept += got[i] != 0.0;
      }
    }
    EXPECT_GT(visible_kept, 0);
  }
}

TEST_F(Dropout, CausalNeedsEachMatrixWholeInTheShard) {
  DropoutSpec spec = make_spec(0.4);
  spec.causal = true;
  spec.global_shape = Shape{8, 3, 32};
  spec.offset = {0, 0, 16};  // half of each row's keys
  std::string msg = testing::message_of<ShapeError>([&] { dropout(x, spec); });
  EXPECT_THAT(msg, HasSubstr("DropoutSpec::causal"));
  EXPECT_THAT(msg, HasSubstr("[8, 3, 32]"));
  DropoutSpec flat = make_spec(0.4);
  flat.causal = true;
  msg = testing::message_of<ShapeError>(
      [&] { dropout(Tensor::full(ctx, {16}, 1.0, DType::f64), flat); });
  EXPECT_THAT(msg, HasSubstr("DropoutSpec::causal"));
}

TEST_F(Dropout, ShardOutsideTheGlobalShapeThrows) {
  DropoutSpec spec = make_spec(0.4);
  spec.global_shape = global;
  spec.offset = {6, 0, 0};  // rows 6..14 of 8
  std::string msg = testing::message_of<ShapeError>([&] { dropout(x, spec); });
  EXPECT_THAT(msg, HasSubstr("does not fit in the global shape [8, 3, 16]"));
  spec.offset = {0, 0};
  msg = testing::message_of<ShapeError>([&] { dropout(x, spec); });
  EXPECT_THAT(msg, HasSubstr("must have the rank of the input"));
}

}  // namespace
}  // namespace shardscope
