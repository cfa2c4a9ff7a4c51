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

#include <vector>

#include "autograd/observer.h"
#include "parallel/comm/comm_log.h"
#include "parallel/layers/layer_config.h"

namespace shardscope {

// N of the formula for a call of `count` elements of `element_bytes` on t ranks.
double ring_full_bytes(CollectiveKind kind, std::int64_t count, std::size_t element_bytes, int t);
// Bytes one rank sends.
double ring_bytes_sent(CollectiveKind kind, double full_bytes, int t);

// What one forward and backward of the layer sends per rank (purposes activation and
// param_grad), derived in docs/derivations.md:
//   tp       forward 2 all-reduce, backward 2 all-reduce of the [s, b, h] activation
//   tp-sp    forward 2 all-gather + 2 reduce-scatter; backward 2 reduce-scatter + 2 all-gather
//            (+ 2 all-gathers re-gathering the linear inputs unless they are kept); then the
//            gradients of the replicated parameters (norms, row-parallel biases) all-reduced
//   ulysses  forward and backward 4 all-to-all each (q, k, v to heads; context back; keys and
//            values of max(g, t) heads under GQA); then every parameter gradient all-reduced
// The counts come from the declaration (layer_decl.h): a collective per column- or row-parallel
// linear, an all-reduce per parameter whose gradient is a partial sum (decl::partial_grad).
// Full recomputation (LayerConfig::recompute) doubles the forward lines: backward runs the
// layer's forward again (selective recomputation has no collective in what it recomputes).
// A stack of L layers has each layer's lines, under its index.
std::vector<CommLine> comm_model(const LayerConfig& config, bool keep_gathered_input);

}  // namespace shardscope
