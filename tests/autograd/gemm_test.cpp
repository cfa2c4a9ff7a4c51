// Tests of GemmDesc (packed, validate, to_column_major) and of the CPU backend's GEMM against a
// naive triple loop written from GemmDesc's row-major definition.
#include <cmath>
#include <vector>

#include "autograd/backend.h"
#include "autograd/gemm.h"
#include "tests/autograd/autograd_testing.h"

namespace shardscope {
namespace {

using ::testing::HasSubstr;
using testing::kF32Tol;
using testing::kF64Tol;

// Distinct, deterministic values so that a swapped index shows up.
std::vector<double> pattern(std::size_t n, double phase) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37 * static_cast<double>(i) + phase);
  return v;
}

// Elements an operand needs: `batch` matrices of `rows` rows of stride `ld`, `stride` apart.
std::size_t extent(std::int64_t batch, std::int64_t stride, std::int64_t rows, std::int64_t ld) {
  return static_cast<std::size_t>((batch - 1) * stride + rows * ld);
}

// C[b] = alpha op(A[b]) op(B[b]) + beta C[b], read straight from GemmDesc's comment.
void reference_gemm(const GemmDesc& d, const std::vector<double>& a, const std::vector<double>& b,
                    std::vector<double>& c) {
  for (std::int64_t bt = 0; bt < d.batch; ++bt) {
    const double* pa = a.data() + bt * d.stride_a;
    const double* pb = b.data() + bt * d.stride_b;
    double* pc = c.data() + bt * d.stride_c;
    for (std::int64_t i = 0; i < d.m; ++i) {
      for (std::int64_t j = 0; j < d.n; ++j) {
        double acc = 0.0;
        for (std::int64_t p = 0; p < d.k; ++p) {
          const double av = d.trans_a ? pa[p * d.lda + i] : pa[i * d.lda + p];
          const double bv = d.trans_b ? pb[j * d.ldb + p] : pb[p * d.ldb + j];
          acc += av * bv;
        }
        pc[i * d.ldc + j] = d.alpha * acc + d.beta * pc[i * d.ldc + j];
      }
    }
  }
}

// Runs `d` through the CPU backend in f64 and compares the whole C buffer (padding included, so
// writes outside the matrix show up) with the reference.
void expect_backend_matches_reference(const GemmDesc& d) {
  SCOPED_TRACE(d.str());
  const std::int64_t a_rows = d.trans_a ? d.k : d.m, b_rows = d.trans_b ? d.n : d.k;
  const std::vector<double> a = pattern(extent(d.batch, d.stride_a, a_rows, d.lda), 0.1);
  const std::vector<double> b = pattern(extent(d.batch, d.stride_b, b_rows, d.ldb), 1.3);
  std::vector<double> c = pattern(extent(d.batch, d.stride_c, d.m, d.ldc), 2.9);
  std::vector<double> expected = c;
  reference_gemm(d, a, b, expected);
  Context ctx;
  ctx.backend().gemm(d, DType::f64, a.data(), b.data(), c.data());
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], expected[i], kF64Tol) << "at " << i;
}

const bool kFlags[] = {false, true};

TEST(GemmDesc, PackedSetsDenseLeadingDimsAndStrides) {
  for (bool ta : kFlags) {
    for (bool tb : kFlags) {
      const GemmDesc d = GemmDesc::packed(3, 4, 5, ta, tb);
      EXPECT_EQ(d.lda, ta ? 3 : 5);  // A stored [m, k], or [k, m] when transposed
      EXPECT_EQ(d.ldb, tb ? 5 : 4);  // B stored [k, n], or [n, k]
      EXPECT_EQ(d.ldc, 4);
      EXPECT_EQ(d.stride_a, 15);
      EXPECT_EQ(d.stride_b, 20);
      EXPECT_EQ(d.stride_c, 12);
      EXPECT_NO_THROW(d.validate());
    }
  }
}

