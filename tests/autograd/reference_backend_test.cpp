// Every op of the kernel table on the tuned CPU backend against the reference backend
// (autograd/reference/), f32 and f64, on odd shapes and on shapes above the CPU backend's
// threading and blocking thresholds (cpu_backend.cpp: 2^15 elements for cheap loops, 2^14 per row
// loop, 2^20 multiply-adds per GEMM piece).
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <thread>
#include <vector>

#include "autograd/cpu/cpu_backend.h"
#include "tests/autograd/reference_backend_testing.h"

namespace shardscope {
namespace {

using testing::compare_with_reference;
using testing::Mismatch;
using testing::NamedTensors;
using testing::OpCase;
using testing::test_input;

class CpuVsReference : public ::testing::TestWithParam<DType> {
 protected:
  // The case on the CPU backend against the reference backend: no element out of tolerance.
  void expect_match(const OpCase& op, const std::string& what) {
    const Mismatch m = compare_with_reference(cpu_.backend(), cpu_, op, GetParam());
    EXPECT_EQ(m.count, 0) << what << " [" << dtype_name(GetParam()) << "]: first " << m.first;
  }

  Context cpu_{0, Device::cpu()};
};

// A row-major product through a GemmDesc; C starts from values (for beta) unless beta is 0, when
// it starts as NaN, which BLAS semantics never read.
OpCase gemm_case(GemmDesc d) {
  return [d](Backend& be, Context& ctx, DType dt) {
    const std::int64_t a_rows = d.trans_a ? d.k : d.m, b_rows = d.trans_b ? d.n : d.k;
    const std::int64_t last_a = (d.batch - 1) * d.stride_a, last_b = (d.batch - 1) * d.stride_b;
    const Tensor a = test_input(ctx, {last_a + a_rows * d.lda}, dt, 1);
    const Tensor b = test_input(ctx, {last_b + b_rows * d.ldb}, dt, 2);
    Tensor c = test_input(ctx, {(d.batch - 1) * d.stride_c + d.m * d.ldc}, dt, 3);
    if (d.beta == 0.0) be.fill(c, std::nan(""));
    be.gemm(d, dt, a.raw_data(), b.raw_data(), c.raw_data());
    if (d.beta == 0.0 && d.ldc > d.n) {  // the padding was never written: give it a value
      NamedTensors out;
      std::vector<double> v = c.to_vector();
      for (double& x : v) x = std::isnan(x) ? 0.0 : x;
      out.emplace_back("C", Tensor::from_vector(ctx, c.shape(), v, dt));
      return out;
    }
    return NamedTensors{{"C", c}};
  };
}

TEST_P(CpuVsReference, GemmEveryTransposeBatchStrideAlphaAndBeta) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // small and odd; one product above the 2^20 multiply-adds of a CPU GEMM piece
      for (auto [m, n, k] : {std::array<std::int64_t, 3>{3, 5, 7}, {300, 129, 65}, {1, 257, 3}}) {
        expect_match(gemm_case(GemmDesc::packed(m, n, k, ta, tb)),
                     "gemm " + GemmDesc::packed(m, n, k, ta, tb).str());
      }
      GemmDesc d = GemmDesc::packed(17, 33, 9, ta, tb);  // batched, B shared, padded rows
      d.batch = 5;
      d.lda += 2;
      d.ldb += 3;
      d.ldc += 1;
      d.stride_a = 40 * d.lda;
      d.stride_b = 0;
      d.stride_c = 17 * d.ldc + 4;
      d.alpha = 0.5;
      d.beta = -0.25;
      expect_match(gemm_case(d), "gemm " + d.str() + " alpha 0.5 beta -0.25");
    }
  }
  GemmDesc empty_k = GemmDesc::packed(4, 6, 0);  // C = beta C
  empty_k.lda = 1;
  empty_k.beta = 2.0;
  expect_match(gemm_case(empty_k), "gemm k = 0");
}

