#include "autograd/cpu/philox_words.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "autograd/errors.h"

#include "autograd/cpu/x86_features.h"
#include "autograd/kernels/philox.h"

#ifdef SHARDSCOPE_X86
#include <immintrin.h>
#endif

namespace shardscope::cpu {
namespace {

#ifdef SHARDSCOPE_X86
// The masked (maskz) forms with every lane kept: the unmasked ones start from an undefined vector
// that GCC 12 reports as maybe uninitialized.
constexpr __mmask8 kAll64 = 0xFF;
constexpr __mmask16 kOddLanes = 0xAAAA;

// The 32 x 32 -> 64-bit products of each lane of v with m: their low halves in lo, high in hi.
// vpmuludq multiplies the even 32-bit lanes; the odd ones are shifted down first.
__attribute__((target("avx512f"))) void mul_wide(__m512i v, __m512i m, __m512i& lo, __m512i& hi) {
  const __m512i even = _mm512_maskz_mul_epu32(kAll64, v, m);
  const __m512i odd = _mm512_maskz_mul_epu32(kAll64, _mm512_maskz_srli_epi64(kAll64, v, 32), m);
  lo = _mm512_mask_blend_epi32(kOddLanes, even, _mm512_maskz_slli_epi64(kAll64, odd, 32));
  hi = _mm512_mask_blend_epi32(kOddLanes, _mm512_maskz_srli_epi64(kAll64, even, 32), odd);
}

// Blocks first_block + c, c in [0, 16), into words[4 c + w]: kernels::philox4x32's ten rounds
// (philox_round) on 16 counters, lane c holding block first_block + c.
__attribute__((target("avx512f"))) void philox16(std::uint64_t first_block, std::uint32_t stream,
                                                 std::uint32_t step, std::uint64_t seed,
                                                 std::uint32_t* words) {
  const auto low = static_cast<std::uint32_t>(first_block);
  const auto high = static_cast<std::uint32_t>(first_block >> 32);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i low_v = _mm512_set1_epi32(static_cast<int>(low));
  __m512i c0 = _mm512_add_epi32(low_v, lanes);                 // the low word, wrapping
  const __mmask16 carry = _mm512_cmplt_epu32_mask(c0, low_v);  // ... into the high word
  const __m512i high_v = _mm512_set1_epi32(static_cast<int>(high));
  __m512i c1 = _mm512_mask_add_epi32(high_v, carry, high_v, _mm512_set1_epi32(1));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(stream));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(step));
  auto key0 = static_cast<std::uint32_t>(seed), key1 = static_cast<std::uint32_t>(seed >> 32);
  const __m512i mul0 = _mm512_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m512i mul1 = _mm512_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    __m512i lo0, hi0, lo1, hi1;
    mul_wide(c0, mul0, lo0, hi0);
    mul_wide(c2, mul1, lo1, hi1);
    const __m512i k0 = _mm512_set1_epi32(static_cast<int>(key0));
    const __m512i k1 = _mm512_set1_epi32(static_cast<int>(key1));
    c0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1), k0);
    c1 = lo1;
    c2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3), k1);
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  alignas(64) std::uint32_t v[4][16];
  _mm512_store_si512(v[0], c0);
  _mm512_store_si512(v[1], c1);
  _mm512_store_si512(v[2], c2);
  _mm512_store_si512(v[3], c3);
  for (int c = 0; c < 16; ++c) {
    for (int w = 0; w < 4; ++w) words[4 * c + w] = v[w][c];
  }
}

// The 32 x 32 -> 64-bit products of each lane of v with m, as mul_wide above, on 8 lanes.
__attribute__((target("avx2"))) void mul_wide8(__m256i v, __m256i m, __m256i& lo, __m256i& hi) {
  const __m256i even = _mm256_mul_epu32(v, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(v, 32), m);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
}

