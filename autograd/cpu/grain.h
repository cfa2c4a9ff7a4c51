// How many elements a CPU backend loop gives a thread at least.
#pragma once

#include <cstdint>

namespace shardscope::cpu {

// The fewest elements worth a thread: cheap loops (a load, an operation and a store per element)
// and costly ones (tanh, Philox), so that a thread's share outweighs waking it.
constexpr std::int64_t kCheapGrain = std::int64_t{1} << 15;
constexpr std::int64_t kCostlyGrain = std::int64_t{1} << 12;

// Multiply-adds worth a thread in a piece of one GEMM: each piece packs the whole of the operand it
// shares with the others, so a piece must be large for that to pay.
constexpr std::int64_t kGemmGrain = std::int64_t{1} << 20;
// Multiply-adds worth a thread in a batched GEMM, whose entries are separate products (nothing
// packed twice): a thread's share of entries needs only to outweigh waking it. Attention's causal
// pieces at s=128 (32 x 32 x 32 per entry) ran on one thread with kGemmGrain.
constexpr std::int64_t kGemmEntriesGrain = std::int64_t{1} << 17;

}  // namespace shardscope::cpu
