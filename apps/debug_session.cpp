// The terminal step debugger over every rank of a threads run.
#include "apps/debug_session.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "autograd/debugger.h"
#include "parallel/memory_model.h"

namespace shardscope {
namespace {

using Clock = std::chrono::steady_clock;

const char* kHelp =
    "commands: step, next-collective, continue, break <op|layer N|phase forward|backward>, "
    "where, print <tensor>, mem, comm, quit";

// What the session knows of one rank: its debugger and what its run showed the inspector.
struct RankSlot {
  Debugger debugger{Debugger::StartMode::stop_at_first_op};
  mutable std::mutex mutex;
  const MemoryLedger* ledger = nullptr;
  const CommLog* comm = nullptr;
  std::map<std::string, ParallelTensor> tensors;
};

class SessionInspector final : public RunInspector {
 public:
  explicit SessionInspector(std::vector<std::unique_ptr<RankSlot>>& slots) : slots_(slots) {}
  void attach(int rank, const MemoryLedger& ledger, const CommLog& comm) override {
    RankSlot& s = *slots_[static_cast<std::size_t>(rank)];
    std::lock_guard<std::mutex> lock(s.mutex);
    s.ledger = &ledger;
    s.comm = &comm;
  }
  void tensor(int rank, const std::string& name, const ParallelTensor& t) override {
    RankSlot& s = *slots_[static_cast<std::size_t>(rank)];
    std::lock_guard<std::mutex> lock(s.mutex);
    s.tensors[name] = t;
  }
  void detach(int rank) override {
    RankSlot& s = *slots_[static_cast<std::size_t>(rank)];
    std::lock_guard<std::mutex> lock(s.mutex);
    s.tensors.clear();
    s.ledger = nullptr;
    s.comm = nullptr;
  }

 private:
  std::vector<std::unique_ptr<RankSlot>>& slots_;
};

enum class RankState { running, paused, in_collective, finished };

RankState state_of(const Debugger& d) {
  if (d.finished()) return RankState::finished;
  if (d.paused()) return RankState::paused;
  if (d.waiting_in()) return RankState::in_collective;
  return RankState::running;
}

class Session {
 public:
  Session(const RunOptions& options, std::ostream& out) : options_(options), out_(out) {
    for (int r = 0; r < options.spec.layer.degree; ++r) {
      slots_.push_back(std::make_unique<RankSlot>());
    }
  }
  void start();
  bool command(const std::string& line);  // false: quit
  int finish();

 private:
  bool settled() const;
  void wait_settled(std::chrono::seconds limit);
  void where() const;
  void add_break(std::istringstream& args);
  void print_tensor(const std::string& name) const;
  void mem() const;
  void comm() const;

  RunOptions options_;
  std::ostream& out_;
  std::vector<std::unique_ptr<RankSlot>> slots_;
  std::thread runner_;
  std::mutex error_mutex_;
  std::string error_;
  bool cancelled_ = false;
};

void Session::start() {
  runner_ = std::thread([this] {
    SpmdOptions spmd;
    spmd.timeout = std::chrono::hours(24);  // a paused peer is not a dead one
    SessionInspector inspector(slots_);
    try {
      run_spmd(options_.spec.layer.degree, spmd, [&](RankEnv& env) {
        RankSlot& slot = *slots_[static_cast<std::size_t>(env.rank)];
        ObserverGuard attach(env.ctx, slot.debugger);
        DebugRunGuard run(slot.debugger);
        run_layer_rank(env, options_.spec, &inspector);
      });
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      error_ = e.what();
    }
  });
  wait_settled(std::chrono::seconds(60));
  out_ << "shardscope debug: " << slots_.size() << " rank(s), mode "
       << mode_name(options_.spec.layer.mode) << ", paused before the first op\n"
       << kHelp << "\n";
  where();
}

bool Session::settled() const {
  bool any_paused_or_done = false;
  for (const auto& s : slots_) {
    const RankState st = state_of(s->debugger);
    if (st == RankState::running) return false;
    any_paused_or_done = any_paused_or_done || st != RankState::in_collective;
  }
  return any_paused_or_done;  // all in a collective at once is a collective in progress
}

void Session::wait_settled(std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int stable = 0;  // settled twice in a row, 5 ms apart
  while (Clock::now() < deadline && stable < 2) {
    stable = settled() ? stable + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (stable < 2) out_ << "(ranks still running after " << limit.count() << " s)\n";
}

void Session::where() const {
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    const Debugger& d = slots_[r]->debugger;
    out_ << "rank " << r << ": ";
    switch (state_of(d)) {
      case RankState::finished:
        out_ << "finished\n";
        break;
      case RankState::paused:
        out_ << "paused, " << d.current_stop()->str() << "\n";
        break;
      case RankState::in_collective:
        out_ << "waits in " << *d.waiting_in() << "\n";
        break;
      case RankState::running:
        out_ << "running\n";
        break;
    }
  }
}

void Session::add_break(std::istringstream& args) {
  std::string what, value;
  args >> what >> value;
  Breakpoint b;
  if (what == "layer" && !value.empty()) {
    b.layer = std::stoi(value);
  } else if (what == "phase" && (value == "forward" || value == "backward")) {
    b.phase = value == "forward" ? Phase::forward : Phase::backward;
  } else if (!what.empty() && value.empty()) {
    b.op = what;
  } else {
    out_ << "break needs <op>, layer <N> or phase forward|backward\n";
    return;
  }
  int id = 0;
  for (auto& s : slots_) id = s->debugger.add_breakpoint(b);
  out_ << "breakpoint " << id << ": " << b.str() << ", on every rank\n";
}

void Session::print_tensor(const std::string& name) const {
  const bool grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
  const std::string base = grad ? name.substr(0, name.size() - 5) : name;
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    std::lock_guard<std::mutex> lock(slots_[r]->mutex);
    const auto it = slots_[r]->tensors.find(base);
    const Tensor t = it == slots_[r]->tensors.end() ? Tensor()
                     : grad                         ? it->second.local.grad()
                                                    : it->second.local;
    if (!t.defined()) {
      out_ << "rank " << r << ": no tensor '" << name << "' yet (try input, output, a parameter "
           << "such as attn.qkv.weight, or its .grad)\n";
      continue;
    }
    const std::vector<double> v = t.to_vector();
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x), sum += x;
    char line[160];
    std::snprintf(line, sizeof line, "min %.6g max %.6g mean %.6g", lo, hi,
                  v.empty() ? 0.0 : sum / static_cast<double>(v.size()));
    out_ << "rank " << r << ": " << name << " " << it->second.placement.str() << " of "
         << it->second.global.str() << ", local " << t.describe() << ", " << line << ", first:";
    for (std::size_t i = 0; i < v.size() && i < 6; ++i) out_ << " " << v[i];
    out_ << "\n";
  }
}

