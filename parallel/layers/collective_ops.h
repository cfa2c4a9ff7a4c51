// The conjugate collective ops of tensor and sequence parallelism, each one autograd op whose
// forward and backward read side by side (Megatron-LM's mappings, named after what they do).
// They save nothing for backward. t is the group size.
//
//   op                   forward                          backward          placement
//   copy_to_tp (f)       identity                         all-reduce        Replicate -> Replicate
//   reduce_from_tp (g)   all-reduce                       identity          Partial -> Replicate
//   gather_seq           all-gather dim 0                 reduce-scatter    Shard(0) -> Replicate
//   reduce_scatter_seq   reduce-scatter dim 0             all-gather        Partial -> Shard(0)
//   split_last           keep this rank's last-dim slice  all-gather        Replicate -> Shard(-1)
//   gather_last          all-gather the last dim          keep own slice    Shard(-1) -> Replicate
//   seq_to_heads         all-to-all [s/t,b,a,d]->[s,b,a/t,d]  heads_to_seq  Shard(0) -> Shard(2)
//   heads_to_seq         all-to-all [s,b,a/t,d]->[s/t,b,a,d]  seq_to_heads  Shard(2) -> Shard(0)
//
// The gradient conventions are Megatron's. Downstream of copy_to_tp and gather_seq the ranks
// compute different things (a column-parallel linear), so the gradient arriving on each rank is
// its part of a sum, and the backward all-reduces or reduce-scatters it. Downstream of
// reduce_from_tp and gather_last every rank computes the same thing, so the gradient arriving is
// already the whole gradient, and the backward passes it on (or keeps this rank's slice).
#pragma once

#include "parallel/comm/process_group.h"
#include "parallel/layers/placement.h"
#include "parallel/layers/planted_bug.h"

namespace shardscope {

ParallelTensor copy_to_tp(ProcessGroup& group, const ParallelTensor& x);
// The same with `bug`, which plants f-backward-identity (parallel/layers/planted_bug.h).
ParallelTensor copy_to_tp(ProcessGroup& group, const ParallelTensor& x, PlantedBug bug);
ParallelTensor reduce_from_tp(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor gather_seq(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor reduce_scatter_seq(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor split_last(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor gather_last(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor seq_to_heads(ProcessGroup& group, const ParallelTensor& x);
ParallelTensor heads_to_seq(ProcessGroup& group, const ParallelTensor& x);
// The same with `bug`, which plants ulysses-a2a-order (parallel/layers/planted_bug.h).
ParallelTensor heads_to_seq(ProcessGroup& group, const ParallelTensor& x, PlantedBug bug);

// Not autograd ops: plain collectives on values, for checks and reports.
// The full tensor of a Replicate (itself) or Shard(d) (gathered along d) local tensor; a Partial
// one is a PlacementError.
Tensor gather_to_full(ProcessGroup& group, const Tensor& local, Placement placement,
                      CommPurpose purpose);
// This rank's slice of a full tensor under `placement` (Replicate: a copy; Partial: an error).
Tensor slice_of_full(const Tensor& full, Placement placement, int rank, int t);

}  // namespace shardscope
