// The terminal step debugger over every rank of a threads run.
#include "apps/debug_session.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "apps/live_session.h"
#include "autograd/debugger.h"
#include "parallel/memory_model.h"

namespace shardscope {
namespace {

const char* kHelp =
    "commands: step, next-collective, continue, break <op|layer N|phase forward|backward>, "
    "where, print <tensor>, mem, comm, quit";

class Session {
 public:
  Session(const RunOptions& options, std::ostream& out) : live_(options), out_(out) {}
  void start();
  bool command(const std::string& line);  // false: quit
  int finish();

 private:
  void wait_settled(std::chrono::seconds limit);
  void where() const;
  void add_break(const DebugCommand& parsed);
  void print_tensor(const std::string& name) const;
  template <class It>
  void print_rank_tensor(int r, const std::string& name, bool grad, It it, It end) const;
  void mem() const;
  void mem_line(int r, const MemoryLedger* ledger) const;
  void comm_lines(int r, const CommLog* comm) const;
  void comm() const;

  LiveSession live_;
  std::ostream& out_;
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

void Session::add_break(const DebugCommand& parsed) {
  if (!parsed.breakpoint) {
    out_ << parsed.error << "\n";
    return;
  }
  const int id = live_.add_breakpoint(*parsed.breakpoint);
  out_ << "breakpoint " << id << ": " << parsed.breakpoint->str() << ", on every rank\n";
}

void Session::print_tensor(const std::string& name) const {
  const bool grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
  const std::string base = grad ? name.substr(0, name.size() - 5) : name;
  for (int r = 0; r < live_.ranks(); ++r) {
    live_.with_tensors(r, [&](const std::map<std::string, ParallelTensor>& tensors) {
      print_rank_tensor(r, name, grad, tensors.find(base), tensors.end());
    });
  }
}

template <class It>
void Session::print_rank_tensor(int r, const std::string& name, bool grad, It it, It end) const {
  {
    const Tensor t = it == end ? Tensor() : grad ? it->second.local.grad() : it->second.local;
    if (!t.defined()) {
      out_ << "rank " << r << ": no tensor '" << name << "' yet (try input, output, a parameter "
           << "such as attn.qkv.weight, or its .grad)\n";
      return;
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
  out_ << "> " << line << "\n";
  switch (parsed.kind) {
    case Kind::quit:
      return false;
    case Kind::none:  // returned above
      break;
    case Kind::step:
      live_.step();
      wait_settled(std::chrono::seconds(60));
      where();
      break;
    case Kind::next_collective:
      live_.next_collective();
      wait_settled(std::chrono::seconds(600));
      where();
      break;
    case Kind::resume:
      live_.resume();
      wait_settled(std::chrono::seconds(3600));
      where();
      break;
    case Kind::add_break:
      add_break(parsed);
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

DebugCommand parse_debug_command(const std::string& line) {
  using Kind = DebugCommand::Kind;
  std::istringstream args(line);
  DebugCommand c;
  args >> c.word;
  const std::string& w = c.word;
  if (w.empty()) return c;
  if (w == "quit" || w == "q") {
    c.kind = Kind::quit;
  } else if (w == "step" || w == "s") {
    c.kind = Kind::step;
  } else if (w == "next-collective" || w == "nc") {
    c.kind = Kind::next_collective;
  } else if (w == "continue" || w == "c") {
    c.kind = Kind::resume;
  } else if (w == "break" || w == "b") {
    c.kind = Kind::add_break;
    std::string rest;
    std::getline(args, rest);
    try {
      c.breakpoint = Breakpoint::parse(rest);
    } catch (const ArgumentError& e) {
      c.error = e.what();
    }
  } else if (w == "where" || w == "w") {
    c.kind = Kind::where;
  } else if (w == "print" || w == "p") {
    c.kind = Kind::print;
    args >> c.tensor;
  } else if (w == "mem") {
    c.kind = Kind::mem;
  } else if (w == "comm") {
    c.kind = Kind::comm;
  } else {
    c.kind = Kind::unknown;
  }
  return c;
}

int debug_main(const RunOptions& options, std::istream& in, std::ostream& out) {
  Session session(options, out);
  session.start();
  std::string line;
  while (std::getline(in, line) && session.command(line)) {
  }
  return session.finish();
}

}  // namespace shardscope
