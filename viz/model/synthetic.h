// A synthetic trace: what a long tp-sp run (sequence-parallel when ranks > 1, single device for
// one rank) would record, made up without running anything, so the view model's folding and its
// frame time can be tested and benchmarked at sizes a real run in a test would take too long to
// produce. Its events follow docs/trace-format.md: per rank and step a step mark, then the
// layer's forward op slices and backward node slices in order, the collectives each issues
// nested in time inside its slice and synchronised across ranks (a collective ends when the
// slowest rank has entered it), and a memory counter after every slice.
#pragma once

#include <cstddef>
#include <cstdint>

#include "io/trace_reader.h"

namespace shardscope::viz {

// `ranks` >= 1 ranks, exactly `events` events (the earliest of as many whole steps as it takes),
// by start time; the same seed gives the same trace. meta.config is a valid layer configuration
// (config_of_trace reads it). Throws ArgumentError when ranks < 1.
TraceFile synthetic_trace(int ranks, std::size_t events, std::uint64_t seed);

}  // namespace shardscope::viz
