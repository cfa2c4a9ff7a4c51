// Debugger: breakpoint matching, the stop record, and the pause/step/resume handshake between the
// rank thread (blocked in on_op_begin) and controller threads. One mutex guards all state; one
// condition variable announces every change of it.
#include "autograd/debugger.h"

#include <algorithm>
#include <sstream>

#include "autograd/errors.h"
#include "autograd/tensor.h"

namespace shardscope {
namespace {

std::string shapes_str(const std::vector<Shape>& shapes) {
  std::string out;
  for (const Shape& s : shapes) out += " " + s.str();
  return out;
}

}  // namespace

TensorSnapshot snapshot_tensor(const std::string& name, const Tensor& t) {
  TensorSnapshot s;
  s.name = name;
  if (!t.defined()) return s;
  s.describe = t.describe();
  s.shape = t.shape();
  s.values = t.to_vector();
  return s;
}

// ---- Breakpoint ----

void Breakpoint::validate() const {
  if (std::count(op.begin(), op.end(), '/') > 1) {
    throw ArgumentError("breakpoint op '" + op +
                        "': expected an op kind (\"matmul\") or one scoped name "
                        "(\"attn.qkv/matmul\"), given more than one '/'");
  }
  if (layer && *layer < -1) {
    throw ArgumentError("breakpoint layer " + std::to_string(*layer) +
                        ": expected a layer index >= 0, or -1 for ops outside any layer");
  }
}

Breakpoint Breakpoint::parse(const std::string& text) {
  std::istringstream in(text);
  std::string what, value, extra;
  in >> what >> value >> extra;
  Breakpoint b;
  bool ok = extra.empty();
  if (ok && what == "layer") {  // "layer" and "phase" are keywords, never op names
    std::size_t used = 0;
    try {
      b.layer = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ok = !value.empty() && used == value.size();
  } else if (ok && what == "phase") {
    ok = value == "forward" || value == "backward";
    b.phase = value == "forward" ? Phase::forward : Phase::backward;
  } else if (ok && !what.empty() && value.empty()) {
    b.op = what;
  } else {
    ok = false;
  }
  if (!ok) {
    throw ArgumentError("breakpoint '" + text +
                        "': expected <op> (gelu, attn.qkv/matmul, mlp.fc1/), layer <N> or phase "
                        "forward|backward");
  }
  b.validate();
  return b;
}

bool Breakpoint::matches(const Site& site) const {
  if (phase && *phase != site.phase) return false;
  if (layer && *layer != site.layer) return false;
  if (op.empty()) return true;
  const std::size_t slash = op.find('/');
  if (slash == std::string::npos) return site.op == op;
  const std::string_view name(op);
  const std::string_view op_part = name.substr(slash + 1);
  return site.scope == name.substr(0, slash) && (op_part.empty() || site.op == op_part);
}

std::string Breakpoint::str() const {
  std::string out = op.empty() ? "any op" : op;
  if (phase) out += std::string(" ") + phase_name(*phase);
  if (layer) out += " layer " + std::to_string(*layer);
  return out;
}

// ---- Stop ----

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::breakpoint:
      return "breakpoint";
    case StopReason::step:
      return "step";
    case StopReason::pause_request:
      return "pause request";
    case StopReason::first_op:
      return "first op";
    case StopReason::collective:
      return "collective";
  }
  return "?";
}

std::string Stop::name() const {
  return scope.empty() ? op : scope + "/" + op;
}

std::string Stop::str() const {
  std::string out = "stop " + std::to_string(number) + " at op " + std::to_string(op_index) + ": " +
                    name() + " " + phase_name(phase) + " (";
  if (layer >= 0) out += "layer " + std::to_string(layer) + ", ";
  out += "step " + std::to_string(step) + ", rank " + std::to_string(rank) + ")";
  if (!collective.empty()) return out + " before " + collective + " (collective)";
  out += " in" + shapes_str(inputs);
  if (!outputs.empty()) out += " out" + shapes_str(outputs);
  if (reason == StopReason::breakpoint) {
    out += " (breakpoint " + std::to_string(breakpoint_id) + ")";
  } else {
    out += std::string(" (") + stop_reason_name(reason) + ")";
  }
  return out;
}

// ---- Debugger: breakpoints ----

Debugger::Debugger(StartMode mode) : first_op_pending_(mode == StartMode::stop_at_first_op) {}

Debugger::~Debugger() {
  shutdown();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return in_hook_ == 0; });
}

