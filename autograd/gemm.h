// GemmDesc: one row-major matrix product spec, turned once into the column-major call that BLAS
// wants. The CPU backend hands the result to OpenBLAS, the CUDA backend to cuBLAS.
#pragma once

#include <cstdint>
#include <string>

namespace shardscope {

// Row-major, per batch entry b < batch:
//   C[b] (m x n) = alpha * op(A[b]) (m x k) * op(B[b]) (k x n) + beta * C[b]
// op(X) is X or X^T. lda/ldb/ldc are row strides in elements of A, B, C as stored. A stride of 0
// shares that operand across the batch.
struct GemmDesc {
  bool trans_a = false;
  bool trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
  std::int64_t batch = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0;
  double beta = 0.0;

  // Packed operands: A stored [m, k] (or [k, m] when trans_a), B [k, n] (or [n, k]), C [m, n].
  static GemmDesc packed(std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a = false,
                         bool trans_b = false);
  // Throws ArgumentError naming the field when a size or leading dimension is impossible.
  void validate() const;
  // How many elements from its start each operand spans: `batch` entries `stride` apart, each
  // rows x cols as stored (transposed or not) with its leading dimension; 0 when it is empty.
  std::int64_t elements_a() const;
  std::int64_t elements_b() const;
  std::int64_t elements_c() const;
  std::string str() const;
};

// A batch of n x n squares, copied from src to dst with every element above the diagonal set to
// 0 (Backend::lower_triangle): the diagonal blocks of attention's causal products. Entry e's
// element (i, j) is at e * stride + i * ld + j of each; src and dst may be the same squares.
struct TriangleDesc {
  std::int64_t n = 0;
  std::int64_t batch = 1;
  std::int64_t ld_src = 0, stride_src = 0;
  std::int64_t ld_dst = 0, stride_dst = 0;

  // Throws ArgumentError naming the field when a size or leading dimension is impossible.
  void validate() const;
  std::string str() const;
};

// The same product as BLAS sees it in column-major order. Row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T, so the operands swap (first = B, second = A), m and n swap,
// and the transpose flags and leading dimensions carry over unchanged.
struct ColumnMajorGemm {
  bool trans_first = false;
  bool trans_second = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t ld_first = 0, ld_second = 0, ldc = 0;
  std::int64_t batch = 1;
  std::int64_t stride_first = 0, stride_second = 0, stride_c = 0;
  double alpha = 1.0;
  double beta = 0.0;
};

ColumnMajorGemm to_column_major(const GemmDesc& desc);

}  // namespace shardscope