// A [k=4, m=3] stored transposed with lda 5, batch 2 stride 30; B [k=4, n=6] with ldb 8 and a
// shared (stride 0) operand; C [3, 6] with ldc 7, stride 21.
TEST(GemmDesc, ElementsSpannedByEachOperand) {
  GemmDesc d;
  d.trans_a = true;
  d.m = 3, d.n = 6, d.k = 4;
  d.lda = 5, d.ldb = 8, d.ldc = 7;
  d.batch = 2, d.stride_a = 30, d.stride_b = 0, d.stride_c = 21;
  EXPECT_EQ(d.elements_a(), 30 + 3 * 5 + 3);  // last entry's last row (k - 1) plus m columns
  EXPECT_EQ(d.elements_b(), 0 + 3 * 8 + 6);
  EXPECT_EQ(d.elements_c(), 21 + 2 * 7 + 6);
  d.trans_b = true, d.ldb = 4;  // B stored [n=6, k=4]
  EXPECT_EQ(d.elements_b(), 5 * 4 + 4);
  d.k = 0;
  EXPECT_EQ(d.elements_a(), 0);
  EXPECT_EQ(d.elements_c(), 21 + 2 * 7 + 6);
}

TEST(GemmDesc, ColumnMajorSwapsOperandsAndSizes) {
  GemmDesc d;
  d.trans_a = true;
  d.m = 2, d.n = 3, d.k = 4;
  d.lda = 7, d.ldb = 8, d.ldc = 9;
  d.batch = 2, d.stride_a = 100, d.stride_b = 200, d.stride_c = 300;
  d.alpha = 0.5, d.beta = 0.25;
  const ColumnMajorGemm c = to_column_major(d);
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B comes first.
  EXPECT_FALSE(c.trans_first);
  EXPECT_TRUE(c.trans_second);
  EXPECT_EQ(c.m, 3);
  EXPECT_EQ(c.n, 2);
  EXPECT_EQ(c.k, 4);
  EXPECT_EQ(c.ld_first, 8);
  EXPECT_EQ(c.ld_second, 7);
  EXPECT_EQ(c.ldc, 9);
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.stride_first, 200);
  EXPECT_EQ(c.stride_second, 100);
  EXPECT_EQ(c.stride_c, 300);
  EXPECT_EQ(c.alpha, 0.5);
  EXPECT_EQ(c.beta, 0.25);
}

TEST(GemmBackend, PackedMatchesNaiveLoopForAllTransposes) {
  for (bool ta : kFlags) {
    for (bool tb : kFlags) expect_backend_matches_reference(GemmDesc::packed(3, 4, 5, ta, tb));
  }
}

TEST(GemmBackend, PaddedLeadingDimsAlphaBeta) {
  for (bool ta : kFlags) {
    for (bool tb : kFlags) {
      GemmDesc d = GemmDesc::packed(4, 3, 6, ta, tb);
      d.lda += 3;
      d.ldb += 2;
      d.ldc += 5;  // the padding columns of C must stay untouched
      d.alpha = 0.7;
      d.beta = -0.4;
      expect_backend_matches_reference(d);
    }
  }
}

TEST(GemmBackend, BatchedWithSharedOperand) {
  for (bool ta : kFlags) {
    for (bool tb : kFlags) {
      GemmDesc d = GemmDesc::packed(3, 5, 4, ta, tb);
      d.batch = 3;
      d.lda += 1;
      d.ldc += 2;
      d.stride_a = (ta ? d.k : d.m) * d.lda + 2;  // gaps between batch entries
      d.stride_b = 0;                             // one B shared by every entry (a weight)
      d.stride_c = d.m * d.ldc + 1;
      d.beta = 0.5;
      expect_backend_matches_reference(d);
      GemmDesc shared_a = GemmDesc::packed(3, 5, 4, ta, tb);
      shared_a.batch = 2;
      shared_a.stride_a = 0;
      expect_backend_matches_reference(shared_a);
    }
  }
}