// philox16 on 8 counters in AVX2 registers, lane c holding the block whose low word is lane c of
// c0 and high word lane c of c1.
__attribute__((target("avx2"))) inline void philox8_blocks(__m256i c0, __m256i c1,
                                                           std::uint32_t stream, std::uint32_t step,
                                                           std::uint64_t seed,
                                                           std::uint32_t* words) {
  __m256i c2 = _mm256_set1_epi32(static_cast<int>(stream));
  __m256i c3 = _mm256_set1_epi32(static_cast<int>(step));
  auto key0 = static_cast<std::uint32_t>(seed), key1 = static_cast<std::uint32_t>(seed >> 32);
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  for (int round = 0; round < 10; ++round) {
    __m256i lo0, hi0, lo1, hi1;
    mul_wide8(c0, mul0, lo0, hi0);
    mul_wide8(c2, mul1, lo1, hi1);
    const __m256i k0 = _mm256_set1_epi32(static_cast<int>(key0));
    const __m256i k1 = _mm256_set1_epi32(static_cast<int>(key1));
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), k0);
    c1 = lo1;
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), k1);
    c3 = lo0;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  // Word w of lane c to words[4 c + w]: a 4 x 8 transpose, blocks c and c + 4 in the two halves
  // of each register until the last step.
  const __m256i t0 = _mm256_unpacklo_epi32(c0, c1), t1 = _mm256_unpackhi_epi32(c0, c1);
  const __m256i t2 = _mm256_unpacklo_epi32(c2, c3), t3 = _mm256_unpackhi_epi32(c2, c3);
  const __m256i b04 = _mm256_unpacklo_epi64(t0, t2), b15 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i b26 = _mm256_unpacklo_epi64(t1, t3), b37 = _mm256_unpackhi_epi64(t1, t3);
  auto* out = reinterpret_cast<__m256i*>(words);
  _mm256_storeu_si256(out, _mm256_permute2x128_si256(b04, b15, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(b26, b37, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(b04, b15, 0x31));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(b26, b37, 0x31));
}
// philox8_blocks on blocks first_block + c, c in [0, 8).
__attribute__((target("avx2"))) void philox8(std::uint64_t first_block, std::uint32_t stream,
                                             std::uint32_t step, std::uint64_t seed,
                                             std::uint32_t* words) {
  const auto low = static_cast<std::uint32_t>(first_block);
  const auto high = static_cast<std::uint32_t>(first_block >> 32);
  const __m256i low_v = _mm256_set1_epi32(static_cast<int>(low));
  const __m256i c0 = _mm256_add_epi32(low_v, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));  // wraps
  // The carry into the high word: lanes where c0 < low unsigned (signed compare, signs flipped)
  // hold -1, which subtracted adds 1.
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i carry =
      _mm256_cmpgt_epi32(_mm256_xor_si256(low_v, sign), _mm256_xor_si256(c0, sign));
  philox8_blocks(c0, _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(high)), carry), stream,
                 step, seed, words);
}
// philox8_blocks on each 8 blocks listed at `blocks`, in one loop over the list (the count's last
// count % 8 blocks left to the caller).
__attribute__((target("avx2"))) void philox8_listed(const std::uint64_t* blocks, std::size_t count,
                                                    std::uint32_t stream, std::uint32_t step,
                                                    std::uint64_t seed, std::uint32_t* words) {
  for (std::size_t i = 0; i + 8 <= count; i += 8) {
    alignas(32) std::uint32_t low[8], high[8];
    for (int c = 0; c < 8; ++c) {
      low[c] = static_cast<std::uint32_t>(blocks[i + static_cast<std::size_t>(c)]);
      high[c] = static_cast<std::uint32_t>(blocks[i + static_cast<std::size_t>(c)] >> 32);
    }
    philox8_blocks(_mm256_load_si256(reinterpret_cast<const __m256i*>(low)),
                   _mm256_load_si256(reinterpret_cast<const __m256i*>(high)), stream, step, seed,
                   words + 4 * i);
  }
}
#endif

}  // namespace

void philox_words_scalar(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                         std::uint32_t step, std::uint64_t seed, std::uint32_t* words) {
  for (std::uint64_t c = 0; c < blocks; ++c) {
    const std::uint64_t block = first_block + c;
    const kernels::Philox4 bits =
        kernels::philox4x32(static_cast<std::uint32_t>(block),
                            static_cast<std::uint32_t>(block >> 32), stream, step, seed);
    std::memcpy(words + 4 * c, bits.v, sizeof bits.v);
  }
}

int philox_lanes() {
  static const int lanes = [] {
    const char* choice = std::getenv("SHARDSCOPE_CPU_PHILOX");
    if (choice && std::strcmp(choice, "scalar") == 0) return 1;
    if (cpu_has_avx512f() && !(choice && std::strcmp(choice, "avx2") == 0)) return 16;
    return cpu_has_avx2() ? 8 : 1;
  }();
  return lanes;
}

void philox_words_lanes(int lanes, std::uint64_t first_block, std::uint64_t blocks,
                        std::uint32_t stream, std::uint32_t step, std::uint64_t seed,
                        std::uint32_t* words) {
  // (cpu_has_* are false off x86-64, where only 1 runs.)
  const bool runs =
      lanes == 1 || (lanes == 16 && cpu_has_avx512f()) || (lanes == 8 && cpu_has_avx2());
  if (!runs) {
    throw StateError("philox_words: " + std::to_string(lanes) +
                     " blocks side by side asked for; this CPU can run " +
                     std::string(cpu_has_avx512f() ? "16, 8 or 1"
                                 : cpu_has_avx2()  ? "8 or 1"
                                                   : "1") +
                     " (16: AVX512F, 8: AVX2)");
  }
  std::uint64_t c = 0;
#ifdef SHARDSCOPE_X86
  if (lanes == 16) {
    for (; c + 16 <= blocks; c += 16) philox16(first_block + c, stream, step, seed, words + 4 * c);
  } else if (lanes == 8) {
    for (; c + 8 <= blocks; c += 8) philox8(first_block + c, stream, step, seed, words + 4 * c);
  }
#endif
  philox_words_scalar(first_block + c, blocks - c, stream, step, seed, words + 4 * c);
}

void philox_words(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                  std::uint32_t step, std::uint64_t seed, std::uint32_t* words) {
  philox_words_lanes(philox_lanes(), first_block, blocks, stream, step, seed, words);
}

void philox_words_listed(const std::uint64_t* blocks, std::size_t count, std::uint32_t stream,
                         std::uint32_t step, std::uint64_t seed, std::uint32_t* words) {
  std::size_t i = 0;
#ifdef SHARDSCOPE_X86
  if (philox_lanes() >= 8) {
    philox8_listed(blocks, count, stream, step, seed, words);
    i = count / 8 * 8;
  }
#endif
  for (; i < count; ++i) philox_words_scalar(blocks[i], 1, stream, step, seed, words + 4 * i);
}

}  // namespace shardscope::cpu
