// The ring formulas and the layer's communication model.
#include "parallel/models/comm_model.h"

#include <algorithm>

#include "parallel/layers/layer_decl.h"

namespace shardscope {

double ring_full_bytes(CollectiveKind kind, std::int64_t count, std::size_t element_bytes, int t) {
  const double bytes = static_cast<double>(count) * static_cast<double>(element_bytes);
  return kind == CollectiveKind::all_gather ? bytes * t : bytes;
}

double ring_bytes_sent(CollectiveKind kind, double full_bytes, int t) {
  if (t <= 1) return 0.0;
  const double share = static_cast<double>(t - 1) / static_cast<double>(t);
  switch (kind) {
    case CollectiveKind::all_reduce:
      return 2.0 * share * full_bytes;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return share * full_bytes;
    case CollectiveKind::broadcast:
      return full_bytes;
    case CollectiveKind::barrier:
      return 0.0;
  }
  return 0.0;
}

namespace {

// The lines of layer c.layer.
std::vector<CommLine> layer_comm(const LayerConfig& c, bool keep_gathered_input) {
  std::vector<CommLine> out;
  if (c.mode == ParallelMode::single) return out;
  const int t = c.degree;
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double sbh_bytes =
      static_cast<double>(c.seq) * static_cast<double>(c.batch) * static_cast<double>(c.hidden) * A;
  auto line = [&](CollectiveKind kind, Phase phase, CommPurpose purpose, int count,
                  double full_bytes_each) {
    if (count == 0) return;
    const double bytes = count * ring_bytes_sent(kind, full_bytes_each, t);
    for (CommLine& l : out) {  // one line per (kind, phase, purpose), as CommLog keeps them
      if (l.kind == kind && l.phase == phase && l.purpose == purpose) {
        l.count += count;
        l.bytes_sent += bytes;
        return;
      }
    }
    out.push_back({c.layer, kind, phase, purpose, count, bytes});
  };
  const Phase fwd = Phase::forward, bwd = Phase::backward;
  const CommPurpose act = CommPurpose::activation, grad = CommPurpose::param_grad;
  const int columns = decl::count(c, decl::Kind::column_linear);
  const int rows = decl::count(c, decl::Kind::row_linear);
  switch (c.mode) {
    case ParallelMode::tp:  // Megatron's f and g: each row linear's forward, each column's backward
      line(CollectiveKind::all_reduce, fwd, act, rows, sbh_bytes);
      line(CollectiveKind::all_reduce, bwd, act, columns, sbh_bytes);
      break;
    case ParallelMode::tp_sp:
      line(CollectiveKind::all_gather, fwd, act, columns, sbh_bytes);
      line(CollectiveKind::reduce_scatter, fwd, act, rows, sbh_bytes);
      line(CollectiveKind::all_gather, bwd, act, rows + (keep_gathered_input ? 0 : columns),
           sbh_bytes);
      line(CollectiveKind::reduce_scatter, bwd, act, columns, sbh_bytes);
      break;
    case ParallelMode::ulysses: {
      // q, k and v to head shards, the context back; the same backward. Keys and values have g
      // heads, repeated to t where t > g so every rank receives one.
      const double kv_bytes = sbh_bytes / static_cast<double>(c.heads) *
                              static_cast<double>(std::max<std::int64_t>(c.kv_heads_count(), t));
      for (const Phase phase : {fwd, bwd}) {
        line(CollectiveKind::all_to_all, phase, act, 2, sbh_bytes / t);
        line(CollectiveKind::all_to_all, phase, act, 2, kv_bytes / t);
      }
      break;
    }
    case ParallelMode::single:
      break;
  }
  // Full recomputation runs the layer's forward again in backward: its collectives twice (logged
  // in phase forward, as the recomputation runs).
  if (c.recompute == Recompute::full) {
    for (CommLine& l : out) {
      if (l.phase == fwd) {
        l.count *= 2;
        l.bytes_sent *= 2;
      }
    }
  }
  // One all-reduce per parameter whose gradient is a partial sum over sequence shards, in the
  // declared order.
  for (const decl::Param& p : decl::parameters(c)) {
    if (decl::partial_grad(*p.decl, c)) {
      line(CollectiveKind::all_reduce, bwd, grad, 1, static_cast<double>(p.shape.numel()) * A);
    }
  }
  return out;
}

}  // namespace

std::vector<CommLine> comm_model(const LayerConfig& c, bool keep_gathered_input) {
  std::vector<CommLine> out;
  for (int i = 0; i < c.layers; ++i) {
    LayerConfig layer = c;
    layer.layer = i;
    for (const CommLine& l : layer_comm(layer, keep_gathered_input)) out.push_back(l);
  }
  return out;
}

}  // namespace shardscope