int Debugger::add_breakpoint(Breakpoint breakpoint) {
  breakpoint.validate();
  std::lock_guard<std::mutex> lock(mutex_);
  BreakpointEntry entry;
  entry.id = next_breakpoint_id_++;
  entry.breakpoint = std::move(breakpoint);
  breakpoints_.push_back(std::move(entry));
  return breakpoints_.back().id;
}

bool Debugger::remove_breakpoint(int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::find_if(breakpoints_.begin(), breakpoints_.end(),
                               [&](const BreakpointEntry& e) { return e.id == id; });
  if (it == breakpoints_.end()) return false;
  breakpoints_.erase(it);
  return true;
}

void Debugger::clear_breakpoints() {
  std::lock_guard<std::mutex> lock(mutex_);
  breakpoints_.clear();
}

std::vector<BreakpointEntry> Debugger::breakpoints() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return breakpoints_;
}

// ---- Debugger: controller side ----

void Debugger::request_pause() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!paused_) pause_requested_ = true;
}

void Debugger::step() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!paused_) {
    pause_requested_ = true;
    return;
  }
  stop_at_next_op_ = true;
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

void Debugger::step_layer() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!paused_ || !current_) {
    pause_requested_ = true;
    return;
  }
  stop_outside_ = std::make_pair(current_->layer, current_->phase);
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

void Debugger::resume() {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_outside_.reset();
  stop_at_collective_ = false;
  stop_at_next_op_ = false;
  pause_requested_ = false;
  first_op_pending_ = false;
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

std::optional<Stop> Debugger::wait_for_stop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return paused_ || finished_ || shut_down_; });
  if (paused_) return current_;
  return std::nullopt;
}

bool Debugger::paused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return paused_;
}

std::optional<Stop> Debugger::current_stop() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_;
}

std::uint64_t Debugger::stop_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_count_;
}

std::optional<Stop> Debugger::last_stop() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_;
}

std::uint64_t Debugger::collectives_entered() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return collectives_entered_;
}

void Debugger::shutdown() {
  std::lock_guard<std::mutex> lock(mutex_);
  shut_down_ = true;
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

bool Debugger::is_shut_down() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return shut_down_;
}

// ---- Debugger: rank side ----

void Debugger::mark_finished() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

void Debugger::mark_running() {
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = false;
}

bool Debugger::finished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_;
}

std::optional<StopReason> Debugger::stop_reason(const Site& site, int& breakpoint_id) {
  breakpoint_id = -1;
  for (BreakpointEntry& e : breakpoints_) {
    if (!e.breakpoint.matches(site)) continue;
    ++e.hits;
    if (breakpoint_id < 0) breakpoint_id = e.id;
  }
  if (breakpoint_id >= 0) return StopReason::breakpoint;
  if (stop_at_next_op_) return StopReason::step;
  if (stop_outside_ && (site.layer != stop_outside_->first || site.phase != stop_outside_->second))
    return StopReason::step;
  if (pause_requested_) return StopReason::pause_request;
  if (first_op_pending_) return StopReason::first_op;
  return std::nullopt;
}

Stop Debugger::stop_at(const Site& site, std::uint64_t seq, StopReason reason) const {
  Stop s;
  s.op = std::string(site.op);
  s.scope = std::string(site.scope);
  s.phase = site.phase;
  s.layer = site.layer;
  s.step = site.step;
  s.rank = site.rank;
  s.seq = seq;
  s.op_index = op_count_;
  s.reason = reason;
  return s;
}

Stop Debugger::make_stop(const OpEvent& event, StopReason reason, int breakpoint_id) const {
  Stop s = stop_at(event.site, event.seq, reason);
  if (event.inputs) s.inputs = *event.inputs;
  if (event.outputs) s.outputs = *event.outputs;
  s.placement = std::string(event.placement);
  s.breakpoint_id = breakpoint_id;
  return s;
}

void Debugger::throw_if_cancelled() const {
  if (!cancelled_.empty()) throw DebugCancelled(cancelled_);
}

void Debugger::pause_here(std::unique_lock<std::mutex>& lock, Stop stop) {
  stop_outside_.reset();
  stop_at_next_op_ = false;
  pause_requested_ = false;
  first_op_pending_ = false;
  stop_at_collective_ = false;
  ++stop_count_;
  stop.number = stop_count_;
  last_ = stop;
  current_ = std::move(stop);
  paused_ = true;
  ++in_hook_;
  changed_.notify_all();
  // Only this thread sets paused_; a controller clears it (step, resume, shutdown, cancel).
  changed_.wait(lock, [&] { return !paused_; });
  --in_hook_;
  changed_.notify_all();
}

