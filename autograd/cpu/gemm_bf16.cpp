// The bf16 product on AVX512-BF16 (gemm_bf16.h). Blocked as BLAS kernels are: op(B) is packed
// once into panels of kNr columns, each k pair of a column side by side (what vdpbf16ps multiplies
// with a broadcast pair of A); each piece of rows packs its op(A) rows into tiles of kMr rows, one
// 32-bit pair per row and k pair; an kMr x kNr tile of f32 sums lives in 16 registers while a
// block of k pairs streams through. Only the kernel is compiled for AVX-512 (a target attribute),
// so nothing else in the library needs those instructions.
#include "autograd/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "autograd/errors.h"
#include "autograd/kernels/half.h"

#include "autograd/cpu/grain.h"
#include "autograd/cpu/x86_features.h"

#ifdef SHARDSCOPE_X86
#include <immintrin.h>
#define SHARDSCOPE_BF16_DOT 1
#endif

namespace shardscope::cpu {
namespace {

constexpr std::int64_t kMr = 8;   // rows of a tile: 16 accumulators of 16 lanes
constexpr std::int64_t kNr = 32;  // columns of a tile (two registers of f32 lanes)
constexpr std::int64_t kBlockPairs = kBf16BlockK / 2;
// Rows of C whose sums are computed together (a multiple of kMr).
constexpr std::int64_t kRowChunk = 128;

std::int64_t round_up(std::int64_t v, std::int64_t to) {
  return (v + to - 1) / to * to;
}

#ifdef SHARDSCOPE_BF16_DOT
// One kMr x kNr tile: acc (row stride ldacc) += A tile x B panel over `pairs` k pairs. a: pairs x
// kMr 32-bit pairs; b: pairs x kNr 32-bit pairs. The 16 sums are named one by one so that they stay
// in registers (an array of them, indexed in a loop, went through the stack at -O2).
__attribute__((target("avx512f,avx512bf16"))) void tile(const std::uint32_t* a,
                                                        const std::uint32_t* b, std::int64_t pairs,
                                                        float* acc, std::int64_t ldacc) {
  static_assert(kMr == 8 && kNr == 32, "the tile below is written for 8 x 32");
#define SHARDSCOPE_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define SHARDSCOPE_LOAD(r)                           \
  __m512 c##r##0 = _mm512_loadu_ps(acc + (r)*ldacc); \
  __m512 c##r##1 = _mm512_loadu_ps(acc + (r)*ldacc + 16);
#define SHARDSCOPE_DOT(r)                                                       \
  {                                                                             \
    const __m512bh pair = (__m512bh)_mm512_set1_epi32(static_cast<int>(pa[r])); \
    c##r##0 = _mm512_dpbf16_ps(c##r##0, pair, b0);                              \
    c##r##1 = _mm512_dpbf16_ps(c##r##1, pair, b1);                              \
  }
#define SHARDSCOPE_STORE(r)                   \
  _mm512_storeu_ps(acc + (r)*ldacc, c##r##0); \
  _mm512_storeu_ps(acc + (r)*ldacc + 16, c##r##1);
  SHARDSCOPE_EACH_ROW(SHARDSCOPE_LOAD)
  for (std::int64_t p = 0; p < pairs; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * kNr);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(b + p * kNr + 16);
    const std::uint32_t* pa = a + p * kMr;
    SHARDSCOPE_EACH_ROW(SHARDSCOPE_DOT)
  }
  SHARDSCOPE_EACH_ROW(SHARDSCOPE_STORE)
#undef SHARDSCOPE_STORE
#undef SHARDSCOPE_DOT
#undef SHARDSCOPE_LOAD
#undef SHARDSCOPE_EACH_ROW
}
#endif

// op(X) of one entry: X stored [rows, cols] with leading dim ld, or transposed ([cols, rows]).
struct Operand {
  const std::uint16_t* data;
  std::int64_t ld, stride;
  bool trans;
  const std::uint16_t* entry(std::int64_t e) const { return data + e * stride; }
};

// The two bf16 at x[0] and x[1] as one 32-bit pair (the first in the low half).
std::uint32_t pair_at(const std::uint16_t* x) {
  std::uint32_t v;
  std::memcpy(&v, x, sizeof v);
  return v;
}
std::uint32_t pair_of(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// Writes op(X)'s pairs (rows [row0, row0 + rows), k pairs p = 0 .. pairs - 1; op(X) is
// (rows of X) x k) to out[p * width + r], for `out` zeroed beforehand (what lies past k and past
// the rows stays zero). X stored [rows, k] holds a pair side by side; stored [k, rows] (trans) the
// two halves are a leading dim apart, and a row's pairs are read p by p across it.
void pack_pairs(const Operand& x, const std::uint16_t* base, std::int64_t row0, std::int64_t rows,
                std::int64_t k, std::int64_t width, std::uint32_t* out) {
  const std::int64_t full = k / 2;  // pairs with both halves
  if (!x.trans) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint16_t* src = base + (row0 + r) * x.ld;
      for (std::int64_t p = 0; p < full; ++p) out[p * width + r] = pair_at(src + 2 * p);
      if (k % 2) out[full * width + r] = pair_of(src[k - 1], 0);
    }
    return;
  }
  for (std::int64_t p = 0; p < full; ++p) {
    const std::uint16_t* lo = base + 2 * p * x.ld + row0;
    const std::uint16_t* hi = lo + x.ld;
    for (std::int64_t r = 0; r < rows; ++r) out[p * width + r] = pair_of(lo[r], hi[r]);
  }
  if (k % 2) {
    const std::uint16_t* lo = base + (k - 1) * x.ld + row0;
    for (std::int64_t r = 0; r < rows; ++r) out[full * width + r] = pair_of(lo[r], 0);
  }
}

// op(B) of entry e, k x n, as panels of kNr columns: panel j, pair p, column c at 32-bit slot
// (j * pairs + p) * kNr + c, zero past k and n (`out` zeroed beforehand; an entry of a batch
// writes the same slots as the one before it, so the padding stays zero). A column of op(B) is a
// row of op(B)^T, whose storage is B's with the transpose flag flipped.
void pack_b(const Operand& b, std::int64_t e, std::int64_t k, std::int64_t n, std::int64_t pairs,
            std::int64_t panel_begin, std::int64_t panel_end, std::uint32_t* out) {
  const Operand columns{b.data, b.ld, b.stride, !b.trans};  // op(B)^T: n x k
  for (std::int64_t j = panel_begin; j < panel_end; ++j) {
    pack_pairs(columns, b.entry(e), j * kNr, std::min(kNr, n - j * kNr), k, kNr,
               out + j * pairs * kNr);
  }
}

// Rows [row_begin, row_end) of entry e's product into acc (rows padded to kMr, ldacc columns,
// zeroed), with packed_a as room for A's tiles.
void rows_product(const Operand& a, std::int64_t e, std::int64_t k, std::int64_t row_begin,
                  std::int64_t row_end, const std::uint32_t* packed_b, std::int64_t pairs,
                  std::int64_t panels, float* acc, std::int64_t ldacc,
                  std::vector<std::uint32_t>& packed_a) {
  const std::int64_t tiles = round_up(row_end - row_begin, kMr) / kMr;
  // A's tiles, pair-major: tile t, pair p, row r at (t * pairs + p) * kMr + r.
  packed_a.assign(static_cast<std::size_t>(tiles * pairs * kMr), 0);
  for (std::int64_t t = 0; t < tiles; ++t) {
    const std::int64_t row0 = row_begin + t * kMr;
    pack_pairs(a, a.entry(e), row0, std::min(kMr, row_end - row0), k, kMr,
               packed_a.data() + t * pairs * kMr);
  }
#ifdef SHARDSCOPE_BF16_DOT
  for (std::int64_t p0 = 0; p0 < pairs; p0 += kBlockPairs) {
    const std::int64_t block = std::min(kBlockPairs, pairs - p0);
    for (std::int64_t j = 0; j < panels; ++j) {
      const std::uint32_t* b = packed_b + (j * pairs + p0) * kNr;
      for (std::int64_t t = 0; t < tiles; ++t) {
        tile(packed_a.data() + (t * pairs + p0) * kMr, b, block, acc + t * kMr * ldacc + j * kNr,
             ldacc);
      }
    }
  }
#else
  (void)packed_b, (void)panels, (void)acc, (void)ldacc;
#endif
}

#ifdef SHARDSCOPE_BF16_DOT
// The masked (maskz) forms with every lane kept: the unmasked ones start from an undefined vector
// that GCC 12 reports as maybe uninitialized.
constexpr __mmask16 kAll = 0xFFFF;
__attribute__((target("avx512f"))) __m512i srl16(__m512i v) {
  return _mm512_maskz_srli_epi32(kAll, v, 16);
}

// 16 f32 to bf16 bits, rounded to nearest even with NaN kept quiet: bf16_bits_from_float
// (kernels/half.h) lane by lane, the same integer steps, so the same bits.
__attribute__((target("avx512f,avx512bw"))) __m256i round_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i kept_lsb = _mm512_and_si512(srl16(u), _mm512_set1_epi32(1));
  const __m512i rounded =
      srl16(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), kept_lsb));
  const __m512i quiet = _mm512_or_si512(srl16(u), _mm512_set1_epi32(0x40));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_maskz_cvtepi32_epi16(kAll, _mm512_mask_mov_epi32(rounded, nan, quiet));
}

