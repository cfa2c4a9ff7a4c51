// Bytes on the wire by the ring algorithms (Patarasuk & Yuan 2009; NCCL's bus-bandwidth
// convention), per rank, for a group of t ranks and a full tensor of N bytes:
//   all_reduce       2 (t - 1) / t * N   (N: the buffer)
//   all_gather       (t - 1) / t * N     (N: the gathered output, t chunks)
//   reduce_scatter   (t - 1) / t * N     (N: the input, t chunks)
//   all_to_all       (t - 1) / t * N     (N: one rank's send buffer; it keeps its own chunk)
//   broadcast        N                   (pipelined chain: every rank but the last forwards N)
//   barrier          0
#pragma once

#include <cstdint>

#include "autograd/observer.h"

namespace shardscope {

// N of the formula for a call of `count` elements of `element_bytes` on t ranks.
double ring_full_bytes(CollectiveKind kind, std::int64_t count, std::size_t element_bytes, int t);
// Bytes one rank sends.
double ring_bytes_sent(CollectiveKind kind, double full_bytes, int t);

}  // namespace shardscope