TEST_P(CpuVsReference, LowerTriangleOutOfPlaceAndInPlace) {
  // Squares inside padded rows and batch strides (the diagonal blocks of causal_matmul), moved to
  // packed squares, and zeroed above the diagonal where they are; 1 x 1 squares; more squares than
  // the CPU backend's threads take whole; a causal block's 32 squares of 32 x 32 at s=128 (8 heads,
  // batch 4), shared out by the threads too.
  for (auto [n, batch] : {std::array<std::int64_t, 2>{5, 3}, {1, 4}, {64, 37}, {32, 32}}) {
    TriangleDesc t;
    t.n = n;
    t.batch = batch;
    t.ld_src = n + 3;
    t.stride_src = (n + 1) * t.ld_src;
    t.ld_dst = n;
    t.stride_dst = n * n;
    expect_match(
        [t](Backend& be, Context& ctx, DType dt) {
          const Tensor src = test_input(ctx, {t.batch * t.stride_src}, dt, 1);
          Tensor dst = test_input(ctx, {t.batch * t.stride_dst}, dt, 2);
          be.lower_triangle(t, dt, src.raw_data(), dst.raw_data());
          Tensor in_place = test_input(ctx, {t.batch * t.stride_src}, dt, 3);
          TriangleDesc same = t;
          same.ld_dst = t.ld_src;
          same.stride_dst = t.stride_src;
          be.lower_triangle(same, dt, in_place.raw_data(), in_place.raw_data());
          return NamedTensors{{"out of place", dst}, {"in place", in_place}};
        },
        "lower_triangle " + t.str());
  }
}

// Sizes of the elementwise cases: odd, and above 2^15 (the CPU backend's threads split it).
const std::int64_t kElementwiseSizes[] = {1, 7, 1000, 3 * 257 * 67};

TEST_P(CpuVsReference, FillCopyScaleAddMul) {
  for (std::int64_t n : kElementwiseSizes) {
    expect_match(
        [n](Backend& be, Context& ctx, DType dt) {
          const Tensor x = test_input(ctx, {n}, dt, 1), y = test_input(ctx, {n}, dt, 2);
          Tensor filled = Tensor::empty(ctx, {n}, dt), copied = Tensor::empty(ctx, {n}, dt);
          Tensor scaled = Tensor::empty(ctx, {n}, dt), sum = Tensor::empty(ctx, {n}, dt);
          Tensor product = Tensor::empty(ctx, {n}, dt);
          be.fill(filled, -1.25);
          be.copy(x, copied);
          be.scale(x, 0.3, scaled);
          be.add(x, y, 0.5, -2.0, sum);
          be.mul(x, y, product);
          return NamedTensors{{"fill", filled},
                              {"copy", copied},
                              {"scale", scaled},
                              {"add", sum},
                              {"mul", product}};
        },
        "fill/copy/scale/add/mul n=" + std::to_string(n));
  }
  expect_match(  // b repeats over a's leading dims
      [](Backend& be, Context& ctx, DType dt) {
        const Tensor x = test_input(ctx, {130, 257}, dt, 1), b = test_input(ctx, {257}, dt, 2);
        Tensor sum = Tensor::empty(ctx, x.shape(), dt), product = Tensor::empty(ctx, x.shape(), dt);
        be.add(x, b, 1.0, 1.0, sum);
        be.mul(x, b, product);
        return NamedTensors{{"add", sum}, {"mul", product}};
      },
      "add/mul broadcast [130, 257] by [257]");
}

TEST_P(CpuVsReference, GeluForwardAndBackward) {
  for (std::int64_t n : kElementwiseSizes) {
    expect_match(
        [n](Backend& be, Context& ctx, DType dt) {
          const Tensor x = test_input(ctx, {n}, dt, 1, -6.0, 6.0), dy = test_input(ctx, {n}, dt, 2);
          Tensor y = Tensor::empty(ctx, {n}, dt), dx = Tensor::empty(ctx, {n}, dt);
          be.gelu_forward(x, y);
          be.gelu_backward(x, dy, dx);
          return NamedTensors{{"y", y}, {"dx", dx}};
        },
        "gelu n=" + std::to_string(n));
  }
}

