// CommLog and the per-mode communication model.
#include "parallel/comm/comm_log.h"

#include "parallel/models/comm_model.h"

namespace shardscope {

void CommLog::on_collective(const CollectiveEvent& e) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (CommLine& line : lines_) {
    if (line.layer == e.site.layer && line.kind == e.kind && line.phase == e.site.phase &&
        line.purpose == e.purpose) {
      ++line.count;
      line.bytes_sent += e.bytes_sent;
      return;
    }
  }
  lines_.push_back({e.site.layer, e.kind, e.site.phase, e.purpose, 1, e.bytes_sent});
}

std::vector<CommLine> CommLog::lines() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lines_;
}

void CommLog::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  lines_.clear();
}

std::vector<CommLine> comm_model(const LayerConfig& c, bool keep_gathered_input) {
  std::vector<CommLine> out;
  if (c.mode == ParallelMode::single) return out;
  const int t = c.degree;
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double h = static_cast<double>(c.hidden);
  const double sbh_bytes = static_cast<double>(c.seq) * static_cast<double>(c.batch) * h * A;
  auto line = [&](CollectiveKind kind, Phase phase, CommPurpose purpose, int count,
                  double full_bytes_each) {
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
  switch (c.mode) {
    case ParallelMode::tp:
      line(CollectiveKind::all_reduce, fwd, act, 2, sbh_bytes);
      line(CollectiveKind::all_reduce, bwd, act, 2, sbh_bytes);
      break;
    case ParallelMode::tp_sp:
      line(CollectiveKind::all_gather, fwd, act, 2, sbh_bytes);
      line(CollectiveKind::reduce_scatter, fwd, act, 2, sbh_bytes);
      line(CollectiveKind::all_gather, bwd, act, keep_gathered_input ? 2 : 4, sbh_bytes);
      line(CollectiveKind::reduce_scatter, bwd, act, 2, sbh_bytes);
      // ln1, ln2 weight and bias; attn.proj.bias, mlp.fc2.bias: six [h] gradients
      line(CollectiveKind::all_reduce, bwd, grad, 6, h * A);
      break;
    case ParallelMode::ulysses: {
      line(CollectiveKind::all_to_all, fwd, act, 4, sbh_bytes / t);
      line(CollectiveKind::all_to_all, bwd, act, 4, sbh_bytes / t);
      // One all-reduce per parameter; the full sizes, in the order of LayerWeights::named().
      const double sizes[] = {h, h, 3 * h * h, 3 * h, h * h,     h,
                              h, h, 4 * h * h, 4 * h, 4 * h * h, h};
      for (double n : sizes) line(CollectiveKind::all_reduce, bwd, grad, 1, n * A);
      break;
    }
    case ParallelMode::single:
      break;
  }
  return out;
}

}  // namespace shardscope
