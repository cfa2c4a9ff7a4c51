// The live source: a LiveSession with a TraceRecorder on every rank, and the single-device
// reference the Check panel compares with.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "apps/live_session.h"
#include "io/manifest.h"
#include "io/trace_recorder.h"
#include "parallel/layers/collective_ops.h"
#include "viz/model/replay.h"
#include "viz/model/source.h"

namespace shardscope::viz {
namespace {

std::vector<std::string> shape_strings(const std::vector<Shape>& shapes) {
  std::vector<std::string> out;
  for (const Shape& s : shapes) out.push_back(s.str());
  return out;
}

TraceOptions trace_options(const RunOptions& o, const LiveSession& session) {
  TraceOptions t;
  t.config = layer_config_json(o.spec.layer);
  t.config["steps"] = o.spec.steps;
  t.config["comm"] = "threads";
  t.config["keep_gathered_input"] = o.spec.keep_gathered_input;
  t.max_events = o.trace_events;
  t.clock = [&session] { return session.active_now(); };  // time while the ranks move
  return t;
}

bool checked(const RunOptions& o) {
  return o.spec.check && o.spec.layer.mode != ParallelMode::single;
}

class LiveSource final : public Source {
 public:
  explicit LiveSource(const RunOptions& options)
      : session_(options, &recorder_), recorder_(trace_options(options, session_)) {
    if (checked(options)) reference_ = single_device_reference(*reference_ctx_, options.spec);
    session_.start();
    // Every rank reaches its first op before the first command, so a command never races the
    // start (a step sent to a rank still starting would be taken as a pause request).
    if (!session_.wait_settled(std::chrono::seconds(60)) && session_.error().empty()) {
      throw Error("the live run's ranks did not reach their first op within 60 s");
    }
  }
  ~LiveSource() override { session_.finish("the visualizer closed"); }

  void step_op() override { session_.step(); }
  void next_collective() override { session_.next_collective(); }
  void step_layer() override { session_.step_layer(); }
  void run_continue() override { session_.resume(); }
  void pause() override { session_.pause(); }
  void add_breakpoint(const Breakpoint& b) override { session_.add_breakpoint(b); }
  void clear_breakpoints() override { session_.clear_breakpoints(); }

  bool idle() override {
    if (!session_.settled()) return !session_.error().empty();
    copy_values();
    return true;
  }
  bool wait_idle(std::chrono::milliseconds limit) override {
    if (!session_.wait_settled(limit)) return !session_.error().empty();
    copy_values();  // while every rank is paused, before the next command moves them
    return true;
  }

  std::uint64_t version() override {
    // Anything a snapshot shows moves one of these.
    std::uint64_t v = recorder_.events_since(events_.size(), events_);
    for (int r = 0; r < session_.ranks(); ++r) {
      const std::optional<Stop> stop = session_.stop(r);
      v = v * 31 + (stop ? stop->number : 0);
      v = v * 7 + static_cast<std::uint64_t>(session_.state(r));
    }
    return v;
  }

  Snapshot snapshot() override;

 private:
  void refresh_events();
  void copy_values();
  std::vector<TensorValues> op_values() const;
  void refresh_checks(Snapshot& s);
  void check_output();
  void finished_status(int rank, RankStatus& st) const;