// x [n, 2f] of (gate, up) pairs: n f outputs, above 2^12 (the CPU backend's costly-loop grain)
// for the larger shapes. Gates over [-8, 8) reach both of silu's flat and linear sides.
TEST_P(CpuVsReference, SwigluForwardAndBackward) {
  for (const Shape& s :
       {Shape{1, 2}, Shape{7, 6}, Shape{3, 5, 14}, Shape{1000, 2}, Shape{3 * 257, 2 * 67}}) {
    expect_match(
        [s](Backend& be, Context& ctx, DType dt) {
          std::vector<std::int64_t> out_dims = s.dims();
          out_dims.back() /= 2;
          const Tensor x = test_input(ctx, s, dt, 1, -8.0, 8.0);
          const Tensor dy = test_input(ctx, Shape(out_dims), dt, 2);
          Tensor y = Tensor::empty(ctx, Shape(out_dims), dt), dx = Tensor::empty(ctx, s, dt);
          be.swiglu_forward(x, y);
          be.swiglu_backward(x, dy, dx);
          return NamedTensors{{"y", y}, {"dx", dx}};
        },
        "swiglu " + s.str());
  }
}

// Forward and inverse (backward's) rotations on both sequence layouts, odd sizes and shapes above
// the CPU backend's row grain (2^12 elements / d rows a thread), and far positions.
TEST_P(CpuVsReference, RopeForwardAndInverse) {
  struct Case {
    Shape shape;
    int seq_dim;
    std::int64_t first_position;
    double base;
  };
  for (const Case& c : {Case{{1, 2}, 0, 0, 10000.0}, Case{{3, 5, 6}, 1, 2, 100.0},
                        Case{{64, 2, 4, 64}, 0, 7, 10000.0},      // [s, b, h, d], 32768 elements
                        Case{{2, 3, 130, 34}, 2, 123456, 500.0},  // [b, h, s, d]
                        Case{{257, 3, 10}, 0, 99, 10000.0}}) {
    expect_match(
        [c](Backend& be, Context& ctx, DType dt) {
          const Tensor x = test_input(ctx, c.shape, dt, 1), dy = test_input(ctx, c.shape, dt, 2);
          Tensor y = Tensor::empty(ctx, c.shape, dt), dx = Tensor::empty(ctx, c.shape, dt);
          be.rope_forward(x, c.seq_dim, c.first_position, c.base, false, y);
          be.rope_forward(dy, c.seq_dim, c.first_position, c.base, true, dx);
          return NamedTensors{{"y", y}, {"dx", dx}};
        },
        "rope " + c.shape.str() + " seq_dim " + std::to_string(c.seq_dim));
  }
}

// The CPU backend keeps the table of cosines and sines of the last geometry it rotated by: each
// call below differs from the one before in one thing alone (the same geometry again, the first
// position, the base, d, the positions), and each must rotate by its own angles, never by the kept
// table of another geometry.
TEST_P(CpuVsReference, RopeTableFollowsEachGeometry) {
  struct Case {
    Shape shape;  // [s, b, d]: positions along dim 0
    std::int64_t first_position;
    double base;
  };
  for (const Case& c :
       {Case{{6, 2, 8}, 0, 10000.0}, Case{{6, 2, 8}, 0, 10000.0}, Case{{6, 2, 8}, 3, 10000.0},
        Case{{6, 2, 8}, 3, 500.0}, Case{{6, 2, 10}, 3, 500.0}, Case{{7, 2, 10}, 3, 500.0},
        Case{{6, 2, 8}, 0, 10000.0}}) {
    expect_match(
        [c](Backend& be, Context& ctx, DType dt) {
          const Tensor x = test_input(ctx, c.shape, dt, 1);
          Tensor y = Tensor::empty(ctx, c.shape, dt), dx = Tensor::empty(ctx, c.shape, dt);
          be.rope_forward(x, 0, c.first_position, c.base, false, y);
          be.rope_forward(x, 0, c.first_position, c.base, true, dx);
          return NamedTensors{{"y", y}, {"inverse", dx}};
        },
        "rope " + c.shape.str() + " first position " + std::to_string(c.first_position) + " base " +
            std::to_string(c.base));
  }
}

// Dropout on a shard of a global tensor (or the whole one); the masks must be equal bit for bit.
OpCase dropout_case(Shape local, Shape global, std::vector<std::int64_t> offset, double p,
                    bool causal = false) {
  return [=](Backend& be, Context& ctx, DType dt) {
    const Tensor x = test_input(ctx, local, dt, 1), dy = test_input(ctx, local, dt, 2);
    DropoutSpec spec;
    spec.p = p;
    spec.seed = 0x1234567890ull;
    spec.stream = 7;
    spec.step = 3;
    spec.global_shape = global;
    spec.offset = offset;
    spec.causal = causal;
    Tensor mask = Tensor::zeros(ctx, local, DType::u8);
    Tensor y = Tensor::empty(ctx, local, dt), dx = Tensor::empty(ctx, local, dt);
    be.dropout_forward(x, spec, mask, y);
    be.dropout_backward(dy, mask, p, dx);
    return NamedTensors{{"mask", mask}, {"y", y}, {"dx", dx}};
  };
}

