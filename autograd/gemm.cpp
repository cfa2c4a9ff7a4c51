// GemmDesc validation and the row-major to column-major translation.
#include "autograd/gemm.h"

#include <algorithm>

#include "autograd/errors.h"

namespace shardscope {

GemmDesc GemmDesc::packed(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
                          bool trans_b) {
  GemmDesc d;
  d.trans_a = trans_a;
  d.trans_b = trans_b;
  d.m = m;
  d.n = n;
  d.k = k;
  d.lda = trans_a ? m : k;
  d.ldb = trans_b ? k : n;
  d.ldc = n;
  d.stride_a = m * k;
  d.stride_b = k * n;
  d.stride_c = m * n;
  return d;
}

namespace {
std::int64_t operand_elements(std::int64_t rows, std::int64_t cols, std::int64_t ld,
                              std::int64_t batch, std::int64_t stride) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}
}  // namespace

std::int64_t GemmDesc::elements_a() const {
  return trans_a ? operand_elements(k, m, lda, batch, stride_a)
                 : operand_elements(m, k, lda, batch, stride_a);
}
std::int64_t GemmDesc::elements_b() const {
  return trans_b ? operand_elements(n, k, ldb, batch, stride_b)
                 : operand_elements(k, n, ldb, batch, stride_b);
}
std::int64_t GemmDesc::elements_c() const {
  return operand_elements(m, n, ldc, batch, stride_c);
}

std::string GemmDesc::str() const {
  return std::string("gemm(") + (trans_a ? "T" : "N") + (trans_b ? "T" : "N") +
         ", m=" + std::to_string(m) + ", n=" + std::to_string(n) + ", k=" + std::to_string(k) +
         ", lda=" + std::to_string(lda) + ", ldb=" + std::to_string(ldb) +
         ", ldc=" + std::to_string(ldc) + ", batch=" + std::to_string(batch) + ")";
}

void GemmDesc::validate() const {
  auto fail = [&](const std::string& what) { throw ArgumentError(str() + ": " + what); };
  if (m < 0 || n < 0 || k < 0) fail("m, n and k must be >= 0");
  if (batch < 1) fail("batch must be >= 1");
  // Row-major: a stored matrix of `cols` columns needs a row stride of at least `cols` (and 1).
  const std::int64_t a_cols = trans_a ? m : k;
  const std::int64_t b_cols = trans_b ? k : n;
  if (lda < std::max<std::int64_t>(1, a_cols)) {
    fail("lda must be >= " + std::to_string(std::max<std::int64_t>(1, a_cols)));
  }
  if (ldb < std::max<std::int64_t>(1, b_cols)) {
    fail("ldb must be >= " + std::to_string(std::max<std::int64_t>(1, b_cols)));
  }
  if (ldc < std::max<std::int64_t>(1, n)) {
    fail("ldc must be >= " + std::to_string(std::max<std::int64_t>(1, n)));
  }
  if (batch > 1 && stride_c < m * ldc)
    fail("stride_c must be >= m * ldc so outputs do not overlap");
}

std::string TriangleDesc::str() const {
  return "lower_triangle(n=" + std::to_string(n) + ", batch=" + std::to_string(batch) +
         ", ld_src=" + std::to_string(ld_src) + ", ld_dst=" + std::to_string(ld_dst) + ")";
}

void TriangleDesc::validate() const {
  auto fail = [&](const std::string& what) { throw ArgumentError(str() + ": " + what); };
  if (n < 0) fail("n must be >= 0");
  if (batch < 1) fail("batch must be >= 1");
  if (ld_src < std::max<std::int64_t>(1, n)) fail("ld_src must be >= n");
  if (ld_dst < std::max<std::int64_t>(1, n)) fail("ld_dst must be >= n");
  if (batch > 1 && stride_dst < n * ld_dst) fail("stride_dst must be >= n * ld_dst");
}

ColumnMajorGemm to_column_major(const GemmDesc& d) {
  d.validate();
  ColumnMajorGemm c;
  c.trans_first = d.trans_b;
  c.trans_second = d.trans_a;
  c.m = d.n;
  c.n = d.m;
  c.k = d.k;
  c.ld_first = d.ldb;
  c.ld_second = d.lda;
  c.ldc = d.ldc;
  c.batch = d.batch;
  c.stride_first = d.stride_b;
  c.stride_second = d.stride_a;
  c.stride_c = d.stride_c;
  c.alpha = d.alpha;
  c.beta = d.beta;
  return c;
}

}  // namespace shardscope
