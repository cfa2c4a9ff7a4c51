// Every rank of a threads run under its own Debugger, driven together.
#include "apps/live_session.h"

#include <algorithm>
#include <thread>

namespace shardscope {

// What the session knows of one rank: its debugger and what its run showed the inspector.
struct LiveSession::RankSlot {
  Debugger debugger{Debugger::StartMode::stop_at_first_op};
  bool started = false;  // guarded by mutex
  mutable std::mutex mutex;
  const MemoryLedger* ledger = nullptr;
  const CommLog* comm = nullptr;
  std::map<std::string, ParallelTensor> tensors;
  std::optional<CheckResult> check;
  std::map<std::string, FinalTensor> final_tensors;  // copied at detach
  std::optional<RankRun> result;
};

namespace {

// Host copies of the named tensors (and the parameters' gradients), so they outlive the run.
std::map<std::string, FinalTensor> keep_final(const std::map<std::string, ParallelTensor>& named) {
  std::map<std::string, FinalTensor> kept;
  for (const auto& [name, t] : named) {
    const std::string grad = name + ".grad";
    for (const auto& [n, local] : {std::pair(name, t.local), std::pair(grad, t.local.grad())}) {
      if (!local.defined()) continue;
      FinalTensor f{snapshot_tensor(n, local), t.placement.str(), t.global.str()};
      f.snapshot.what = n + " as the run ended";
      kept[n] = std::move(f);
    }
  }
  return kept;
}

}  // namespace

std::string rank_failure(int rank, const std::string& what) {
  const std::string prefix = "rank " + std::to_string(rank) + ": ";
  return what.rfind(prefix, 0) == 0 ? what : prefix + what;
}

class LiveSession::Inspector final : public RunInspector {
 public:
  explicit Inspector(std::vector<std::unique_ptr<RankSlot>>& slots) : slots_(slots) {}
  void attach(int rank, const MemoryLedger& ledger, const CommLog& comm) override {
    RankSlot& s = slot(rank);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ledger = &ledger;
    s.comm = &comm;
  }
  void tensor(int rank, const std::string& name, const ParallelTensor& t) override {
    RankSlot& s = slot(rank);
    std::lock_guard<std::mutex> lock(s.mutex);
    if (t.local.defined()) {
      s.tensors[name] = t;
    } else {
      s.tensors.erase(name);
    }
  }
  void check(int rank, const CheckResult& result) override {
    RankSlot& s = slot(rank);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.check = result;
  }
  void detach(int rank) override {
    RankSlot& s = slot(rank);
    std::lock_guard<std::mutex> lock(s.mutex);
    s.final_tensors = keep_final(s.tensors);
    s.tensors.clear();  // they belong to the rank's context, which is about to go
    s.ledger = nullptr;
    s.comm = nullptr;
  }