TEST_P(CpuVsReference, DropoutDrawsTheSameMask) {
  expect_match(dropout_case({5, 7, 9}, {10, 7, 18}, {5, 0, 9}, 0.3), "dropout shard");
  expect_match(dropout_case({1, 3}, {}, {}, 0.5), "dropout [1, 3]");
  expect_match(dropout_case({130, 257}, {}, {}, 0.1), "dropout [130, 257]");
  expect_match(dropout_case({3, 41, 37}, {6, 41, 74}, {3, 0, 37}, 0.7), "dropout shard, odd");
  // Runs of consecutive global indices longer than the CPU's pieces (4096): 2 runs of 9000.
  expect_match(dropout_case({2, 3, 3000}, {2, 6, 3000}, {0, 3, 0}, 0.2),
               "dropout shard, long runs");
  // Causal probabilities: the keys after each query's are dropped without drawing. Square
  // matrices; more keys than queries (the queries aligned to the end of the keys); fewer (the
  // first queries see none); a shard of the heads; rows longer than the CPU's pieces.
  expect_match(dropout_case({2, 3, 9, 9}, {}, {}, 0.3, true), "causal dropout [2, 3, 9, 9]");
  expect_match(dropout_case({2, 5, 12}, {}, {}, 0.5, true), "causal dropout [2, 5, 12]");
  expect_match(dropout_case({3, 7, 4}, {}, {}, 0.2, true), "causal dropout [3, 7, 4]");
  expect_match(dropout_case({2, 2, 9, 9}, {2, 4, 9, 9}, {0, 1, 0, 0}, 0.4, true),
               "causal dropout, a shard of the heads");
  expect_match(dropout_case({3, 5000}, {}, {}, 0.1, true), "causal dropout [3, 5000]");
}

TEST_P(CpuVsReference, LayoutPermuteAndCopySlice) {
  struct Case {
    Shape shape;
    std::vector<int> perm;
  };
  // Three permutes keep the last dim and go by tiles of rows (cpu_layout.cpp): the heads'
  // [s, b, a, d] -> [b, a, s, d] and back, large enough for several tiles, a last tile that is cut
  // short and the threads; and one with a row dim outside the tile. Then a rank-0 tensor, and one
  // whose permute moves only a dim of extent 1: one contiguous run, shared out as a copy.
  for (const Case& c :
       {Case{{3, 4, 5}, {2, 0, 1}}, Case{{2, 3, 4, 5}, {0, 2, 1, 3}}, Case{{64, 33, 17}, {1, 2, 0}},
        Case{{7}, {0}}, Case{{100, 4, 6, 40}, {1, 2, 0, 3}}, Case{{4, 6, 100, 40}, {2, 0, 1, 3}},
        Case{{2, 30, 3, 4, 16}, {0, 2, 3, 1, 4}}, Case{{}, {}}, Case{{300, 1, 400}, {1, 0, 2}}}) {
    expect_match(
        [c](Backend& be, Context& ctx, DType dt) {
          const Tensor x = test_input(ctx, c.shape, dt, 1);
          std::vector<std::int64_t> dims;
          for (int d : c.perm) dims.push_back(c.shape[d]);
          Tensor y = Tensor::empty(ctx, Shape(dims), dt);
          be.permute(x, c.perm, y);
          return NamedTensors{{"permuted", y}};
        },
        "permute " + c.shape.str());
  }
  expect_match(
      [](Backend& be, Context& ctx, DType dt) {
        const Tensor src = test_input(ctx, {4, 6, 5}, dt, 1);
        Tensor dst = test_input(ctx, {4, 5, 5}, dt, 2);
        be.copy_slice(src, 1, 2, dst, 1, 3);
        Tensor last = test_input(ctx, {4, 6, 3}, dt, 3);
        be.copy_slice(src, 2, 1, last, 0, 3);
        return NamedTensors{{"dim 1", dst}, {"dim 2", last}};
      },
      "copy_slice");
  // Slices large enough for the CPU backend to share out between threads (2^15 elements a chunk
  // at least): one long run (a split along the first dim), and runs that its chunks cut.
  expect_match(
      [](Backend& be, Context& ctx, DType dt) {
        const Tensor src = test_input(ctx, {3, 50000}, dt, 1);
        Tensor first = test_input(ctx, {2, 50000}, dt, 2);
        be.copy_slice(src, 0, 1, first, 0, 2);
        const Tensor wide = test_input(ctx, {6, 40, 1000}, dt, 3);
        Tensor middle = test_input(ctx, {6, 32, 1000}, dt, 4);
        be.copy_slice(wide, 1, 5, middle, 1, 30);
        return NamedTensors{{"dim 0, one run", first}, {"dim 1, cut runs", middle}};
      },
      "copy_slice, shared out");
}