// C's elements [0, columns) of rows [row_begin, row_end) of entry e from their sums: alpha acc +
// beta C in f32 (a product, then a sum: never fused), rounded once; 16 at a time here, `columns`
// a multiple of 16.
__attribute__((target("avx512f,avx512bw"))) void write_vectors(
    const GemmDesc& d, std::int64_t e, std::int64_t row_begin, std::int64_t row_end,
    std::int64_t columns, const float* acc, std::int64_t ldacc, std::uint16_t* c) {
  const __m512 alphas = _mm512_set1_ps(static_cast<float>(d.alpha));
  const __m512 betas = _mm512_set1_ps(static_cast<float>(d.beta));
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    const float* sums = acc + (i - row_begin) * ldacc;
    std::uint16_t* out = c + e * d.stride_c + i * d.ldc;
    for (std::int64_t j = 0; j < columns; j += 16) {
      __m512 v = _mm512_mul_ps(alphas, _mm512_loadu_ps(sums + j));
      if (d.beta != 0.0) {
        const __m256i old = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(out + j));
        const __m512 wide = _mm512_castsi512_ps(
            _mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, old), 16));
        v = _mm512_add_ps(v, _mm512_mul_ps(betas, wide));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), round_to_bf16(v));
    }
  }
}
#endif

