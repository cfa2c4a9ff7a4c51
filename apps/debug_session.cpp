// The terminal step debugger over every rank of a threads run.
#include "apps/debug_session.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "apps/line_reader.h"
#include "apps/live_session.h"
#include "apps/op_sites.h"
#include "autograd/debugger.h"
#include "parallel/models/memory_model.h"

namespace shardscope {
namespace {

const char* kHelp =
    "commands: step [N], next-collective, continue, break <op|layer N|phase forward|backward>, "
    "delete [N], info breakpoints, where, print <tensor>, mem, comm, help, quit";

const char* kLongHelp =
    "  step [N]           (s) every paused rank runs one op (N ops) and stops again\n"
    "  next-collective    (nc) every rank runs to just before its next collective\n"
    "  continue           (c) every rank runs to a breakpoint or the end\n"
    "  break <what>       (b) on every rank: an op kind (gelu), a scoped name (attn.qkv/matmul),\n"
    "                     a scope (mlp.fc1/), layer N, or phase forward|backward\n"
    "  delete [N]         (d) breakpoint N; every breakpoint without N\n"
    "  info breakpoints   (i b) the breakpoints and their hits per rank\n"
    "  where              (w) each rank's op, or the collective it waits in\n"
    "  print <tensor>     (p) per rank: input0, input1.. of the op paused at; output0.. of the op\n"
    "                     just run; input, output, a parameter (attn.qkv.weight) or its .grad\n"
    "  mem                each rank's live bytes by category\n"
    "  comm               each rank's collectives so far\n"
    "  help               (h) this list\n"
    "  quit               (q) stop the run (also at the end of the input)\n";

class Session {
 public:
  Session(const RunOptions& options, std::ostream& out, bool echo)
      : live_(options), out_(out), echo_(echo) {}
  void start();
  bool command(const std::string& line);  // false: quit
  int finish();

 private:
  void wait_settled(std::chrono::seconds limit);
  void step(std::int64_t count);
  void moved();  // after ranks moved: where they are, and the run's results once it ended
  void where() const;
  void run_ended();
  void add_break(const DebugCommand& parsed);
  void remove_break(const DebugCommand& parsed);
  void info_breaks() const;
  void print_tensor(const std::string& name) const;
  bool print_op_tensor(int r, const std::string& name) const;
  bool print_final_tensor(int r, const std::string& name) const;
  template <class It>
  void print_rank_tensor(int r, const std::string& name, bool grad, It it, It end) const;
  void mem() const;
  void mem_line(int r, const MemoryLedger* ledger) const;
  void comm_lines(int r, const CommLog* comm) const;
  void comm() const;

