// The words of many consecutive Philox 4x32-10 blocks at once (dropout's masks): what
// kernels::philox4x32 gives block by block, the same bits, computed for 16 blocks side by side in
// AVX-512 registers where the CPU has them (Philox is integer multiplies and xors, so the vector
// form is exact), block by block otherwise.
#pragma once

#include <cstdint>

namespace shardscope::cpu {

// words[4 c + w] = word w of the Philox block first_block + c under (seed; stream, step), for
// c in [0, blocks): the counter (block low 32 bits, block high 32 bits, stream, step) and the key
// seed, as kernels::philox_bits draws them.
void philox_words(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                  std::uint32_t step, std::uint64_t seed, std::uint32_t* words);

// Whether philox_words runs 16 blocks at a time (AVX512F), unless the environment variable
// SHARDSCOPE_CPU_PHILOX is "scalar" (to compare the two). Read once.
bool philox_vectorized();

// philox_words block by block: the plain form the vector one is tested against.
void philox_words_scalar(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                         std::uint32_t step, std::uint64_t seed, std::uint32_t* words);

}  // namespace shardscope::cpu
