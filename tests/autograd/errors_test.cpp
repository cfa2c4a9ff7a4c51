// Bad input: each op throws a typed exception whose message names the op, where it ran and the
// shapes or dtypes it was given.
#include <cmath>
#include <limits>

#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::message_of;

class Errors : public ::testing::Test {
 protected:
  Tensor f64(const Shape& s) { return Tensor::zeros(ctx, s, DType::f64); }
  Tensor f32(const Shape& s) { return Tensor::zeros(ctx, s, DType::f32); }
  Context ctx;
};

TEST_F(Errors, MatmulInnerDims) {
  const std::string msg = message_of<ShapeError>([&] { matmul(f64({2, 3}), f64({4, 5})); });
  EXPECT_THAT(msg, AllOf(HasSubstr("op 'matmul'"), HasSubstr("inner dims differ"),
                         HasSubstr("[2, 3] has k = 3"), HasSubstr("[4, 5] has k = 4")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                matmul(f64({2, 3}), f64({2, 4}), true);
              }),
              HasSubstr("(transposed) has k = 4"));
}

TEST_F(Errors, MatmulBatchAndRank) {
  EXPECT_THAT(
      message_of<ShapeError>([&] {
        matmul(f64({2, 3, 4}), f64({3, 4, 5}));
      }),
      AllOf(HasSubstr("same leading dims"), HasSubstr("[2, 3, 4]"), HasSubstr("[3, 4, 5]")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                matmul(f64({3}), f64({3, 4}));
              }),
              AllOf(HasSubstr("rank >= 2"), HasSubstr("[3]")));
}

TEST_F(Errors, AddAndMulNeedASuffixBias) {
  EXPECT_THAT(message_of<ShapeError>([&] {
                add(f64({2, 3, 4}), f64({3}));
              }),
              AllOf(HasSubstr("op 'add'"), HasSubstr("f64[3]"), HasSubstr("[2, 3, 4]"),
                    HasSubstr("suffix")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                mul(f64({2, 3, 4}), f64({2, 3}));
              }),
              AllOf(HasSubstr("op 'mul'"), HasSubstr("f64[2, 3]"), HasSubstr("[2, 3, 4]")));
  // A bias with more dims than the input is not a suffix either.
  EXPECT_THROW(add(f64({4}), f64({2, 4})), ShapeError);
}

TEST_F(Errors, LayerNormWeightShape) {
  const std::string msg = message_of<ShapeError>([&] {
    layernorm(f64({2, 4}), f64({3}), f64({4}));
  });
  EXPECT_THAT(msg, AllOf(HasSubstr("op 'layernorm'"), HasSubstr("must be [4]"), HasSubstr("f64[3]"),
                         HasSubstr("[2, 4]")));
  EXPECT_THROW(layernorm(f64({2, 4}), f64({4}), f64({4}), 0.0), ArgumentError);
}

TEST_F(Errors, RmsNormWeightShapeRankAndEps) {
  EXPECT_THAT(message_of<ShapeError>([&] {
                rmsnorm(f64({2, 4}), f64({3}));
              }),
              AllOf(HasSubstr("op 'rmsnorm'"), HasSubstr("weight must be [4]"), HasSubstr("f64[3]"),
                    HasSubstr("[2, 4]")));
  EXPECT_THAT(message_of<ShapeError>([&] { rmsnorm(f64({}), f64({1})); }),
              AllOf(HasSubstr("op 'rmsnorm'"), HasSubstr("rank >= 1"), HasSubstr("f64[]")));
  for (double eps : {0.0, -1e-5, std::nan("")}) {
    EXPECT_THAT(message_of<ArgumentError>([&] {
                  rmsnorm(f64({2, 4}), f64({4}), eps);
                }),
                AllOf(HasSubstr("op 'rmsnorm'"), HasSubstr("eps must be > 0")))
        << "eps " << eps;
  }
}

TEST_F(Errors, SwigluNeedsAnEvenLastDim) {
  EXPECT_THAT(message_of<ShapeError>([&] {
                swiglu(f64({2, 3}));
              }),
              AllOf(HasSubstr("op 'swiglu'"), HasSubstr("even last dim"), HasSubstr("f64[2, 3]")));
  EXPECT_THAT(message_of<ShapeError>([&] { swiglu(f64({})); }),
              AllOf(HasSubstr("op 'swiglu'"), HasSubstr("rank >= 1"), HasSubstr("f64[]")));
  EXPECT_EQ(swiglu(f64({3, 0})).shape(), Shape({3, 0}));  // no pairs: an empty output
}

