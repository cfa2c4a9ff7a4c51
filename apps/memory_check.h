// Before a run starts: whether the memory the models say it needs (estimate_run_memory) is there.
#pragma once

#include <optional>
#include <string>

#include "apps/run.h"

namespace shardscope {

// MemAvailable of a /proc/meminfo text, in bytes; nullopt when it has none.
std::optional<double> mem_available_bytes(const std::string& meminfo);
// This machine's MemAvailable (/proc/meminfo); nullopt where it cannot be read.
std::optional<double> mem_available_bytes();

// ArgumentError (exit 2, one line naming the estimate and the flags that shrink it) when the host
// memory one process of the run needs at least exceeds `available` bytes. Runs on CUDA devices
// keep their tensors there and are not checked; nor is anything when `available` is unknown.
void check_memory_fits(const RunOptions& options, std::optional<double> available);

}  // namespace shardscope
