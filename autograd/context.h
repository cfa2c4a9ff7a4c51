// Context: the per-rank state of the engine. It owns the backend, the observer list, grad mode
// and where the engine is (scope, layer, phase, step). There are no globals: every tensor points
// to the Context that made it, and a Context must outlive its tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autograd/dtype.h"
#include "autograd/observer.h"

namespace shardscope {

class Backend;
class Storage;
class Tensor;

// "op 'matmul' in attn.qkv (layer 0, forward, rank 0)": where an error happened, one format for
// forward ops (Context::where) and backward nodes (Node::where).
std::string format_where(std::string_view op, std::string_view scope, int layer, Phase phase,
                         int rank);

class Context {
 public:
  explicit Context(int rank = 0, Device device = Device::cpu());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const { return rank_; }
  Device device() const { return device_; }
  Backend& backend() const { return *backend_; }

  void add_observer(Observer* observer);
  void remove_observer(Observer* observer);
  bool observed() const { return !observers_.empty(); }
  template <class F>
  void notify(F&& call) const {
    for (Observer* o : observers_) call(*o);
  }

  // The numerical guard: when on, every forward op checks its outputs and the backward pass every
  // gradient for NaN and Inf, and the first one throws NumericalError (check_finite below). Off
  // by default, where it costs one branch per op.
  bool check_finite() const { return check_finite_; }
  void set_check_finite(bool on) { check_finite_ = on; }

  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool enabled) { grad_enabled_ = enabled; }
  Phase phase() const { return phase_; }
  void set_phase(Phase phase) { phase_ = phase; }
  int layer() const { return layer_; }
  void set_layer(int layer) { layer_ = layer; }
  std::int64_t step() const { return step_; }
  void set_step(std::int64_t step) { step_ = step; }
  const std::string& scope() const { return scope_; }
  void push_scope(const std::string& name);
  void pop_scope();
  // Replaces the whole scope path (the engine runs each backward node in its forward scope) and
  // returns the previous one; put it back before an enclosing ScopeGuard ends.
  std::string exchange_scope(std::string scope);
  const std::string& current_op() const { return current_op_; }
  void set_current_op(std::string op) { current_op_ = std::move(op); }
  std::uint64_t next_seq() { return ++seq_; }
  std::uint64_t next_storage_id() { return ++storage_ids_; }

  // Where the engine is now, for events and error messages.
  Site site() const;
  // "op 'matmul' in attn.qkv (layer 0, forward, rank 0)"
  std::string where(std::string_view op) const;

  // Allocates zero-initialised memory on this context's device and reports it to observers. A
  // backend's OutOfMemoryError comes back with the current op added ("... in op 'matmul' ...").
  std::shared_ptr<Storage> allocate(std::size_t bytes, MemoryCategory category, bool zeroed = true);

 private:
  int rank_;
  Device device_;
  std::unique_ptr<Backend> backend_;
  std::vector<Observer*> observers_;
  std::vector<std::size_t> scope_lengths_;
  std::string scope_;
  std::string current_op_;
  bool grad_enabled_ = true;
  bool check_finite_ = false;
  Phase phase_ = Phase::forward;
  int layer_ = -1;
  std::int64_t step_ = 0;
  std::uint64_t seq_ = 0;
  std::uint64_t storage_ids_ = 0;
};

// The non-finite elements of a tensor (NaN and Inf), for the numerical guard.
struct NonFiniteCount {
  std::int64_t nan = 0;
  std::int64_t inf = 0;
  std::int64_t first = -1;  // flat index of the first one; -1 when every element is finite
  double first_value = 0;
  bool any() const { return first >= 0; }
};
// Scans a floating tensor (f32, f64, bf16, f16) on any device (through copy_to_host off the CPU);
// integer and undefined tensors count nothing.
NonFiniteCount count_non_finite(const Tensor& t);
// Throws NumericalError when `t` holds NaN or Inf: "<where>: <what> f32[2, 3] is not finite at
// step 4: 2 of 6 elements (1 NaN, 1 Inf), the first at [0, 1] = inf" followed by `hint` when not
// empty. `where` is Context::where or Node::where, `what` says which tensor ("output 0",
// "gradient of input 1").
void check_finite(const Tensor& t, const std::string& where, const std::string& what,
                  const std::string& hint = {});