// Many small entries, as attention's causal pieces: the CPU backend shares the entries out among
// its threads (cpu::kGemmEntriesGrain multiply-adds a thread at least: 64 entries of 24 x 20 x 28
// make several shares), each entry one product on whichever thread takes it.
TEST(GemmBackend, BatchOfSmallEntriesSharedOut) {
  for (bool ta : kFlags) {
    GemmDesc d = GemmDesc::packed(24, 20, 28, ta, true);
    d.batch = 64;
    d.ldc += 3;
    d.stride_c = d.m * d.ldc + 5;
    d.beta = 0.25;
    expect_backend_matches_reference(d);
  }
}

TEST(GemmBackend, EmptyInnerDimScalesC) {
  GemmDesc d = GemmDesc::packed(2, 3, 0);
  d.lda = 1;  // a [2, 0] still needs a stride of at least 1
  d.beta = 0.5;
  expect_backend_matches_reference(d);
}

TEST(GemmBackend, SinglePrecisionMatchesDoubleReference) {
  for (bool ta : kFlags) {
    for (bool tb : kFlags) {
      GemmDesc d = GemmDesc::packed(5, 4, 7, ta, tb);
      d.ldb += 1;
      d.alpha = 1.5;
      SCOPED_TRACE(d.str());
      const std::vector<double> a = pattern(extent(1, 0, ta ? d.k : d.m, d.lda), 0.2);
      const std::vector<double> b = pattern(extent(1, 0, tb ? d.n : d.k, d.ldb), 0.9);
      std::vector<double> expected(static_cast<std::size_t>(d.m * d.ldc), 0.0);
      reference_gemm(d, a, b, expected);
      const std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
      std::vector<float> c(expected.size(), 0.0f);
      Context ctx;
      ctx.backend().gemm(d, DType::f32, af.data(), bf.data(), c.data());
      for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], expected[i], kF32Tol);
    }
  }
}

// validate() must name the field that is wrong.
void expect_rejected(const GemmDesc& d, const std::string& field) {
  const std::string msg = testing::message_of<ArgumentError>([&] { d.validate(); });
  EXPECT_THAT(msg, HasSubstr(field));
  EXPECT_THAT(msg, HasSubstr("gemm("));
  EXPECT_THROW(to_column_major(d), ArgumentError);
}

TEST(GemmDesc, ValidateRejectsShortLeadingDims) {
  GemmDesc d = GemmDesc::packed(3, 4, 5);
  d.lda = 4;  // A [3, 5] needs a row stride of at least 5
  expect_rejected(d, "lda must be >= 5");
  d = GemmDesc::packed(3, 4, 5, true, false);
  d.lda = 2;  // A stored [5, 3] needs at least 3
  expect_rejected(d, "lda must be >= 3");
  d = GemmDesc::packed(3, 4, 5);
  d.ldb = 3;  // B [5, 4]
  expect_rejected(d, "ldb must be >= 4");
  d = GemmDesc::packed(3, 4, 5, false, true);
  d.ldb = 4;  // B stored [4, 5]
  expect_rejected(d, "ldb must be >= 5");
  d = GemmDesc::packed(3, 4, 5);
  d.ldc = 3;
  expect_rejected(d, "ldc must be >= 4");
  d = GemmDesc::packed(3, 4, 0);
  d.lda = 0;  // zero columns still need a stride of 1
  expect_rejected(d, "lda must be >= 1");
}

TEST(GemmDesc, ValidateRejectsBadSizesAndOverlappingOutputs) {
  GemmDesc d = GemmDesc::packed(3, 4, 5);
  d.m = -1;
  expect_rejected(d, "m, n and k must be >= 0");
  d = GemmDesc::packed(3, 4, 5);
  d.batch = 0;
  expect_rejected(d, "batch must be >= 1");
  d = GemmDesc::packed(3, 4, 5);
  d.batch = 2;
  d.stride_c = 11;  // C entries of 3 x 4 would overlap
  expect_rejected(d, "stride_c");
  d.stride_c = 12;
  EXPECT_NO_THROW(d.validate());
}

}  // namespace
}  // namespace shardscope