// C's rows [row_begin, row_end) of entry e from their sums: alpha acc + beta C, each element
// computed in f32 and rounded once; whole vectors by write_vectors, the rest one by one in plain
// code (compiled without FMA, so that no contraction changes a bit against the vectors).
void write_rows(const GemmDesc& d, std::int64_t e, std::int64_t row_begin, std::int64_t row_end,
                const float* acc, std::int64_t ldacc, std::uint16_t* c) {
  std::int64_t done = 0;
#ifdef SHARDSCOPE_BF16_DOT
  done = d.n / 16 * 16;
  write_vectors(d, e, row_begin, row_end, done, acc, ldacc, c);
#endif
  const auto alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  for (std::int64_t i = row_begin; i < row_end; ++i) {
    const float* sums = acc + (i - row_begin) * ldacc;
    std::uint16_t* out = c + e * d.stride_c + i * d.ldc;
    for (std::int64_t j = done; j < d.n; ++j) {
      float v = alpha * sums[j];
      if (d.beta != 0.0) v += beta * static_cast<float>(kernels::BFloat16::from_bits(out[j]));
      out[j] = kernels::BFloat16(v).bits;
    }
  }
}

}  // namespace

bool bf16_dot_products() {
#ifdef SHARDSCOPE_BF16_DOT
  static const bool available = [] {
    const char* choice = std::getenv("SHARDSCOPE_CPU_BF16_GEMM");
    if (choice && std::strcmp(choice, "f32") == 0) return false;
    return cpu_has_avx512_bf16();
  }();
  return available;
#else
  return false;
#endif
}

