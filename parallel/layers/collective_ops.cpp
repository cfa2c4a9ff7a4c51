// The conjugate collective ops.
#include "parallel/layers/collective_ops.h"

#include <numeric>

#include "autograd/backend.h"
#include "autograd/ops/record.h"

namespace shardscope {
namespace {

using ops_detail::OpRecord;

Tensor view(const Tensor& t, const Shape& shape) {
  Tensor v = t.detach();
  v.impl()->shape = shape;
  return v;
}

Tensor permuted(const Tensor& t, const std::vector<int>& perm) {
  std::vector<std::int64_t> dims(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) dims[i] = t.shape()[perm[i]];
  Tensor out = Tensor::empty(t.ctx(), Shape(dims), t.dtype());
  t.ctx().backend().permute(t, perm, out);
  return out;
}

Tensor slice_dim(const Tensor& t, int dim, int rank, int parts) {
  Shape s = t.shape();
  const std::int64_t n = s[dim] / parts;
  s[dim] = n;
  Tensor out = Tensor::empty(t.ctx(), s, t.dtype());
  t.ctx().backend().copy_slice(t, dim, rank * n, out, 0, n);
  return out;
}

// All-gather along `dim`: gather along dim 0 of a view with `dim` moved first, then move it back.
Tensor gather_dim(ProcessGroup& g, const Tensor& local, int dim, CommPurpose purpose) {
  if (dim == 0) return g.all_gather(local, purpose);
  const int r = local.rank();
  std::vector<int> to_front(static_cast<std::size_t>(r));
  std::iota(to_front.begin(), to_front.end(), 0);
  to_front.erase(to_front.begin() + dim);
  to_front.insert(to_front.begin(), dim);
  Tensor gathered = g.all_gather(permuted(local, to_front), purpose);
  std::vector<int> back(static_cast<std::size_t>(r));
  for (int i = 0; i < r; ++i)
    back[static_cast<std::size_t>(to_front[static_cast<std::size_t>(i)])] = i;
  return permuted(gathered, back);
}

Tensor all_reduced_copy(ProcessGroup& g, const Tensor& t) {
  Tensor out = t.clone();
  g.all_reduce(out, ReduceOp::sum);
  return out;
}

// [s/t, b, a, d] -> [s, b, a/t, d]: heads chunk j goes to rank j, sequence chunks come back.
Tensor seq_to_heads_values(ProcessGroup& g, const Tensor& x) {
  const int t = g.size();
  const Shape& s = x.shape();
  Tensor send = permuted(view(x, {s[0], s[1], t, s[2] / t, s[3]}), {2, 0, 1, 3, 4});
  return view(g.all_to_all(send), {s[0] * t, s[1], s[2] / t, s[3]});
}

// [s, b, a/t, d] -> [s/t, b, a, d]: sequence chunk j goes to rank j, head chunks come back.
Tensor heads_to_seq_values(ProcessGroup& g, const Tensor& x, PlantedBug bug = PlantedBug::none) {
  const int t = g.size();
  const Shape& s = x.shape();
  Tensor got = g.all_to_all(view(x, {t, s[0] / t, s[1], s[2], s[3]}));  // [t, s/t, b, a/t, d]
  // PLANTED BUG ulysses-a2a-order: the receive buffer's first dim is the source rank, which here
  // is a head chunk, not a sequence chunk. Reading the buffer as [s/t, b, a, d] as it lies (the
  // source-rank dim taken for sequence order) skips the move of that dim next to the heads.
  if (bug == PlantedBug::ulysses_a2a_order) return view(got, {s[0] / t, s[1], s[2] * t, s[3]});
  return view(permuted(got, {1, 2, 0, 3, 4}), {s[0] / t, s[1], s[2] * t, s[3]});
}

// Runs one collective op: checks the placement, computes `forward`, records `backward`.
template <class Fwd, class Bwd>
ParallelTensor collective_op(const char* name, ProcessGroup& g, const ParallelTensor& x,
                             Placement in, Placement out, Fwd forward, Bwd backward) {
  OpRecord r(name, {x.local}, in.str() + " -> " + out.str());
  expect_placement(r.where(), x, in);
  Tensor y = forward(x.local);
  if (r.needs_grad()) {
    ProcessGroup* group = &g;
    r.record([group, backward](Node&, const std::vector<Tensor>& grads) {
      return std::vector<Tensor>{backward(*group, grads[0])};
    });
  }
  return ParallelTensor::make(r.finish(y), out, x.global, g.size());
}

int last_dim(const ParallelTensor& x) {
  return x.global.rank() - 1;
}

}  // namespace

ParallelTensor copy_to_tp(ProcessGroup& g, const ParallelTensor& x) {
  return copy_to_tp(g, x, PlantedBug::none);
}

ParallelTensor copy_to_tp(ProcessGroup& g, const ParallelTensor& x, PlantedBug bug) {
  // PLANTED BUG f-backward-identity: f's backward written as g's (an identity): each rank keeps
  // its own part of the input gradient instead of the sum over the ranks' column blocks.
  const bool identity_backward = bug == PlantedBug::f_backward_identity;
  return collective_op(
      "copy_to_tp", g, x, Placement::replicate(), Placement::replicate(),
      [](const Tensor& v) { return v.detach(); },
      [identity_backward](ProcessGroup& pg, const Tensor& dy) {
        return identity_backward ? dy : all_reduced_copy(pg, dy);
      });
}

ParallelTensor reduce_from_tp(ProcessGroup& g, const ParallelTensor& x) {
  return collective_op(
      "reduce_from_tp", g, x, Placement::partial(), Placement::replicate(),
      [&g](const Tensor& v) { return all_reduced_copy(g, v); },
      [](ProcessGroup&, const Tensor& dy) { return dy; });
}

ParallelTensor gather_seq(ProcessGroup& g, const ParallelTensor& x) {
  return collective_op(
      "gather_seq", g, x, Placement::shard(0), Placement::replicate(),
      [&g](const Tensor& v) { return g.all_gather(v); },
      [](ProcessGroup& pg, const Tensor& dy) { return pg.reduce_scatter(dy); });
}

ParallelTensor reduce_scatter_seq(ProcessGroup& g, const ParallelTensor& x) {
  return collective_op(
      "reduce_scatter_seq", g, x, Placement::partial(), Placement::shard(0),
      [&g](const Tensor& v) { return g.reduce_scatter(v); },
      [](ProcessGroup& pg, const Tensor& dy) { return pg.all_gather(dy); });
}

ParallelTensor split_last(ProcessGroup& g, const ParallelTensor& x) {
  const int d = last_dim(x);
  return collective_op(
      "split_last", g, x, Placement::replicate(), Placement::shard(d),
      [&g, d](const Tensor& v) { return slice_dim(v, d, g.rank(), g.size()); },
      [d](ProcessGroup& pg, const Tensor& dy) {
        return gather_dim(pg, dy, d, CommPurpose::activation);
      });
}

ParallelTensor gather_last(ProcessGroup& g, const ParallelTensor& x) {
  const int d = last_dim(x);
  return collective_op(
      "gather_last", g, x, Placement::shard(d), Placement::replicate(),
      [&g, d](const Tensor& v) { return gather_dim(g, v, d, CommPurpose::activation); },
      [d](ProcessGroup& pg, const Tensor& dy) { return slice_dim(dy, d, pg.rank(), pg.size()); });
}

ParallelTensor seq_to_heads(ProcessGroup& g, const ParallelTensor& x) {
  return collective_op(
      "seq_to_heads", g, x, Placement::shard(0), Placement::shard(2),
      [&g](const Tensor& v) { return seq_to_heads_values(g, v); },
      [](ProcessGroup& pg, const Tensor& dy) { return heads_to_seq_values(pg, dy); });
}

ParallelTensor heads_to_seq(ProcessGroup& g, const ParallelTensor& x) {
  return heads_to_seq(g, x, PlantedBug::none);
}

ParallelTensor heads_to_seq(ProcessGroup& g, const ParallelTensor& x, PlantedBug bug) {
  return collective_op(
      "heads_to_seq", g, x, Placement::shard(2), Placement::shard(0),
      [&g, bug](const Tensor& v) { return heads_to_seq_values(g, v, bug); },
      [](ProcessGroup& pg, const Tensor& dy) { return seq_to_heads_values(pg, dy); });
}

Tensor gather_to_full(ProcessGroup& g, const Tensor& local, Placement placement,
                      CommPurpose purpose) {
  if (placement == Placement::partial()) {
    throw PlacementError(local.ctx().where("gather_to_full") +
                         ": a Partial tensor has no full value on one rank until it is reduced");
  }
  if (!placement.is_shard()) return local;
  return gather_dim(g, local, placement.dim, purpose);
}

Tensor slice_of_full(const Tensor& full, Placement placement, int rank, int t) {
  if (placement == Placement::partial()) {
    throw PlacementError("slice_of_full: a full tensor has no single Partial slice");
  }
  if (!placement.is_shard()) return full.clone();
  return slice_dim(full, placement.dim, rank, t);
}

}  // namespace shardscope