 private:
  RankSlot& slot(int rank) { return *slots_[static_cast<std::size_t>(rank)]; }
  std::vector<std::unique_ptr<RankSlot>>& slots_;
};

const char* live_rank_state_name(LiveSession::RankState s) {
  switch (s) {
    case LiveSession::RankState::not_started:
      return "not started";
    case LiveSession::RankState::running:
      return "running";
    case LiveSession::RankState::paused:
      return "paused";
    case LiveSession::RankState::in_collective:
      return "in collective";
    case LiveSession::RankState::finished:
      return "finished";
  }
  return "?";
}

LiveSession::LiveSession(const RunOptions& options, Observer* observer)
    : options_(options), observer_(observer) {
  if (options.backend == DeviceKind::cuda) {
    throw ArgumentError(
        std::string("a live session runs its ranks as threads on host memory: --backend "
                    "must be cpu or reference, given ") +
        backend_name(options.backend));
  }
  if (options.comm != CommKind::threads) {
    throw ArgumentError("a live session runs its ranks as threads: --comm must be threads, given " +
                        std::string(comm_kind_name(options.comm)));
  }
  if (options.fault) {
    throw ArgumentError(
        "--inject-fault applies to shardscope run: a live session's collectives wait for "
        "paused ranks without a timeout");
  }
  options_.validate();
  for (int r = 0; r < options.spec.layer.degree; ++r) {
    slots_.push_back(std::make_unique<RankSlot>());
  }
  inspector_ = std::make_unique<Inspector>(slots_);
}

LiveSession::~LiveSession() {
  finish();
}

void LiveSession::start() {
  start_clock();
  runner_ = std::thread([this] {
    SpmdOptions spmd;
    spmd.timeout = std::chrono::hours(24);  // a paused peer is not a dead one
    try {
      run_spmd(options_.spec.layer.degree, spmd, [&](RankEnv& env) {
        RankSlot& slot = *slots_[static_cast<std::size_t>(env.rank)];
        {
          std::lock_guard<std::mutex> lock(slot.mutex);
          slot.started = true;
        }
        std::optional<ObserverGuard> attach_observer;
        if (observer_) attach_observer.emplace(env.ctx, *observer_);
        ObserverGuard attach(env.ctx, slot.debugger);
        DebugRunGuard run(slot.debugger);
        try {
          RankRun result = run_layer_rank(env, options_.spec, inspector_.get());
          std::lock_guard<std::mutex> lock(slot.mutex);
          slot.result = std::move(result);
        } catch (const DebugCancelled&) {
          throw;
        } catch (const std::exception& e) {
          // Shown at once, while the other ranks may still sit paused.
          std::lock_guard<std::mutex> lock(error_mutex_);
          if (error_.empty()) error_ = rank_failure(env.rank, e.what());
          throw;
        }
      });
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (error_.empty()) error_ = e.what();
    }
  });
}

void LiveSession::start_clock() {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  if (clock_running_) return;
  clock_running_ = true;
  clock_since_ = std::chrono::steady_clock::now();
}

void LiveSession::stop_clock() const {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  if (!clock_running_) return;
  clock_running_ = false;
  clock_total_ += std::chrono::steady_clock::now() - clock_since_;
}

std::chrono::steady_clock::time_point LiveSession::active_now() const {
  std::lock_guard<std::mutex> lock(clock_mutex_);
  auto t = clock_total_;
  if (clock_running_) t += std::chrono::steady_clock::now() - clock_since_;
  return std::chrono::steady_clock::time_point(t);
}

void LiveSession::step() {
  start_clock();
  for (auto& s : slots_) {
    if (s->debugger.paused()) s->debugger.step();
  }
}

void LiveSession::next_collective() {
  start_clock();
  for (auto& s : slots_) s->debugger.run_to_next_collective();
}

void LiveSession::step_layer() {
  start_clock();
  for (auto& s : slots_) {
    if (s->debugger.paused()) s->debugger.step_layer();
  }
}

void LiveSession::resume() {
  start_clock();
  for (auto& s : slots_) s->debugger.resume();
}

void LiveSession::pause() {
  for (auto& s : slots_) s->debugger.request_pause();
}

int LiveSession::add_breakpoint(const Breakpoint& breakpoint) {
  breakpoint.validate();
  int id = 0;
  for (auto& s : slots_) id = s->debugger.add_breakpoint(breakpoint);
  return id;
}

void LiveSession::clear_breakpoints() {
  for (auto& s : slots_) s->debugger.clear_breakpoints();
}

bool LiveSession::remove_breakpoint(int id) {
  bool removed = false;
  for (auto& s : slots_) removed = s->debugger.remove_breakpoint(id) || removed;
  return removed;
}

std::vector<BreakpointEntry> LiveSession::breakpoints(int rank) const {
  return slots_.at(static_cast<std::size_t>(rank))->debugger.breakpoints();
}

std::vector<TensorSnapshot> LiveSession::op_tensors(int rank) const {
  return slots_.at(static_cast<std::size_t>(rank))->debugger.op_tensors();
}

std::map<std::string, FinalTensor> LiveSession::final_tensors(int rank) const {
  const RankSlot& s = *slots_.at(static_cast<std::size_t>(rank));
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.final_tensors;
}

std::optional<RankRun> LiveSession::result(int rank) const {
  const RankSlot& s = *slots_.at(static_cast<std::size_t>(rank));
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.result;
}

LiveSession::RankState LiveSession::state(int rank) const {
  const RankSlot& s = *slots_.at(static_cast<std::size_t>(rank));
  if (s.debugger.finished()) return RankState::finished;
  if (s.debugger.paused()) return RankState::paused;
  if (s.debugger.waiting_in()) return RankState::in_collective;
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.started ? RankState::running : RankState::not_started;
}

std::optional<Stop> LiveSession::stop(int rank) const {
  return slots_.at(static_cast<std::size_t>(rank))->debugger.current_stop();
}

std::optional<Stop> LiveSession::last_stop(int rank) const {
  return slots_.at(static_cast<std::size_t>(rank))->debugger.last_stop();
}

std::optional<std::string> LiveSession::waiting_in(int rank) const {
  return slots_.at(static_cast<std::size_t>(rank))->debugger.waiting_in();
}

bool LiveSession::settled() const {
  struct Seen {
    RankState state;
    std::uint64_t entered;        // collectives entered
    bool at_collective_entrance;  // paused by run_to_next_collective, inside on_collective_begin
  };
  std::vector<Seen> seen;
  for (int r = 0; r < ranks(); ++r) {
    const Debugger& d = slots_[static_cast<std::size_t>(r)]->debugger;
    const std::optional<Stop> stop = d.current_stop();
    seen.push_back(
        {state(r), d.collectives_entered(), stop && stop->reason == StopReason::collective});
  }
  for (const Seen& s : seen) {
    if (s.state == RankState::running || s.state == RankState::not_started) return false;
    if (s.state != RankState::in_collective) continue;
    // A rank in a collective is settled only while a paused rank holds that collective up; a
    // rank that has left it but not yet told its debugger is still moving.
    const bool held = std::any_of(seen.begin(), seen.end(), [&](const Seen& p) {
      return p.state == RankState::paused &&
             (p.entered < s.entered || (p.entered == s.entered && p.at_collective_entrance));
    });
    if (!held) return false;
  }
  stop_clock();
  return true;
}

bool LiveSession::wait_settled(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int stable = 0;  // settled twice in a row, 2 ms apart
  while (stable < 2) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    stable = settled() ? stable + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

bool LiveSession::all_finished() const {
  for (const auto& s : slots_) {
    if (!s->debugger.finished()) return false;
  }
  return true;
}

void LiveSession::with_tensors(
    int rank, const std::function<void(const std::map<std::string, ParallelTensor>&)>& fn) const {
  const RankSlot& s = *slots_.at(static_cast<std::size_t>(rank));
  std::lock_guard<std::mutex> lock(s.mutex);
  fn(s.tensors);
}

void LiveSession::with_accounting(
    int rank, const std::function<void(const MemoryLedger*, const CommLog*)>& fn) const {
  const RankSlot& s = *slots_.at(static_cast<std::size_t>(rank));
  std::lock_guard<std::mutex> lock(s.mutex);
  fn(s.ledger, s.comm);
}

std::optional<CheckResult> LiveSession::check_result() const {
  const RankSlot& s = *slots_.front();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.check;
}

std::string LiveSession::finish(const std::string& reason) {
  if (finished_) return cancelled_ ? std::string() : error();
  finished_ = true;
  if (runner_.joinable()) {
    if (!all_finished()) {
      cancelled_ = true;
      for (auto& s : slots_) s->debugger.cancel(reason);
    }
    runner_.join();
  }
  return cancelled_ ? std::string() : error();
}

std::string LiveSession::error() const {
  std::lock_guard<std::mutex> lock(error_mutex_);
  return error_;
}

}  // namespace shardscope
