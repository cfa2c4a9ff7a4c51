// The synthetic trace: a stage table of the tp-sp layer played on every rank, step after step.
#include "viz/model/synthetic.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "autograd/errors.h"
#include "io/manifest.h"
#include "parallel/models/comm_model.h"

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
  const char* scope;
  const char* op;
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

// Megatron's sequence-parallel layer: gathers before the column linears, reduce-scatters after
// the row linears; backward the conjugates, the re-gathered linear inputs, then the replicated
// parameters' gradients all-reduced.
const std::array<Stage, 28> kStages{{
    {"ln1", "layernorm", kF, 12, 1, 0.05, {kNone, kNone}, 0},
    {"attn.qkv", "gather_matmul", kF, 40, 1, 0, {{{kGather, kAct, 1}, kNone}}, 1},
    {"attn.scores", "matmul", kF, 25, 2, 0, {kNone, kNone}, 0},
    {"attn.softmax", "softmax", kF, 15, 2, 0, {kNone, kNone}, 0},
    {"attn.dropout", "dropout", kF, 8, 0.5, 0, {kNone, kNone}, 0},
    {"attn.context", "matmul", kF, 25, 3, 0, {kNone, kNone}, 0},
    {"attn.proj", "matmul_scatter", kF, 30, 1, 0, {{{kScatter, kAct, 4}, kNone}}, 1},
    {"attn.out_dropout", "dropout", kF, 6, 0.25, 0, {kNone, kNone}, 0},
    {"", "add", kF, 4, 0, 0, {kNone, kNone}, 0},
    {"ln2", "layernorm", kF, 12, 1, 0.05, {kNone, kNone}, 0},
    {"mlp.fc1", "gather_matmul", kF, 60, 1, 0, {{{kGather, kAct, 1}, kNone}}, 1},
    {"mlp.gelu", "gelu", kF, 20, 4, 0, {kNone, kNone}, 0},
    {"mlp.fc2", "matmul_scatter", kF, 60, 4, 0, {{{kScatter, kAct, 4}, kNone}}, 1},
    {"mlp.dropout", "dropout", kF, 6, 0.25, 0, {kNone, kNone}, 0},
    {"mlp.dropout", "dropout", kB, 6, 0, 0, {kNone, kNone}, 0},
    {"mlp.fc2", "matmul_scatter", kB, 110, 0, 0, {{{kGather, kAct, 1}, kNone}}, 1},
    {"mlp.gelu", "gelu", kB, 25, 0, 0, {kNone, kNone}, 0},
    {"mlp.fc1", "gather_matmul", kB, 120, 0, 0, {{{kGather, kAct, 1}, {kScatter, kAct, 4}}}, 2},
    {"ln2", "layernorm", kB, 20, 0, 0, {kNone, kNone}, 0},
    {"", "add", kB, 4, 0, 0, {kNone, kNone}, 0},
    {"attn.out_dropout", "dropout", kB, 6, 0, 0, {kNone, kNone}, 0},
    {"attn.proj", "matmul_scatter", kB, 55, 0, 0, {{{kGather, kAct, 1}, kNone}}, 1},
    {"attn.context", "matmul", kB, 45, 0, 0, {kNone, kNone}, 0},
    {"attn.dropout", "dropout", kB, 8, 0, 0, {kNone, kNone}, 0},
    {"attn.softmax", "softmax", kB, 18, 0, 0, {kNone, kNone}, 0},
    {"attn.scores", "matmul", kB, 45, 0, 0, {kNone, kNone}, 0},
    {"attn.qkv", "gather_matmul", kB, 80, 0, 0, {{{kGather, kAct, 1}, {kScatter, kAct, 4}}}, 2},
    {"ln1", "layernorm", kB, 20, 0, 0, {{{kReduce, kGrad, 6}, kNone}}, 1},
}};

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
    clocks_.resize(static_cast<std::size_t>(ranks));
    const double h = static_cast<double>(config_.hidden);
    for (RankClock& r : clocks_) {
      r.memory[static_cast<std::size_t>(MemoryCategory::parameter)] =
          static_cast<std::uint64_t>((12 * h * h + 13 * h) * A / t_);
    }
  }

  const LayerConfig& config() const { return config_; }

  void step(std::int64_t step, std::vector<TraceEvent>& out) {
    for (std::size_t r = 0; r < clocks_.size(); ++r) {
      TraceEvent mark = base(TraceEventKind::step, r, step, kF, clocks_[r].now);
      out.push_back(mark);
    }
    std::vector<std::uint64_t> forward_seq(kStages.size(), 0);
    for (std::size_t i = 0; i < kStages.size(); ++i) {
      const Stage& stage = kStages[i];
      // A backward node carries its forward op's number.
      std::size_t forward = i;
      for (std::size_t k = 0; k < kStages.size() && stage.phase == kB; ++k) {
        if (kStages[k].phase == kF && std::string(kStages[k].scope) == stage.scope &&
            std::string(kStages[k].op) == stage.op) {
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
        const Stage& f = kStages[forward];
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