  // The session only keeps the recorder's address until start(); the recorder reads the
  // session's active clock. The destructor ends the run before either goes.
  LiveSession session_;
  TraceRecorder recorder_;
  std::unique_ptr<Context> reference_ctx_ = std::make_unique<Context>(0);
  std::vector<std::pair<std::string, Tensor>> reference_;
  std::vector<TraceEvent> events_;  // every event so far, by start time
  std::size_t sorted_ = 0;          // events_[0, sorted_) are in order
  std::uint64_t values_key_ = ~0ull;
  std::vector<TensorValues> values_;
  std::optional<TensorCheck> output_check_;
};

void LiveSource::refresh_events() {
  recorder_.events_since(events_.size(), events_);
  if (sorted_ == events_.size()) return;
  // The recorder keeps a slice when it ends, so nested slices arrive after their children.
  std::stable_sort(events_.begin(), events_.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.ts_us < b.ts_us; });
  sorted_ = events_.size();
}

// Copies every rank's named tensors (and their gradients) when all ranks are paused (a running
// rank writes them) and they have moved since the last copy. The copy outlives the run.
void LiveSource::copy_values() {
  std::uint64_t key = 0;
  for (int r = 0; r < session_.ranks(); ++r) {
    if (session_.state(r) != LiveSession::RankState::paused) return;
    key = key * 1000003 + session_.stop(r).value_or(Stop{}).number;
  }
  if (key != values_key_) {
    values_key_ = key;
    std::map<std::string, TensorValues> by_name;
    for (int r = 0; r < session_.ranks(); ++r) {
      session_.with_tensors(r, [&](const std::map<std::string, ParallelTensor>& tensors) {
        for (const auto& [name, t] : tensors) {
          for (int grad = 0; grad < 2; ++grad) {
            const Tensor local = grad ? t.local.grad() : t.local;
            if (!local.defined()) continue;
            TensorValues& v = by_name[grad ? name + ".grad" : name];
            v.name = grad ? name + ".grad" : name;
            v.global = t.global;
            v.placement = t.placement;
            v.local_shapes.resize(static_cast<std::size_t>(session_.ranks()));
            v.local.resize(static_cast<std::size_t>(session_.ranks()));
            v.local_shapes[static_cast<std::size_t>(r)] = local.shape();
            const std::vector<double> d = local.to_vector();
            v.local[static_cast<std::size_t>(r)].assign(d.begin(), d.end());
          }
        }
      });
    }
    values_ = op_values();
    for (auto& [name, v] : by_name) values_.push_back(std::move(v));
    bool step0 = true;
    for (int r = 0; r < session_.ranks(); ++r) step0 = step0 && session_.stop(r)->step == 0;
    if (step0 && !output_check_ && !reference_.empty()) check_output();
  }
}

// The tensors of the op where each rank is paused, by their debugger names ("op input0"), first
// seen first: each rank's own values (TensorValues::at_op), not a shard of one tensor.
std::vector<TensorValues> LiveSource::op_values() const {
  const auto ranks = static_cast<std::size_t>(session_.ranks());
  std::vector<TensorValues> out;
  for (std::size_t r = 0; r < ranks; ++r) {
    for (const TensorSnapshot& snap : session_.op_tensors(static_cast<int>(r))) {
      const std::string name = op_tensor_name(snap.name);
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const TensorValues& t) { return t.name == name; });
      if (it == out.end()) {
        TensorValues v;
        v.name = name;
        v.global = snap.shape;
        v.at_op = true;
        v.local_shapes.resize(ranks);
        v.local.resize(ranks);
        v.what.resize(ranks);
        it = out.insert(out.end(), std::move(v));
      }
      it->local_shapes[r] = snap.shape;
      it->local[r].assign(snap.values.begin(), snap.values.end());
      it->what[r] = snap.what;
    }
  }
  return out;
}

// The output against the reference's, once step 0's forward produced it: each rank's slice
// against the same slice of the single-device output (the errors of tensor_compare.h).
void LiveSource::check_output() {
  const auto v = std::find_if(values_.begin(), values_.end(),
                              [](const TensorValues& t) { return t.name == "output"; });
  if (v == values_.end()) return;
  // The panel's values are f32 copies (TensorValues), so f32's rule, whatever the run's dtype.
  const Tolerance tolerance = default_tolerance(DType::f32);
  const Tensor& full = reference_.front().second;
  const double scale = scale_of(full.to_vector());
  ElementStats stats;
  for (int r = 0; r < session_.ranks(); ++r) {
    const std::vector<double> want =
        slice_of_full(full, v->placement, r, session_.ranks()).to_vector();
    const std::vector<float>& got = v->local[static_cast<std::size_t>(r)];
    if (got.size() != want.size()) return;  // not every rank has its output yet
    const std::vector<double> mine(got.begin(), got.end());
    stats = merge(stats, compare_elements("output", mine, want, scale, tolerance));
  }
  output_check_ = finish_check("output", stats, scale);
}

