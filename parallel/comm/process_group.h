// ProcessGroup: one rank's view of a group: its Context and Communicator. Its tensor-level
// collectives fill in the call from the context (issuing op, scope, layer, phase, step), run it,
// and report a CollectiveEvent (with the ring formula's bytes) to the context's observers.
// Collectives act on dim 0 of contiguous tensors: all_gather concatenates the ranks' tensors
// along dim 0 in rank order, reduce_scatter and all_to_all cut dim 0 into t chunks.
#pragma once

#include "autograd/tensor.h"
#include "parallel/comm/communicator.h"

namespace shardscope {

class ProcessGroup {
 public:
  ProcessGroup(Context& ctx, Communicator& comm) : ctx_(ctx), comm_(comm) {}

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }
  Context& ctx() const { return ctx_; }
  Communicator& comm() const { return comm_; }

  // In place: every rank ends with the elementwise reduction of all ranks' tensors.
  void all_reduce(Tensor& t, ReduceOp op, CommPurpose purpose = CommPurpose::activation);
  // [n, ...] on each rank -> [t * n, ...], rank i's tensor at rows i * n.
  Tensor all_gather(const Tensor& local, CommPurpose purpose = CommPurpose::activation);
  // [t * n, ...] -> [n, ...]: the sum over ranks of rows rank * n .. (rank + 1) * n.
  Tensor reduce_scatter(const Tensor& full, CommPurpose purpose = CommPurpose::activation);
  // [t * n, ...] -> [t * n, ...]: rows j * n.. go to rank j; rows i * n.. come from rank i.
  Tensor all_to_all(const Tensor& send, CommPurpose purpose = CommPurpose::activation);
  // In place: every rank ends with rank `root`'s values.
  void broadcast(Tensor& t, int root, CommPurpose purpose = CommPurpose::activation);
  void barrier();

 private:
  CollectiveCall make_call(CollectiveKind kind, const Tensor& t) const;
  void run_and_report(const CollectiveCall& call, CommPurpose purpose, const void* send,
                      void* recv);

  Context& ctx_;
  Communicator& comm_;
};

}  // namespace shardscope