void Debugger::on_op_begin(const OpEvent& event) {
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_cancelled();
  if (shut_down_) return;
  ++op_count_;
  running_.push_back({event.seq, event.site.phase, event.input_tensors});
  int breakpoint_id = -1;
  const std::optional<StopReason> reason = stop_reason(event.site, breakpoint_id);
  if (!reason) return;
  pause_here(lock, make_stop(event, *reason, breakpoint_id));
  watch_outputs_ = std::make_pair(event.seq, event.site.phase);
  watched_op_index_ = op_count_;
  throw_if_cancelled();
}

void Debugger::on_op_end(const OpEvent& event) {
  std::lock_guard<std::mutex> lock(mutex_);
  // This op and any begun inside it that did not end (a begin hook that threw).
  for (std::size_t i = running_.size(); i-- > 0;) {
    if (running_[i].seq == event.seq && running_[i].phase == event.site.phase) {
      running_.resize(i);
      break;
    }
  }
  if (!watch_outputs_ || watch_outputs_->first != event.seq ||
      watch_outputs_->second != event.site.phase) {
    return;
  }
  watch_outputs_.reset();
  last_outputs_.clear();
  last_outputs_op_index_ = watched_op_index_;
  if (!event.output_tensors) return;  // the op threw
  const std::string of = " of " +
                         (event.site.scope.empty()
                              ? std::string(event.site.op)
                              : std::string(event.site.scope) + "/" + std::string(event.site.op)) +
                         " " + phase_name(event.site.phase) + ", the op run just before";
  for (std::size_t i = 0; i < event.output_tensors->size(); ++i) {
    const Tensor& t = (*event.output_tensors)[i];
    if (!t.defined()) continue;
    last_outputs_.push_back(snapshot_tensor("output" + std::to_string(i), t));
    last_outputs_.back().what =
        (event.site.phase == Phase::forward ? "output " : "gradient flowing out ") +
        std::to_string(i) + of;
  }
}

std::vector<TensorSnapshot> Debugger::op_tensors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorSnapshot> out;
  if (!paused_ || !current_) return out;
  const std::string of = " of " + current_->name() + " " + phase_name(current_->phase);
  // The innermost op running is the one paused before (its begin hook pushed it) or the one
  // issuing the collective paused before.
  const std::vector<Tensor>* inputs = nullptr;
  if (!running_.empty() && running_.back().seq == current_->seq &&
      running_.back().phase == current_->phase) {
    inputs = running_.back().inputs;
  }
  if (inputs) {
    for (std::size_t i = 0; i < inputs->size(); ++i) {
      const Tensor& t = (*inputs)[i];
      if (!t.defined()) continue;
      out.push_back(snapshot_tensor("input" + std::to_string(i), t));
      out.back().what = (current_->phase == Phase::forward ? "input " : "gradient flowing in ") +
                        std::to_string(i) + of;
    }
  }
  // The outputs of the op just before this one, when it was the op a stop released.
  if (last_outputs_op_index_ + 1 == current_->op_index)
    out.insert(out.end(), last_outputs_.begin(), last_outputs_.end());
  return out;
}

void Debugger::on_collective_begin(const CollectiveEvent& event) {
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_cancelled();
  ++collectives_entered_;
  const std::string call = std::string(collective_name(event.kind)) + "(count " +
                           std::to_string(event.count) + ", " + dtype_name(event.dtype) + ", " +
                           std::to_string(event.group_size) + " ranks, " +
                           comm_purpose_name(event.purpose) + ")";
  waiting_in_ = call + " from " + std::string(event.site.op) +
                (event.site.scope.empty() ? "" : " in " + std::string(event.site.scope));
  changed_.notify_all();
  if (shut_down_ || !stop_at_collective_) return;
  // ProcessGroup leaves the issuing op's number 0: it is the innermost op running.
  const std::uint64_t seq = event.seq || running_.empty() ? event.seq : running_.back().seq;
  Stop s = stop_at(event.site, seq, StopReason::collective);
  s.collective = call;
  pause_here(lock, std::move(s));
  throw_if_cancelled();
}

void Debugger::on_collective(const CollectiveEvent&) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_in_.reset();
  changed_.notify_all();
}

void Debugger::run_to_next_collective() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shut_down_) return;
  stop_at_collective_ = true;
  stop_at_next_op_ = false;
  pause_requested_ = false;
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

void Debugger::cancel(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = reason.empty() ? std::string("debug session cancelled") : reason;
  paused_ = false;
  current_.reset();
  changed_.notify_all();
}

std::optional<std::string> Debugger::waiting_in() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_in_;
}

}  // namespace shardscope
