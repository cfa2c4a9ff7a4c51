// Lab 2: all-reduce on a ring, as a reduce-scatter followed by an all-gather, built from the
// point-to-point send and recv of a Communicator (ranks as threads: ThreadComm).
//
// Every function runs on every rank of `comm` at once: t = comm.size() ranks, this one
// r = comm.rank(). All ranks call it with vectors of the same size. Use only comm.send and
// comm.recv (no comm.run: that is the built-in collective this lab rebuilds).
//
//   comm.send(data, bytes, peer)  copies `bytes` bytes to `peer`'s mailbox and returns at once
//                                 (buffered: a ring where every rank sends first cannot deadlock)
//   comm.recv(data, bytes, peer)  waits for the oldest message from `peer`, which must have
//                                 exactly `bytes` bytes
//
// Chunks: a buffer of N elements is cut into t chunks of n = N / t elements; chunk c is elements
// [c * n, (c + 1) * n). The tests use N divisible by t. (Stretch task: uneven chunks, see the
// README.)
#pragma once

#include <vector>

#include "parallel/comm/communicator.h"

namespace shardscope::labs {

// Reduce-scatter: returns chunk r (n = N / t elements) of the elementwise sum over all ranks of
// `input` (N elements), as ProcessGroup::reduce_scatter does. Ring: t - 1 steps; at each step a
// rank sends one chunk of its running sums to its right neighbour (r + 1) % t, receives one chunk
// from its left neighbour (r - 1 + t) % t and adds it into its running sum of that chunk.
// Sends (t - 1) messages of n elements: (t - 1) / t * N elements per rank.
std::vector<double> ring_reduce_scatter(Communicator& comm, const std::vector<double>& input);

// All-gather: returns t * n elements, rank i's `chunk` (n elements) at [i * n, (i + 1) * n), as
// ProcessGroup::all_gather does. Ring: t - 1 steps; at each step a rank sends to its right
// neighbour the chunk it received in the step before (its own at the first step).
// Sends (t - 1) messages of n elements: (t - 1) / t * N elements per rank, with N = t * n.
std::vector<double> ring_all_gather(Communicator& comm, const std::vector<double>& chunk);

// All-reduce: returns the elementwise sum over all ranks of `input` (N elements), as
// ProcessGroup::all_reduce does: the reduce-scatter, then the all-gather of its result.
// Sends 2 (t - 1) messages of N / t elements: 2 (t - 1) / t * N elements per rank.
std::vector<double> ring_all_reduce(Communicator& comm, const std::vector<double>& input);

}  // namespace shardscope::labs
