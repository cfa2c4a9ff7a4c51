// The words of many consecutive Philox 4x32-10 blocks at once (dropout's masks): what
// kernels::philox4x32 gives block by block, the same bits, computed for 16 blocks side by side in
// AVX-512 registers or 8 in AVX2 registers where the CPU has them (Philox is integer multiplies
// and xors, so the vector forms are exact), block by block otherwise.
#pragma once

#include <cstddef>
#include <cstdint>

namespace shardscope::cpu {

// words[4 c + w] = word w of the Philox block first_block + c under (seed; stream, step), for
// c in [0, blocks): the counter (block low 32 bits, block high 32 bits, stream, step) and the key
// seed, as kernels::philox_bits draws them.
void philox_words(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                  std::uint32_t step, std::uint64_t seed, std::uint32_t* words);

// words[4 i + w] = word w of the Philox block blocks[i], for i in [0, count): 8 listed blocks side
// by side where philox_lanes() is 8 or more (AVX2), however short each run of consecutive blocks
// in the list (the visible keys of causal rows: a few blocks a row).
void philox_words_listed(const std::uint64_t* blocks, std::size_t count, std::uint32_t stream,
                         std::uint32_t step, std::uint64_t seed, std::uint32_t* words);

// How many blocks philox_words computes side by side on this CPU: 16 (AVX512F), 8 (AVX2) or 1;
// the environment variable SHARDSCOPE_CPU_PHILOX set to "scalar" makes it 1, to "avx2" at most 8
// (to compare the paths). Read once.
int philox_lanes();

// philox_words with `lanes` (16, 8 or 1) blocks side by side, the rest of `blocks` one at a time:
// what the tests compare. Throws StateError when this CPU lacks the instructions of `lanes`.
void philox_words_lanes(int lanes, std::uint64_t first_block, std::uint64_t blocks,
                        std::uint32_t stream, std::uint32_t step, std::uint64_t seed,
                        std::uint32_t* words);

// philox_words block by block: the plain form the vector one is tested against.
void philox_words_scalar(std::uint64_t first_block, std::uint64_t blocks, std::uint32_t stream,
                         std::uint32_t step, std::uint64_t seed, std::uint32_t* words);

}  // namespace shardscope::cpu