TEST_F(Errors, RopeShapesAndSettings) {
  for (const Shape& s : {Shape{2, 3}, Shape{2, 0}, Shape{4}, Shape{}}) {
    EXPECT_THAT(message_of<ShapeError>([&] { rope(f64(s), 0, 0); }),
                AllOf(HasSubstr("op 'rope'"), HasSubstr("rank >= 2 and an even last dim d >= 2"),
                      HasSubstr("f64" + s.str())));
  }
  for (int seq_dim : {-1, 2, 3}) {
    EXPECT_THAT(message_of<ShapeError>([&] {
                  rope(f64({2, 3, 4}), seq_dim, 0);
                }),
                AllOf(HasSubstr("op 'rope'"), HasSubstr("seq_dim must be in [0, 2)"),
                      HasSubstr("given " + std::to_string(seq_dim) + " for x f64[2, 3, 4]")));
  }
  EXPECT_THAT(message_of<ArgumentError>([&] {
                rope(f64({2, 4}), 0, -1);
              }),
              AllOf(HasSubstr("op 'rope'"), HasSubstr("first_position must be >= 0, given -1")));
  for (double base : {1.0, 0.5, -2.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    EXPECT_THAT(message_of<ArgumentError>([&] {
                  rope(f64({2, 4}), 0, 0, base);
                }),
                AllOf(HasSubstr("op 'rope'"), HasSubstr("base must be finite and > 1, given")))
        << "base " << base;
  }
  EXPECT_THAT(message_of<ArgumentError>([&] {
                rope(f64({2, 4}), 0, 0, 0.5);
              }),
              HasSubstr("given 0.5"));
  EXPECT_EQ(rope(f64({0, 3, 4}), 1, 0).shape(), Shape({0, 3, 4}));  // no rows: an empty output
}

TEST_F(Errors, ConcatSplitChunkReshapePermute) {
  EXPECT_THAT(message_of<ShapeError>([&] {
                concat({f64({2, 3}), f64({2, 4})}, 0);
              }),
              AllOf(HasSubstr("op 'concat'"), HasSubstr("f64[2, 3]"), HasSubstr("f64[2, 4]"),
                    HasSubstr("outside dim 0")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                split(f64({2, 5}), 1, {2, 2});
              }),
              AllOf(HasSubstr("op 'split'"), HasSubstr("add up to 4"), HasSubstr("is 5")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                chunk(f64({2, 5}), 1, 2);
              }),
              AllOf(HasSubstr("chunk"), HasSubstr("size 5"), HasSubstr("2 equal chunks")));
  EXPECT_THAT(
      message_of<ShapeError>([&] {
        reshape(f64({2, 3}), {4, 2});
      }),
      AllOf(HasSubstr("op 'reshape'"), HasSubstr("cannot reshape [2, 3]"), HasSubstr("[4, 2]")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                permute(f64({2, 3}), {0, 0});
              }),
              AllOf(HasSubstr("op 'permute'"), HasSubstr("(0, 0) is not a permutation")));
}

TEST_F(Errors, SoftmaxAndLosses) {
  EXPECT_THAT(message_of<ShapeError>([&] {
                softmax(f64({2, 5, 3}), true);
              }),
              AllOf(HasSubstr("op 'softmax'"), HasSubstr("s_k >= s_q"), HasSubstr("[2, 5, 3]")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                mse_loss(f64({2, 3}), f64({3, 2}));
              }),
              AllOf(HasSubstr("op 'mse_loss'"), HasSubstr("f64[2, 3]"), HasSubstr("f64[3, 2]")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                cross_entropy(f64({3, 4}), {0, 1});
              }),
              AllOf(HasSubstr("op 'cross_entropy'"), HasSubstr("N = 2"), HasSubstr("[3, 4]")));
  EXPECT_THAT(message_of<ArgumentError>([&] {
                cross_entropy(f64({2, 4}), {0, 7});
              }),
              AllOf(HasSubstr("target 1 is 7"), HasSubstr("[0, 4)")));
}

