// The synthetic trace: the tp-sp layer's stages, derived from its declaration, played on every
// rank, step after step.
#include "viz/model/synthetic.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "io/manifest.h"
#include "parallel/layers/layer_decl.h"
#include "parallel/models/comm_model.h"
#include "parallel/models/memory_model.h"

namespace shardscope::viz {
namespace {

// A collective one stage issues: its kind, why, and its send buffer in units of s*b*h/t
// elements (param_grad: in units of h).
struct StageCollective {
  CollectiveKind kind;
  CommPurpose purpose;
  double send_units;
};

// One op slice of the layer (forward op or backward node) as the tp-sp layer runs it.
struct Stage {
  std::string scope;
  std::string op;
  Phase phase;
  double micros;       // typical duration of its compute
  double saved_units;  // forward: bytes it saves, in units of s*b*h*A/t
  double extra_units;  // forward: of which LayerNorm statistics
  std::array<StageCollective, 2> collectives;
  int collective_count;
};

constexpr Phase kF = Phase::forward, kB = Phase::backward;
constexpr CommPurpose kAct = CommPurpose::activation, kGrad = CommPurpose::param_grad;
constexpr CollectiveKind kGather = CollectiveKind::all_gather,
                         kScatter = CollectiveKind::reduce_scatter,
                         kReduce = CollectiveKind::all_reduce;
constexpr StageCollective kNone{CollectiveKind::barrier, kAct, 0};

// What a module of each kind does in Megatron's sequence-parallel layer: the op that runs it,
// typical forward and backward durations (us), and its collectives (a column-parallel linear
// gathers its input forward, and backward gathers it again and reduce-scatters its gradient; a
// row-parallel linear reduce-scatters its output forward and gathers the gradient backward).
struct KindRun {
  const char* op;
  double forward_us, backward_us;
  std::array<StageCollective, 2> forward, backward;
  int forward_count, backward_count;
};

KindRun run_of(decl::Kind kind) {
  switch (kind) {
    case decl::Kind::layernorm:
      return {"layernorm", 12, 20, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::rmsnorm:
      return {"rmsnorm", 10, 16, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::column_linear:
      return {"gather_matmul",
              50,
              100,
              {{{kGather, kAct, 1}, kNone}},
              {{{kGather, kAct, 1}, {kScatter, kAct, 4}}},
              1,
              2};
    case decl::Kind::row_linear:
      return {"matmul_scatter",
              45,
              80,
              {{{kScatter, kAct, 4}, kNone}},
              {{{kGather, kAct, 1}, kNone}},
              1,
              1};
    case decl::Kind::heads:
      return {"permute", 5, 5, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::rope:
      return {"rope", 6, 6, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::scores:
    case decl::Kind::context:
      return {"matmul", 25, 45, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::softmax:
      return {"softmax", 15, 18, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::dropout:
      return {"dropout", 7, 7, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::gelu:
      return {"gelu", 20, 25, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::swiglu:
      return {"swiglu", 25, 30, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::residual:
      return {"add", 4, 4, {kNone, kNone}, {kNone, kNone}, 0, 0};
    case decl::Kind::recompute:  // keeps its inputs; its backward recomputes (not drawn here)
      return {"checkpoint", 1, 1, {kNone, kNone}, {kNone, kNone}, 0, 0};
  }
  return {"?", 1, 1, {kNone, kNone}, {kNone, kNone}, 0, 0};
}

// The stages of one step, from the layer's declaration: every module's forward op in order with
// the bytes the activation model says it saves, then their backward nodes in reverse, then the
// all-reduce of the replicated parameters' partial gradients.
std::vector<Stage> make_stages(const LayerConfig& c, double shard_bytes) {
  const ActivationModel model = activation_model(c, false);
  // The norms' statistics (the model's extras) shared out by how many each norm keeps per row.
  double statistics = 0;
  for (const decl::ModuleDecl& m : decl::modules(c)) statistics += m.row_statistics;
  std::vector<Stage> forward;
  for (const decl::ModuleDecl& m : decl::modules(c)) {
    const KindRun k = run_of(m.kind);
    double saved = 0;
    for (const ActivationTerm& t : model.terms) saved += t.scope == m.scope ? t.bytes : 0;
    const double extra = statistics > 0 ? model.extras_bytes * m.row_statistics / statistics : 0;
    forward.push_back({m.scope, k.op, kF, k.forward_us, (saved + extra) / shard_bytes,
                       extra / shard_bytes, k.forward, k.forward_count});
  }
  std::vector<Stage> stages = forward;
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    const KindRun k = run_of(decl::module(c, it->scope).kind);
    stages.push_back({it->scope, it->op, kB, k.backward_us, 0, 0, k.backward, k.backward_count});
  }
  double partial = 0;  // elements of the parameters whose gradients are partial sums, in h
  for (const decl::Param& p : decl::parameters(c)) {
    if (decl::partial_grad(*p.decl, c)) {
      partial += static_cast<double>(p.shape.numel()) / static_cast<double>(c.hidden);
    }
  }
  stages.push_back({decl::kGradReduceScope,
                    "reduce_parameter_gradients",
                    kB,
                    10,
                    0,
                    0,
                    {{{kReduce, kGrad, partial}, kNone}},
                    partial > 0 ? 1 : 0});
  return stages;
}

// Each rank's parameter bytes: every declared parameter, split by its placement.
double parameter_bytes(const LayerConfig& c, int t) {
  double bytes = 0;
  for (const decl::Param& p : decl::parameters(c)) {
    const double split = decl::placement(*p.decl, c).is_shard() ? t : 1;
    bytes += static_cast<double>(p.shape.numel()) / split;
  }
  return bytes * static_cast<double>(dtype_size(c.dtype));
}

// splitmix64: the same numbers on every platform, unlike the standard distributions.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  double unit() {  // in [0, 1)
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) / 9007199254740992.0;
  }

 private:
  std::uint64_t state_;
};

LayerConfig config_for(int ranks) {
  LayerConfig c;
  c.mode = ranks > 1 ? ParallelMode::tp_sp : ParallelMode::single;
  c.degree = ranks;
  c.heads = 2 * ranks;
  c.hidden = 16 * c.heads;
  c.seq = 16 * ranks;
  c.batch = 2;
  return c;
}

// What each rank has at a moment: its clock, op number and live bytes by category.
struct RankClock {
  double now = 0;
  std::uint64_t seq = 0;
  std::array<std::uint64_t, kMemoryCategoryCount> memory{};
};

class Generator {
 public:
  Generator(int ranks, std::uint64_t seed) : config_(config_for(ranks)), random_(seed) {
    t_ = ranks;
    const double A = static_cast<double>(dtype_size(config_.dtype));
    shard_bytes_ = static_cast<double>(config_.seq * config_.batch * config_.hidden) * A / t_;
    stages_ = make_stages(config_, shard_bytes_);
    clocks_.resize(static_cast<std::size_t>(ranks));
    for (RankClock& r : clocks_) {
      r.memory[static_cast<std::size_t>(MemoryCategory::parameter)] =
          static_cast<std::uint64_t>(parameter_bytes(config_, t_));
    }
  }

  const LayerConfig& config() const { return config_; }

  void step(std::int64_t step, std::vector<TraceEvent>& out) {
    for (std::size_t r = 0; r < clocks_.size(); ++r) {
      TraceEvent mark = base(TraceEventKind::step, r, step, kF, clocks_[r].now);
      out.push_back(mark);
    }
    std::vector<std::uint64_t> forward_seq(stages_.size(), 0);
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      const Stage& stage = stages_[i];
      // A backward node carries its forward op's number.
      std::size_t forward = i;
      for (std::size_t k = 0; k < stages_.size() && stage.phase == kB; ++k) {
        if (stages_[k].phase == kF && stages_[k].scope == stage.scope &&
            stages_[k].op == stage.op) {
          forward = k;
        }
      }
      run_stage(stage, step, forward_seq, i, forward, out);
    }
    for (RankClock& r : clocks_) {  // the optimizer step frees the gradients
      r.memory[static_cast<std::size_t>(MemoryCategory::gradient)] = 0;
      r.now += 30 + 10 * random_.unit();
    }
  }

 private:
  TraceEvent base(TraceEventKind kind, std::size_t r, std::int64_t step, Phase phase, double ts) {
    TraceEvent e;
    e.kind = kind;
    e.rank = static_cast<int>(r);
    e.step = step;
    e.phase = phase;
    e.layer = config_.layer;
    e.ts_us = ts;
    return e;
  }

  std::uint64_t& live(std::size_t r, MemoryCategory c) {
    return clocks_[r].memory[static_cast<std::size_t>(c)];
  }

  void run_stage(const Stage& stage, std::int64_t step, std::vector<std::uint64_t>& forward_seq,
                 std::size_t index, std::size_t forward, std::vector<TraceEvent>& out) {
    const std::size_t n = clocks_.size();
    std::vector<double> begin(n), at(n);
    for (std::size_t r = 0; r < n; ++r) {
      begin[r] = clocks_[r].now + 0.5 * random_.unit();
      at[r] = begin[r] + stage.micros * (0.3 + 0.4 * random_.unit());
      if (stage.phase == kF) forward_seq[index] = ++clocks_[r].seq;
    }
    const std::uint64_t seq = stage.phase == kF ? forward_seq[index] : forward_seq[forward];
    for (int k = 0; k < stage.collective_count; ++k) {
      const StageCollective& c = stage.collectives[static_cast<std::size_t>(k)];
      collective(c, stage, step, seq, at, out);
    }
    const auto saved = static_cast<std::uint64_t>(stage.saved_units * shard_bytes_);
    const auto extra = static_cast<std::uint64_t>(stage.extra_units * shard_bytes_);
    for (std::size_t r = 0; r < n; ++r) {
      const double end = at[r] + stage.micros * (0.5 + 0.3 * random_.unit());
      TraceEvent op = base(TraceEventKind::op, r, step, stage.phase, begin[r]);
      op.op = stage.op;
      op.scope = stage.scope;
      op.seq = seq;
      op.dur_us = end - begin[r];
      op.alloc_bytes = static_cast<std::uint64_t>(shard_bytes_ * (1 + random_.unit()));
      if (stage.phase == kF) {
        op.saved_bytes = saved;
        op.saved_extra_bytes = extra;
        live(r, MemoryCategory::saved_activation) += saved - extra;
        live(r, MemoryCategory::saved_extra) += extra;
        live(r, MemoryCategory::activation) = op.alloc_bytes;
      } else {
        // Backward releases what the forward saved, in reverse, and accumulates gradients.
        const Stage& f = stages_[forward];
        const auto released = static_cast<std::uint64_t>(f.saved_units * shard_bytes_);
        const auto released_extra = static_cast<std::uint64_t>(f.extra_units * shard_bytes_);
        op.released_bytes = released;
        live(r, MemoryCategory::saved_activation) -= released - released_extra;
        live(r, MemoryCategory::saved_extra) -= released_extra;
        live(r, MemoryCategory::workspace) = op.alloc_bytes;
        live(r, MemoryCategory::gradient) += static_cast<std::uint64_t>(shard_bytes_ / 4);
      }
      live(r, MemoryCategory::communication) = 0;
      out.push_back(std::move(op));
      TraceEvent counter = base(TraceEventKind::memory, r, step, stage.phase, end);
      counter.memory = clocks_[r].memory;
      out.push_back(counter);
      clocks_[r].now = end;
    }
  }

  // One collective on every rank from at[r]; it completes when the last rank has entered and the
  // bytes have moved, and each rank goes on from there (at[r] becomes the completion).
  void collective(const StageCollective& c, const Stage& stage, std::int64_t step,
                  std::uint64_t seq, std::vector<double>& at, std::vector<TraceEvent>& out) {
    const double A = static_cast<double>(dtype_size(config_.dtype));
    const double units =
        c.purpose == kGrad ? static_cast<double>(config_.hidden) * A : shard_bytes_;
    const auto count = static_cast<std::int64_t>(c.send_units * units / A);
    const double full = ring_full_bytes(c.kind, count, dtype_size(config_.dtype), t_);
    const double sent = ring_bytes_sent(c.kind, full, t_);
    const double last = *std::max_element(at.begin(), at.end());
    const double done = last + 2 + sent / 2000.0 * (1 + 0.2 * random_.unit());  // ~2 GB/s
    for (std::size_t r = 0; r < at.size(); ++r) {
      TraceEvent e = base(TraceEventKind::collective, r, step, stage.phase, at[r]);
      e.op = stage.op;
      e.scope = stage.scope;
      e.seq = seq;
      e.dur_us = done - at[r];
      e.collective = c.kind;
      e.purpose = c.purpose;
      e.group_size = t_;
      e.count = count;
      e.full_bytes = full;
      e.bytes_sent = sent;
      live(r, MemoryCategory::communication) = static_cast<std::uint64_t>(full);
      TraceEvent counter = base(TraceEventKind::memory, r, step, stage.phase, at[r]);
      counter.memory = clocks_[r].memory;
      out.push_back(counter);
      out.push_back(std::move(e));
      at[r] = done;
    }
  }

  LayerConfig config_;
  std::vector<Stage> stages_;
  Random random_;
  int t_ = 1;
  double shard_bytes_ = 0;  // one rank's s*b*h*A/t
  std::vector<RankClock> clocks_;
};

// The trace writer's order: by start time, a step mark first, then the longer slice.
void sort_by_time(std::vector<TraceEvent>& events) {
  std::stable_sort(events.begin(), events.end(), [](const TraceEvent& x, const TraceEvent& y) {
    if (x.ts_us != y.ts_us) return x.ts_us < y.ts_us;
    const bool x_mark = x.kind == TraceEventKind::step, y_mark = y.kind == TraceEventKind::step;
    if (x_mark != y_mark) return x_mark;
    return x.dur_us > y.dur_us;
  });
}

}  // namespace

TraceFile synthetic_trace(int ranks, std::size_t events, std::uint64_t seed) {
  if (ranks < 1) {
    throw ArgumentError("synthetic_trace: expected at least 1 rank, given " +
                        std::to_string(ranks));
  }
  Generator generator(ranks, seed);
  TraceFile t;
  t.source = "synthetic (" + std::to_string(ranks) + " ranks, " + std::to_string(events) +
             " events, seed " + std::to_string(seed) + ")";
  t.meta.config = layer_config_json(generator.config());
  t.meta.config["keep_gathered_input"] = false;
  t.meta.ranks.resize(static_cast<std::size_t>(ranks));
  std::iota(t.meta.ranks.begin(), t.meta.ranks.end(), 0);
  t.meta.max_events = events;
  t.events.reserve(events + 128 * static_cast<std::size_t>(ranks));
  for (std::int64_t step = 0; t.events.size() < events; ++step) generator.step(step, t.events);
  sort_by_time(t.events);
  t.events.resize(events);  // the earliest: a trace cut at a moment, as a bounded recorder keeps
  return t;
}

}  // namespace shardscope::viz