void Session::mem() const {
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    std::lock_guard<std::mutex> lock(slots_[r]->mutex);
    const MemoryLedger* ledger = slots_[r]->ledger;
    if (!ledger) {
      out_ << "rank " << r << ": " << (slots_[r]->debugger.finished() ? "finished" : "not started")
           << "\n";
      continue;
    }
    out_ << "rank " << r << ": live " << ledger->live_total() << " B (peak " << ledger->peak_total()
         << " B):";
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      const auto cat = static_cast<MemoryCategory>(c);
      if (ledger->live(cat) > 0)
        out_ << " " << memory_category_name(cat) << " " << ledger->live(cat);
    }
    out_ << "; saved activations of layer " << options_.spec.layer.layer << " now "
         << ledger->saved_activation_bytes(options_.spec.layer.layer) << " B\n";
  }
}

void Session::comm() const {
  for (std::size_t r = 0; r < slots_.size(); ++r) {
    std::lock_guard<std::mutex> lock(slots_[r]->mutex);
    if (!slots_[r]->comm) {
      out_ << "rank " << r << ": " << (slots_[r]->debugger.finished() ? "finished" : "not started")
           << "\n";
      continue;
    }
    const std::vector<CommLine> lines = slots_[r]->comm->lines();
    out_ << "rank " << r << ": " << (lines.empty() ? "no collectives yet" : "") << "\n";
    for (const CommLine& l : lines) {
      out_ << "  " << collective_name(l.kind) << " " << phase_name(l.phase) << " "
           << comm_purpose_name(l.purpose) << ": " << l.count << " call(s), " << l.bytes_sent
           << " B sent\n";
    }
  }
}

bool Session::command(const std::string& line) {
  std::istringstream args(line);
  std::string cmd;
  args >> cmd;
  if (cmd.empty()) return true;
  out_ << "> " << line << "\n";
  if (cmd == "quit" || cmd == "q") return false;
  if (cmd == "step" || cmd == "s") {
    for (auto& s : slots_) {
      if (s->debugger.paused()) s->debugger.step();
    }
    wait_settled(std::chrono::seconds(60));
    where();
  } else if (cmd == "next-collective" || cmd == "nc") {
    for (auto& s : slots_) s->debugger.run_to_next_collective();
    wait_settled(std::chrono::seconds(600));
    where();
  } else if (cmd == "continue" || cmd == "c") {
    for (auto& s : slots_) s->debugger.resume();
    wait_settled(std::chrono::seconds(3600));
    where();
  } else if (cmd == "break" || cmd == "b") {
    add_break(args);
  } else if (cmd == "where" || cmd == "w") {
    where();
  } else if (cmd == "print" || cmd == "p") {
    std::string name;
    args >> name;
    print_tensor(name);
  } else if (cmd == "mem") {
    mem();
  } else if (cmd == "comm") {
    comm();
  } else {
    out_ << "unknown command '" << cmd << "'; " << kHelp << "\n";
  }
  return true;
}

int Session::finish() {
  bool all_finished = true;
  for (auto& s : slots_) all_finished = all_finished && s->debugger.finished();
  if (!all_finished) {
    cancelled_ = true;
    for (auto& s : slots_) s->debugger.cancel("debug session ended by quit");
  }
  runner_.join();
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (!error_.empty() && !cancelled_) {
    out_ << "the run failed: " << error_ << "\n";
    return 1;
  }
  out_ << (cancelled_ ? "debug session ended; the run was stopped\n" : "the run finished\n");
  return 0;
}

}  // namespace

int debug_main(const RunOptions& options, std::istream& in, std::ostream& out) {
  if (options.comm != CommKind::threads) {
    throw ArgumentError("shardscope debug runs its ranks as threads: --comm must be threads");
  }
  Session session(options, out);
  session.start();
  std::string line;
  while (std::getline(in, line) && session.command(line)) {
  }
  return session.finish();
}

}  // namespace shardscope
