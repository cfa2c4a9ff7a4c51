// How many elements a CPU backend loop gives a thread at least.
#pragma once

#include <cstdint>

namespace shardscope::cpu {

// The fewest elements worth a thread: cheap loops (a load, an operation and a store per element)
// and costly ones (tanh, Philox), so that a thread's share outweighs waking it.
constexpr std::int64_t kCheapGrain = std::int64_t{1} << 15;
constexpr std::int64_t kCostlyGrain = std::int64_t{1} << 12;

}  // namespace shardscope::cpu