TEST_F(Errors, DTypeMismatches) {
  EXPECT_THAT(message_of<DTypeError>([&] {
                add(f32({2, 3}), f64({2, 3}));
              }),
              AllOf(HasSubstr("op 'add'"), HasSubstr("f32[2, 3]"), HasSubstr("f64[2, 3]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                matmul(f64({2, 3}), f32({3, 4}));
              }),
              AllOf(HasSubstr("op 'matmul'"), HasSubstr("f64[2, 3]"), HasSubstr("f32[3, 4]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                layernorm(f32({2, 4}), f64({4}), f32({4}));
              }),
              AllOf(HasSubstr("op 'layernorm'"), HasSubstr("f64[4]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                rmsnorm(f32({2, 4}), f64({4}));
              }),
              AllOf(HasSubstr("op 'rmsnorm'"), HasSubstr("f64[4]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                concat({f32({2}), f64({2})}, 0);
              }),
              HasSubstr("op 'concat'"));
  const Tensor mask = Tensor::zeros(ctx, {2}, DType::u8);
  EXPECT_THAT(message_of<DTypeError>([&] { gelu(mask); }),
              AllOf(HasSubstr("op 'gelu'"), HasSubstr("must be floating (f32, f64, bf16 or f16)"),
                    HasSubstr("u8[2]")));
  EXPECT_THAT(message_of<DTypeError>([&] { swiglu(mask); }),
              AllOf(HasSubstr("op 'swiglu'"), HasSubstr("must be floating (f32, f64, bf16 or f16)"),
                    HasSubstr("u8[2]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                rope(Tensor::zeros(ctx, {2, 2}, DType::u8), 0, 0);
              }),
              AllOf(HasSubstr("op 'rope'"), HasSubstr("must be floating (f32, f64, bf16 or f16)"),
                    HasSubstr("u8[2, 2]")));
}

TEST_F(Errors, MessagesSayWhereTheOpRan) {
  Context rank2(2);
  ScopeGuard scope(rank2, "attn");
  LayerGuard layer(rank2, 3);
  const Tensor a = Tensor::zeros(rank2, {2, 3}, DType::f64);
  EXPECT_THAT(message_of<ShapeError>([&] { matmul(a, a); }),
              HasSubstr("op 'matmul' in attn (layer 3, forward, rank 2)"));
  EXPECT_THAT(message_of<ArgumentError>([&] {
                add(a, f64({2, 3}));
              }),
              HasSubstr("belongs to another context"));
}

TEST_F(Errors, BackwardFromANonScalarNeedsAGradient) {
  Tensor x = f64({2, 3});
  x.set_requires_grad(true);
  const Tensor y = scale(x, 2.0);
  EXPECT_THAT(message_of<StateError>([&] { y.backward(); }),
              AllOf(HasSubstr("one-element"), HasSubstr("f64[2, 3]"), HasSubstr("op 'scale'")));
  EXPECT_THAT(message_of<ShapeError>([&] {
                y.backward(f64({3, 2}));
              }),
              AllOf(HasSubstr("must match the output"), HasSubstr("f64[3, 2]")));
  EXPECT_THAT(message_of<DTypeError>([&] {
                y.backward(f32({2, 3}));
              }),
              AllOf(HasSubstr("must match the output f64[2, 3]"), HasSubstr("f32[2, 3]")));
  EXPECT_THAT(message_of<StateError>([&] { sum(f64({2})).backward(); }),
              HasSubstr("does not require grad"));
}

TEST_F(Errors, BackwardTwice) {
  Tensor x = f64({2, 3});
  x.set_requires_grad(true);
  const Tensor loss = mean(gelu(x));
  loss.backward();
  EXPECT_THAT(
      message_of<StateError>([&] { loss.backward(); }),
      AllOf(HasSubstr("op 'mean'"), HasSubstr("backward through this graph a second time")));
}

// An allocation the host cannot meet (4 PiB) names the device, the bytes and the op that asked,
// on both host backends; outside any op it says so instead of naming an empty op.
TEST(OutOfMemory, AnAllocationThatCannotBeMetNamesTheDeviceTheBytesAndTheOp) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer ends the process on an allocation it cannot meet";
#endif
  const Shape huge{std::int64_t{1} << 50};
  for (const Device device : {Device::cpu(), Device::reference()}) {
    Context ctx(1, device);
    ctx.set_current_op("matmul");
    const std::string in_op = message_of<OutOfMemoryError>([&] { Tensor::empty(ctx, huge); });
    EXPECT_THAT(in_op, AllOf(HasSubstr("out of memory on " + device.str()),
                             HasSubstr("asked for 4503599627370496 bytes ("),
                             HasSubstr("in op 'matmul' (forward, rank 1)")));
    ctx.set_current_op("");
    EXPECT_THAT(message_of<OutOfMemoryError>([&] { Tensor::empty(ctx, huge); }),
                HasSubstr("in no op (forward, rank 1)"));
  }
}

}  // namespace
}  // namespace shardscope