void gemm_bf16_dot(const GemmDesc& d, const std::uint16_t* a, const std::uint16_t* b,
                   std::uint16_t* c, RowThreads& threads) {
  if (!bf16_dot_products()) {
    throw StateError("gemm_bf16_dot: this CPU or build has no AVX512-BF16 dot products");
  }
  if (d.m == 0 || d.n == 0) return;
  const Operand op_a{a, d.lda, d.stride_a, d.trans_a}, op_b{b, d.ldb, d.stride_b, d.trans_b};
  const std::int64_t pairs = std::max<std::int64_t>(round_up(d.k, 2) / 2, 1);
  const std::int64_t panels = round_up(d.n, kNr) / kNr, ldacc = panels * kNr;
  const std::int64_t packed_b_size = panels * pairs * kNr;  // 32-bit pairs
  const std::int64_t work = std::max<std::int64_t>(d.m * d.n * std::max<std::int64_t>(d.k, 1), 1);
  // Rows kRowChunk at a time, so that their sums and A's packed tiles are reused from cache (a
  // piece's whole sums went to memory and back for every k block): each element still sums its
  // k blocks in order, so the same bits.
  auto entry = [&](std::int64_t e, const std::uint32_t* packed_b, std::int64_t row_begin,
                   std::int64_t row_end) {
    std::vector<float> acc;
    std::vector<std::uint32_t> packed_a;
    for (std::int64_t r0 = row_begin; r0 < row_end; r0 += kRowChunk) {
      const std::int64_t r1 = std::min(r0 + kRowChunk, row_end);
      acc.assign(static_cast<std::size_t>(round_up(r1 - r0, kMr) * ldacc), 0.0f);
      rows_product(op_a, e, d.k, r0, r1, packed_b, pairs, panels, acc.data(), ldacc, packed_a);
      write_rows(d, e, r0, r1, acc.data(), ldacc, c);
    }
  };
  if (d.batch > 1) {  // whole entries per thread, each packing its own B unless all share one
    std::vector<std::uint32_t> shared_b;
    if (d.stride_b == 0) {
      shared_b.resize(static_cast<std::size_t>(packed_b_size));
      pack_b(op_b, 0, d.k, d.n, pairs, 0, panels, shared_b.data());
    }
    threads.parallel_for(d.batch, std::max<std::int64_t>(kGemmEntriesGrain / work, 1),
                         [&](std::int64_t begin, std::int64_t end) {
                           std::vector<std::uint32_t> own_b(shared_b.empty() ? packed_b_size : 0);
                           for (std::int64_t e = begin; e < end; ++e) {
                             if (shared_b.empty())
                               pack_b(op_b, e, d.k, d.n, pairs, 0, panels, own_b.data());
                             entry(e, shared_b.empty() ? own_b.data() : shared_b.data(), 0, d.m);
                           }
                         });
    return;
  }
  // One product: B packed once (its panels split over the threads), then pieces of whole tiles
  // of rows.
  std::vector<std::uint32_t> packed_b(static_cast<std::size_t>(packed_b_size));
  threads.parallel_for(panels, std::max<std::int64_t>(kGemmGrain / (pairs * kNr * 64), 1),
                       [&](std::int64_t begin, std::int64_t end) {
                         pack_b(op_b, 0, d.k, d.n, pairs, begin, end, packed_b.data());
                       });
  const std::int64_t tiles = round_up(d.m, kMr) / kMr;
  const std::int64_t tile_work = std::max<std::int64_t>(work / tiles, 1);
  threads.parallel_for(tiles, std::max<std::int64_t>(kGemmGrain / tile_work, 1),
                       [&](std::int64_t begin, std::int64_t end) {
                         entry(0, packed_b.data(), begin * kMr, std::min(end * kMr, d.m));
                       });
}

}  // namespace shardscope::cpu