  LiveSession live_;
  std::ostream& out_;
  bool echo_;                              // echo each command (a script's, not a terminal's)
  bool ended_ = false;                     // the run's end was reported
  std::optional<std::set<OpSite>> sites_;  // the layer's ops, listed by the first break
};

void Session::start() {
  live_.start();
  wait_settled(std::chrono::seconds(60));
  out_ << "shardscope debug: " << live_.ranks() << " rank(s), mode "
       << mode_name(live_.options().spec.layer.mode) << ", paused before the first op\n"
       << kHelp << "\n";
  where();
}

void Session::wait_settled(std::chrono::seconds limit) {
  if (!live_.wait_settled(limit)) {
    out_ << "(ranks still running after " << limit.count() << " s)\n";
  }
}

void Session::where() const {
  for (int r = 0; r < live_.ranks(); ++r) {
    out_ << "rank " << r << ": ";
    const LiveSession::RankState st = live_.state(r);
    const std::optional<Stop> stop = live_.stop(r);
    const std::optional<std::string> waits = live_.waiting_in(r);
    if (st == LiveSession::RankState::paused && stop) {
      out_ << "paused, " << stop->str() << "\n";
    } else if (st == LiveSession::RankState::in_collective && waits) {
      out_ << "waits in " << *waits << "\n";
    } else {
      out_ << live_rank_state_name(st) << "\n";
    }
  }
}

void Session::step(std::int64_t count) {
  for (std::int64_t i = 0; i < count && !live_.all_finished(); ++i) {
    live_.step();
    wait_settled(std::chrono::seconds(60));
  }
}

void Session::moved() {
  where();
  if (!ended_ && live_.all_finished()) run_ended();
}

// The run's end: its losses per step and the reference check, as `shardscope run` prints them.
void Session::run_ended() {
  ended_ = true;
  const std::optional<RankRun> run = live_.result(0);
  if (!run) return;  // a rank failed: finish() says how
  out_ << "the run ended; loss per step:";
  for (std::size_t i = 0; i < run->steps.size(); ++i) {
    out_ << " " << i << ": " << run->steps[i].loss;
  }
  out_ << "\n";
  if (run->check.ran) print_check_table(run->check, out_);
  out_ << "(print shows each rank's final tensors)\n";
}

void Session::add_break(const DebugCommand& parsed) {
  if (!parsed.breakpoint) {
    out_ << parsed.error << "\n";
    return;
  }
  if (!sites_) {
    try {
      sites_ = collect_op_sites(live_.options().spec);
    } catch (const std::exception& e) {
      out_ << "(could not list the layer's ops, so the breakpoint is not checked: " << e.what()
           << ")\n";
      sites_ = std::set<OpSite>();
    }
  }
  if (!sites_->empty()) {
    const std::string why = unmatched_breakpoint(*parsed.breakpoint, *sites_);
    if (!why.empty()) {
      out_ << "breakpoint refused: " << why << "\n";
      return;
    }
  }
  const int id = live_.add_breakpoint(*parsed.breakpoint);
  out_ << "breakpoint " << id << ": " << parsed.breakpoint->str() << ", on every rank\n";
}

void Session::remove_break(const DebugCommand& parsed) {
  if (parsed.id == 0) {
    live_.clear_breakpoints();
    out_ << "every breakpoint deleted\n";
  } else if (live_.remove_breakpoint(parsed.id)) {
    out_ << "breakpoint " << parsed.id << " deleted\n";
  } else {
    out_ << "no breakpoint " << parsed.id << " (info breakpoints lists them)\n";
  }
}

void Session::info_breaks() const {
  const std::vector<BreakpointEntry> entries = live_.breakpoints(0);
  if (entries.empty()) out_ << "no breakpoints\n";
  for (const BreakpointEntry& e : entries) {
    out_ << "breakpoint " << e.id << ": " << e.breakpoint.str() << ", hits per rank:";
    for (int r = 0; r < live_.ranks(); ++r) {
      std::uint64_t hits = 0;
      for (const BreakpointEntry& mine : live_.breakpoints(r)) {
        if (mine.id == e.id) hits = mine.hits;
      }
      out_ << " " << hits;
    }
    out_ << "\n";
  }
}

namespace {

std::string summary(const std::vector<double>& v) {
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (double x : v) lo = std::min(lo, x), hi = std::max(hi, x), sum += x;
  char line[160];
  std::snprintf(line, sizeof line, "min %.6g max %.6g mean %.6g", lo, hi,
                v.empty() ? 0.0 : sum / static_cast<double>(v.size()));
  std::string out = std::string(line) + ", first:";
  for (std::size_t i = 0; i < v.size() && i < 6; ++i) {
    std::snprintf(line, sizeof line, " %g", v[i]);
    out += line;
  }
  return out;
}

}  // namespace

void Session::print_tensor(const std::string& name) const {
  const bool grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
  const std::string base = grad ? name.substr(0, name.size() - 5) : name;
  for (int r = 0; r < live_.ranks(); ++r) {
    if (print_op_tensor(r, name)) continue;
    if (live_.state(r) == LiveSession::RankState::finished && print_final_tensor(r, name)) {
      continue;
    }
    live_.with_tensors(r, [&](const std::map<std::string, ParallelTensor>& tensors) {
      print_rank_tensor(r, name, grad, tensors.find(base), tensors.end());
    });
  }
}

bool Session::print_op_tensor(int r, const std::string& name) const {
  for (const TensorSnapshot& t : live_.op_tensors(r)) {
    if (t.name != name) continue;
    out_ << "rank " << r << ": " << name << " (" << t.what << ") " << t.describe << ", "
         << summary(t.values) << "\n";
    return true;
  }
  return false;
}

bool Session::print_final_tensor(int r, const std::string& name) const {
  const std::map<std::string, FinalTensor> final = live_.final_tensors(r);
  const auto it = final.find(name);
  if (it == final.end()) return false;
  const FinalTensor& t = it->second;
  out_ << "rank " << r << ": " << name << " " << t.placement << " of " << t.global << ", local "
       << t.snapshot.describe << " (final), " << summary(t.snapshot.values) << "\n";
  return true;
}

template <class It>
void Session::print_rank_tensor(int r, const std::string& name, bool grad, It it, It end) const {
  const Tensor t = it == end ? Tensor() : grad ? it->second.local.grad() : it->second.local;
  if (!t.defined()) {
    out_ << "rank " << r << ": no tensor '" << name << "' here (try input0.. of the op paused at, "
         << "output0.. of the op just run, input, output, a parameter such as attn.qkv.weight, "
            "or its .grad)\n";
    return;
  }
  out_ << "rank " << r << ": " << name << " " << it->second.placement.str() << " of "
       << it->second.global.str() << ", local " << t.describe() << ", " << summary(t.to_vector())
       << "\n";
}

void Session::mem() const {
  for (int r = 0; r < live_.ranks(); ++r) {
    live_.with_accounting(r,
                          [&](const MemoryLedger* ledger, const CommLog*) { mem_line(r, ledger); });
  }
}

void Session::mem_line(int r, const MemoryLedger* ledger) const {
  {
    if (!ledger) {
      out_ << "rank " << r << ": " << live_rank_state_name(live_.state(r)) << "\n";
      return;
    }
    out_ << "rank " << r << ": live " << ledger->live_total() << " B (peak " << ledger->peak_total()
         << " B):";
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      const auto cat = static_cast<MemoryCategory>(c);
      if (ledger->live(cat) > 0)
        out_ << " " << memory_category_name(cat) << " " << ledger->live(cat);
    }
    out_ << "; saved activations of layer " << live_.options().spec.layer.layer << " now "
         << ledger->saved_activation_bytes(live_.options().spec.layer.layer) << " B\n";
  }
}

void Session::comm() const {
  for (int r = 0; r < live_.ranks(); ++r) {
    live_.with_accounting(r, [&](const MemoryLedger*, const CommLog* log) { comm_lines(r, log); });
  }
}

void Session::comm_lines(int r, const CommLog* log) const {
  {
    if (!log) {
      out_ << "rank " << r << ": " << live_rank_state_name(live_.state(r)) << "\n";
      return;
    }
    const std::vector<CommLine> lines = log->lines();
    out_ << "rank " << r << ": " << (lines.empty() ? "no collectives yet" : "") << "\n";
    for (const CommLine& l : lines) {
      out_ << "  " << collective_name(l.kind) << " " << phase_name(l.phase) << " "
           << comm_purpose_name(l.purpose) << ": " << l.count << " call(s), " << l.bytes_sent
           << " B sent\n";
    }
  }
}

bool Session::command(const std::string& line) {
  using Kind = DebugCommand::Kind;
  const DebugCommand parsed = parse_debug_command(line);
  if (parsed.kind == Kind::none) return true;
  if (echo_) out_ << "> " << line << "\n";
  if (!parsed.error.empty()) {
    out_ << parsed.error << "\n";
    return true;
  }
  switch (parsed.kind) {
    case Kind::quit:
      return false;
    case Kind::none:  // returned above
      break;
    case Kind::step:
      step(parsed.count);
      moved();
      break;
    case Kind::next_collective:
      live_.next_collective();
      wait_settled(std::chrono::seconds(600));
      moved();
      break;
    case Kind::resume:
      live_.resume();
      wait_settled(std::chrono::seconds(3600));
      moved();
      break;
    case Kind::add_break:
      add_break(parsed);
      break;
    case Kind::remove_break:
      remove_break(parsed);
      break;
    case Kind::info_breaks:
      info_breaks();
      break;
    case Kind::where:
      where();
      break;
    case Kind::print:
      print_tensor(parsed.tensor);
      break;
    case Kind::mem:
      mem();
      break;
    case Kind::comm:
      comm();
      break;
    case Kind::help:
      out_ << kLongHelp;
      break;
    case Kind::unknown:
      out_ << "unknown command '" << parsed.word << "'; " << kHelp << "\n";
      break;
  }
  return true;
}

int Session::finish() {
  const std::string error = live_.finish("debug session ended by quit");
  if (!error.empty()) {
    out_ << "the run failed: " << error << "\n";
    return 1;
  }
  out_ << (live_.cancelled() ? "debug session ended; the run was stopped\n" : "the run finished\n");
  return 0;
}

}  // namespace

int debug_main(const RunOptions& options, std::istream& in, std::ostream& out) {
  LineReader reader(in, out, reads_a_terminal(in), "(shardscope) ");
  Session session(options, out, !reader.terminal());
  session.start();
  while (const std::optional<std::string> line = reader.next()) {
    if (!session.command(*line)) break;
  }
  return session.finish();
}

}  // namespace shardscope