// Strided copies: heads out of fused qkv columns (rows of d elements, apart on the source side)
// and back (apart on the destination side, whose other elements must stay), large enough for the
// threads; a transpose, whose rows are single elements; a part whose heads are adjacent.
TEST_P(CpuVsReference, CopyStridedGathersAndScatters) {
  struct Case {
    std::int64_t s, b, heads, d, width, first, stride;
  };
  for (const Case& c : {Case{5, 3, 4, 2, 24, 2, 6}, Case{256, 4, 8, 16, 384, 16, 48},
                        Case{64, 2, 8, 8, 96, 0, 8}}) {
    StridedCopy out_of;  // [s, b, width] -> [b, heads, s, d]
    out_of.dims = {c.b, c.heads, c.s, c.d};
    out_of.src_offset = c.first;
    out_of.src_strides = {c.width, c.stride, c.b * c.width, 1};
    out_of.dst_strides = Shape(out_of.dims).strides();
    StridedCopy into = out_of;  // and back
    std::swap(into.src_offset, into.dst_offset);
    std::swap(into.src_strides, into.dst_strides);
    expect_match(
        [&](Backend& be, Context& ctx, DType dt) {
          const Tensor fused = test_input(ctx, {c.s, c.b, c.width}, dt, 1);
          Tensor heads = Tensor::empty(ctx, Shape(out_of.dims), dt);
          be.copy_strided(out_of, fused, heads);
          Tensor back = test_input(ctx, {c.s, c.b, c.width}, dt, 2);
          be.copy_strided(into, heads, back);
          return NamedTensors{{"heads", heads}, {"written back", back}};
        },
        "copy_strided, heads of " + std::to_string(c.width) + " columns");
  }
  StridedCopy transpose;
  transpose.dims = {40, 70};
  transpose.src_strides = {1, 40};
  transpose.dst_strides = {70, 1};
  expect_match(
      [&](Backend& be, Context& ctx, DType dt) {
        const Tensor x = test_input(ctx, {70, 40}, dt, 1);
        Tensor y = Tensor::empty(ctx, {40, 70}, dt);
        be.copy_strided(transpose, x, y);
        return NamedTensors{{"transposed", y}};
      },
      "copy_strided, a transpose");
  // One row to every row (a linear's bias as its product's start: source stride 0), a few rows
  // and more than one tile of the CPU backend's threads.
  for (const auto& [rows, width] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {600, 300}}) {
    StridedCopy broadcast;
    broadcast.dims = {rows, width};
    broadcast.src_strides = {0, 1};
    broadcast.dst_strides = {width, 1};
    expect_match(
        [&](Backend& be, Context& ctx, DType dt) {
          const Tensor row = test_input(ctx, {width}, dt, 1);
          Tensor y = Tensor::empty(ctx, {rows, width}, dt);
          be.copy_strided(broadcast, row, y);
          return NamedTensors{{"rows", y}};
        },
        "copy_strided, one row to " + std::to_string(rows));
  }
}