void LiveSource::refresh_checks(Snapshot& s) {
  s.tolerance = default_tolerance(session_.options().spec.layer.dtype);
  if (session_.options().spec.layer.mode == ParallelMode::single) {
    s.check_note = "a single-device run is the reference itself";
    return;
  }
  if (!session_.options().spec.check) {
    s.check_note = "the check is off (--no-check)";
    return;
  }
  const std::optional<CheckResult> group = session_.check_result();
  for (const auto& [name, tensor] : reference_) {
    CheckRow row;
    row.name = name;
    const TensorCheck* found = nullptr;
    if (group) {
      for (const TensorCheck& c : group->tensors) {
        if (c.name == name) found = &c;
      }
    }
    if (!found && name == "output" && output_check_) found = &*output_check_;
    if (found) {
      row.available = true;
      row.failed = found->failed;
      row.elements = found->elements;
      row.max_abs_err = found->max_abs_err;
      row.max_rel_err = found->max_rel_err;
      row.passed = found->passed;
    }
    s.checks.push_back(row);
  }
  if (!group) {
    s.check_note = output_check_
                       ? "gradients and updated parameters are checked when step 0's update is done"
                       : "the output is checked when step 0's forward is done";
  }
}

// A finished rank: its run's step count and final loss, where it was last paused no longer
// being where it is. Its op fields stay empty: the shard panel shows its last op in the layer.
void LiveSource::finished_status(int rank, RankStatus& st) const {
  st.where = "finished";
  const std::optional<RankRun> run = session_.result(rank);
  if (!run || run->steps.empty()) return;
  const std::size_t steps = run->steps.size();
  st.step = static_cast<std::int64_t>(steps) - 1;
  st.phase = Phase::backward;
  st.final_loss = run->steps.back().loss;
  char loss[32];
  std::snprintf(loss, sizeof loss, "%.6g", *st.final_loss);
  st.where = "finished after " + std::to_string(steps) + (steps == 1 ? " step" : " steps") +
             ", final loss " + loss;
}

Snapshot LiveSource::snapshot() {
  refresh_events();
  Snapshot s;
  const RunOptions& o = session_.options();
  s.source = std::string("live ") + mode_name(o.spec.layer.mode) + " on " +
             std::to_string(o.spec.layer.degree) + " thread rank(s)";
  s.live = true;
  s.config = o.spec.layer;
  s.keep_gathered_input = o.spec.keep_gathered_input;
  s.ranks = session_.ranks();
  s.events = events_;
  // Collectives the ranks are inside (stopped before the data moves, or waiting for a peer) are
  // drawn open, so the call a person stepped to is on the timeline with its flows.
  const std::vector<TraceEvent> open = recorder_.collectives_in_progress();
  if (!open.empty()) {
    s.events.insert(s.events.end(), open.begin(), open.end());
    std::stable_sort(s.events.begin(), s.events.end(),
                     [](const TraceEvent& a, const TraceEvent& b) { return a.ts_us < b.ts_us; });
  }
  for (const TraceEvent& e : s.events) s.now_us = std::max(s.now_us, e.ts_us + e.dur_us);
  s.total_events = s.events.size();
  s.finished = session_.all_finished();
  s.error = session_.error();
  s.warning = dropped_events_note(recorder_.meta());
  if (!s.warning.empty()) s.warning += ": the timeline and memory charts stop there";
  for (int r = 0; r < s.ranks; ++r) {
    RankStatus st;
    st.rank = r;
    st.state = session_.state(r);
    std::optional<Stop> stop = session_.stop(r);
    const std::optional<Stop> last = session_.last_stop(r);
    if (!stop && st.state != LiveSession::RankState::finished) {
      stop = last;  // the op it left off at, still its op
    }
    if (stop) {
      st.op = stop->op;
      st.scope = stop->scope;
      st.phase = stop->phase;
      st.layer = stop->layer;
      st.step = stop->step;
      st.seq = stop->seq;
      st.inputs = shape_strings(stop->inputs);
      st.placement = stop->placement;
      st.where = stop->str();
    }
    if (st.state == LiveSession::RankState::in_collective) {
      if (const std::optional<std::string> waits = session_.waiting_in(r)) {
        st.where = "waits in " + *waits;
      }
    }
    if (st.state == LiveSession::RankState::finished) {
      finished_status(r, st);
    } else if (st.state == LiveSession::RankState::running && stop) {
      st.where = "running since " + stop->str();
    }
    if (st.where.empty()) st.where = rank_state_name(st.state);
    if (st.state != LiveSession::RankState::finished) {
      st.summary = step_phase_text(st, o.spec.layer.layers);
    }
    s.status.push_back(std::move(st));
  }
  copy_values();
  s.tensors = values_;
  refresh_checks(s);
  return s;
}

}  // namespace

std::unique_ptr<Source> make_live_source(const RunOptions& options) {
  return std::make_unique<LiveSource>(options);
}

}  // namespace shardscope::viz