// The part of that message after `what`: "f32[2, 3] is not finite at step 4: ..." (no hint).
std::string describe_non_finite(const Tensor& t, const NonFiniteCount& count);

// Disables graph recording in a scope (optimizer steps, evaluation).
class NoGradGuard {
 public:
  explicit NoGradGuard(Context& ctx) : ctx_(ctx), previous_(ctx.grad_enabled()) {
    ctx.set_grad_enabled(false);
  }
  ~NoGradGuard() { ctx_.set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  Context& ctx_;
  bool previous_;
};

// Names the module the ops inside it belong to: ScopeGuard s(ctx, "attn") then "qkv" -> "attn.qkv".
class ScopeGuard {
 public:
  ScopeGuard(Context& ctx, const std::string& name) : ctx_(ctx) { ctx.push_scope(name); }
  ~ScopeGuard() { ctx_.pop_scope(); }
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  Context& ctx_;
};

// Tags the ops inside it with a layer index.
class LayerGuard {
 public:
  LayerGuard(Context& ctx, int layer) : ctx_(ctx), previous_(ctx.layer()) { ctx.set_layer(layer); }
  ~LayerGuard() { ctx_.set_layer(previous_); }
  LayerGuard(const LayerGuard&) = delete;
  LayerGuard& operator=(const LayerGuard&) = delete;

 private:
  Context& ctx_;
  int previous_;
};

// Keeps where the engine is (phase, gradient mode, layer, current op and scope) and puts it back on
// exit, also when an exception leaves: for the work that sets them all for itself, a backward and
// a recomputation inside one.
class EngineStateGuard {
 public:
  explicit EngineStateGuard(Context& ctx)
      : ctx_(ctx),
        phase_(ctx.phase()),
        grad_(ctx.grad_enabled()),
        layer_(ctx.layer()),
        op_(ctx.current_op()),
        scope_(ctx.scope()) {}
  ~EngineStateGuard() {
    ctx_.set_phase(phase_);
    ctx_.set_grad_enabled(grad_);
    ctx_.set_layer(layer_);
    ctx_.set_current_op(op_);
    ctx_.exchange_scope(scope_);
  }
  EngineStateGuard(const EngineStateGuard&) = delete;
  EngineStateGuard& operator=(const EngineStateGuard&) = delete;

 private:
  Context& ctx_;
  Phase phase_;
  bool grad_;
  int layer_;
  std::string op_;
  std::string scope_;
};

// Names the work done outside any op (a collective a layer issues itself, a check) as the op
// `op`, in `phase`, for logs, events and errors; restores the previous op and phase on exit,
// also when the work throws.
class CurrentOpGuard {
 public:
  CurrentOpGuard(Context& ctx, std::string op, Phase phase)
      : ctx_(ctx), op_(ctx.current_op()), phase_(ctx.phase()) {
    ctx.set_current_op(std::move(op));
    ctx.set_phase(phase);
  }
  CurrentOpGuard(Context& ctx, std::string op) : CurrentOpGuard(ctx, std::move(op), ctx.phase()) {}
  ~CurrentOpGuard() {
    ctx_.set_current_op(op_);
    ctx_.set_phase(phase_);
  }
  CurrentOpGuard(const CurrentOpGuard&) = delete;
  CurrentOpGuard& operator=(const CurrentOpGuard&) = delete;

 private:
  Context& ctx_;
  std::string op_;
  Phase phase_;
};

// Attaches an observer for the lifetime of the guard.
class ObserverGuard {
 public:
  ObserverGuard(Context& ctx, Observer& observer) : ctx_(ctx), observer_(observer) {
    ctx.add_observer(&observer);
  }
  ~ObserverGuard() { ctx_.remove_observer(&observer_); }
  ObserverGuard(const ObserverGuard&) = delete;
  ObserverGuard& operator=(const ObserverGuard&) = delete;

 private:
  Context& ctx_;
  Observer& observer_;
};

}  // namespace shardscope
