// ProcessGroup: tensor-level collectives that report what they moved.
#include "parallel/comm/process_group.h"

#include "parallel/models/comm_model.h"

namespace shardscope {
namespace {

Shape with_dim0(const Shape& s, std::int64_t n) {
  Shape out = s;
  out[0] = n;
  return out;
}

void check_dim0(const ProcessGroup& g, const char* what, const Tensor& t) {
  if (t.rank() < 1 || t.dim(0) % g.size() != 0) {
    throw ShapeError(t.ctx().where(what) + ": dim 0 of " + t.describe() +
                     " must divide into the group's " + std::to_string(g.size()) + " ranks");
  }
}

}  // namespace

CollectiveCall ProcessGroup::make_call(CollectiveKind kind, const Tensor& t) const {
  CollectiveCall call;
  call.kind = kind;
  call.count = t.defined() ? t.numel() : 0;
  call.dtype = t.defined() ? t.dtype() : DType::f32;
  call.site.op = ctx_.current_op();
  call.site.scope = ctx_.scope();
  call.site.layer = ctx_.layer();
  call.site.phase = ctx_.phase();
  call.site.step = ctx_.step();
  return call;
}

void ProcessGroup::run_and_report(const CollectiveCall& call, CommPurpose purpose, const void* send,
                                  void* recv) {
  if (!ctx_.observed()) {
    comm_.run(call, send, recv);
    return;
  }
  CollectiveEvent e;
  e.site = ctx_.site();
  e.kind = call.kind;
  e.reduce = call.reduce;
  e.purpose = purpose;
  e.group_size = size();
  e.count = call.count;
  e.dtype = call.dtype;
  e.full_bytes = ring_full_bytes(call.kind, call.count, dtype_size(call.dtype), size());
  e.bytes_sent = ring_bytes_sent(call.kind, e.full_bytes, size());
  ctx_.notify([&](Observer& o) { o.on_collective_begin(e); });
  comm_.run(call, send, recv);
  ctx_.notify([&](Observer& o) { o.on_collective(e); });
}

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, CommPurpose purpose) {
  CollectiveCall call = make_call(CollectiveKind::all_reduce, t);
  call.reduce = op;
  run_and_report(call, purpose, t.raw_data(), t.raw_data());
}

Tensor ProcessGroup::all_gather(const Tensor& local, CommPurpose purpose) {
  if (local.rank() < 1) throw ShapeError(ctx_.where("all_gather") + ": needs rank >= 1");
  Tensor out = Tensor::empty(ctx_, with_dim0(local.shape(), local.dim(0) * size()), local.dtype());
  run_and_report(make_call(CollectiveKind::all_gather, local), purpose, local.raw_data(),
                 out.raw_data());
  return out;
}

Tensor ProcessGroup::reduce_scatter(const Tensor& full, CommPurpose purpose) {
  check_dim0(*this, "reduce_scatter", full);
  Tensor out = Tensor::empty(ctx_, with_dim0(full.shape(), full.dim(0) / size()), full.dtype());
  run_and_report(make_call(CollectiveKind::reduce_scatter, full), purpose, full.raw_data(),
                 out.raw_data());
  return out;
}

Tensor ProcessGroup::all_to_all(const Tensor& send, CommPurpose purpose) {
  check_dim0(*this, "all_to_all", send);
  Tensor out = Tensor::empty(ctx_, send.shape(), send.dtype());
  run_and_report(make_call(CollectiveKind::all_to_all, send), purpose, send.raw_data(),
                 out.raw_data());
  return out;
}

void ProcessGroup::broadcast(Tensor& t, int root, CommPurpose purpose) {
  CollectiveCall call = make_call(CollectiveKind::broadcast, t);
  call.root = root;
  run_and_report(call, purpose, t.raw_data(), t.raw_data());
}

void ProcessGroup::barrier() {
  run_and_report(make_call(CollectiveKind::barrier, Tensor()), CommPurpose::activation, nullptr,
                 nullptr);
}

}  // namespace shardscope