TEST(StridedCopy, ValidateNamesWhatIsWrong) {
  StridedCopy c;
  c.dims = {3, 4};
  c.src_strides = {4, 1};
  c.dst_strides = {1, 3};
  EXPECT_NO_THROW(c.validate(12, 12));
  auto message = [&](const StridedCopy& bad, std::int64_t src, std::int64_t dst) {
    try {
      bad.validate(src, dst);
    } catch (const ArgumentError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message(c, 11, 12).find("src_offset and src_strides reach element 11 of a source of 11"),
      std::string::npos);
  StridedCopy moved = c;
  moved.dst_offset = 1;
  EXPECT_NE(message(moved, 12, 12).find("dst_offset and dst_strides reach element 12"),
            std::string::npos);
  StridedCopy short_strides = c;
  short_strides.src_strides = {4};
  EXPECT_NE(message(short_strides, 12, 12).find("src_strides must have one stride per dim"),
            std::string::npos);
  StridedCopy negative = c;
  negative.dst_strides = {-1, 3};
  EXPECT_NE(message(negative, 12, 12).find("strides must be >= 0"), std::string::npos);
}

// A 2-byte product widens its operands into f32 scratch that the CPU backend keeps from one
// product to the next (f16 always takes that path); two threads using one backend at once must not
// share it. Each thread's products, of two sizes in turn, give the bits that one thread alone got.
TEST(CpuTwoByteGemm, TwoThreadsOnOneBackendGetWhatOneGets) {
  CpuBackend be;  // the products' backend; each thread's tensors live in a context of its own
  const std::vector<GemmDesc> shapes = {GemmDesc::packed(96, 80, 72), GemmDesc::packed(40, 33, 9)};
  auto run = [&](std::uint64_t seed, int rounds) {
    Context ctx{0, Device::cpu()};
    std::vector<std::vector<double>> out;
    for (int r = 0; r < rounds; ++r) {
      for (const GemmDesc& d : shapes) {
        const Tensor a = test_input(ctx, {d.m * d.k}, DType::f16, seed);
        const Tensor b = test_input(ctx, {d.k * d.n}, DType::f16, seed + 1);
        Tensor c = test_input(ctx, {d.m * d.n}, DType::f16, seed + 2);
        GemmDesc acc = d;
        acc.beta = 0.5;
        be.gemm(acc, DType::f16, a.raw_data(), b.raw_data(), c.raw_data());
        out.push_back(c.to_vector());
      }
    }
    return out;
  };
  const auto alone1 = run(11, 1), alone2 = run(21, 1);
  std::vector<std::vector<double>> got1, got2;
  std::thread other([&] { got2 = run(21, 50); });
  got1 = run(11, 50);
  other.join();
  for (std::size_t i = 0; i < got1.size(); ++i) {
    ASSERT_EQ(got1[i], alone1[i % alone1.size()]) << "thread 1, product " << i;
    ASSERT_EQ(got2[i], alone2[i % alone2.size()]) << "thread 2, product " << i;
  }
}

// The kept scratch is never zeroed: a product with beta 0 must not read the C a product before
// left there. An f16 product widens a C full of NaN into it; the next, of the same size with k 0
// and beta 0, must give zeros (alpha times an empty sum), and one with k 0 and beta 1 the C given.
TEST(CpuTwoByteGemm, BetaZeroNeverReadsWhatTheLastProductLeft) {
  CpuBackend be;
  Context ctx{0, Device::cpu()};
  GemmDesc d = GemmDesc::packed(6, 5, 4);
  d.beta = 1.0;
  const Tensor a = test_input(ctx, {d.m * d.k}, DType::f16, 1);
  const Tensor b = test_input(ctx, {d.k * d.n}, DType::f16, 2);
  Tensor c = Tensor::full(ctx, Shape{d.m * d.n}, std::nan(""), DType::f16);
  be.gemm(d, DType::f16, a.raw_data(), b.raw_data(), c.raw_data());
  GemmDesc empty = GemmDesc::packed(6, 5, 0);
  empty.lda = 1;
  Tensor zeros = test_input(ctx, {d.m * d.n}, DType::f16, 3);
  be.gemm(empty, DType::f16, a.raw_data(), b.raw_data(), zeros.raw_data());
  for (double v : zeros.to_vector()) ASSERT_EQ(v, 0.0);
  empty.beta = 1.0;
  Tensor kept = test_input(ctx, {d.m * d.n}, DType::f16, 4);
  const std::vector<double> before = kept.to_vector();
  be.gemm(empty, DType::f16, a.raw_data(), b.raw_data(), kept.raw_data());
  EXPECT_EQ(kept.to_vector(), before);
}

INSTANTIATE_TEST_SUITE_P(DTypes, CpuVsReference,
                         ::testing::Values(DType::f32, DType::f64, DType::bf16, DType::f16),
                         testing::DTypeName());

}  // namespace
}  // namespace shardscope
