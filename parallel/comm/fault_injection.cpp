// Fault injection: the plan's parser, the injector on rank R and the communicator that applies it.
#include "parallel/comm/fault_injection.h"

#include <algorithm>
#include <cstdio>

#include "autograd/context.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

constexpr const char* kAccepted =
    "expected rank=R,at=OP[,kind=throw|wrong-size|skip-collective|hang] with R a rank and OP a "
    "collective kind (all_gather, all_reduce, reduce_scatter, all_to_all, broadcast, barrier) or "
    "an op name (gather_matmul, copy_to_tp, matmul, layernorm, ...)";

constexpr CollectiveKind kCollectiveKinds[] = {
    CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
    CollectiveKind::all_to_all, CollectiveKind::broadcast,  CollectiveKind::barrier};

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw ConfigError("fault plan '" + text + "': " + why + "; " + kAccepted, {"fault"});
}

FaultKind parse_kind(const std::string& text, const std::string& value) {
  for (FaultKind k : {FaultKind::throw_error, FaultKind::wrong_size, FaultKind::skip_collective,
                      FaultKind::hang}) {
    if (value == fault_kind_name(k)) return k;
  }
  refuse(text, "kind '" + value + "' is not a fault kind");
}

int parse_rank(const std::string& text, const std::string& value) {
  const bool digits =
      !value.empty() && value.size() <= 9 &&
      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) refuse(text, "rank '" + value + "' is not a non-negative integer");
  return std::stoi(value);
}

// One "key=value" pair of the plan into `plan`; `seen` holds the keys given so far.
void parse_pair(const std::string& text, const std::string& pair, std::set<std::string>& seen,
                FaultPlan& plan) {
  const std::size_t eq = pair.find('=');
  if (eq == std::string::npos) refuse(text, "'" + pair + "' is not a key=value pair");
  const std::string key = pair.substr(0, eq), value = pair.substr(eq + 1);
  if (key != "rank" && key != "at" && key != "kind") {
    refuse(text, "'" + key + "' is not a key (the keys are rank, at and kind)");
  }
  if (!seen.insert(key).second) refuse(text, key + " is given twice");
  if (key == "rank") plan.rank = parse_rank(text, value);
  if (key == "kind") plan.kind = parse_kind(text, value);
  if (key == "at") {
    if (value.empty()) refuse(text, "at is empty");
    std::string underscored = value;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    if (underscored != value && is_collective_kind_name(underscored)) {
      refuse(text, "at=" + value + " is spelled at=" + underscored);
    }
    plan.at = value;
  }
}

// A list as "a, b, c".
std::string joined(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "none" : out;
}

// A line on stderr when a fault fires in a way that does not throw on rank R at once, so the
// output of a run names rank R and OP whichever rank's message comes first.
void announce(const std::string& line) {
  std::fprintf(stderr, "shardscope: injected fault: %s\n", line.c_str());
  std::fflush(stderr);
}

// A count that differs from `call`'s and keeps the call well formed: one element fewer (one per
// chunk for the kinds that cut the buffer into `size` chunks), so rank R's buffers stay large
// enough. A call of count 0 (a barrier) gets one element (or chunk) instead; the call check of
// every communicator (which check_fault_plan requires) fails the call before any data moves.
std::int64_t wrong_count(const CollectiveCall& call, int size) {
  const bool chunked =
      call.kind == CollectiveKind::reduce_scatter || call.kind == CollectiveKind::all_to_all;
  const std::int64_t step = chunked ? size : 1;
  return call.count >= step ? call.count - step : step;
}

// The decorator the launchers give rank R: every collective goes through the injector.
class FaultyComm final : public Communicator {
 public:
  FaultyComm(Communicator& inner, std::unique_ptr<Communicator> owned,
             std::shared_ptr<FaultInjector> injector)
      : inner_(inner), owned_(std::move(owned)), injector_(std::move(injector)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const char* backend_name() const override { return inner_.backend_name(); }
  void run(const CollectiveCall& call, const void* send, void* recv) override {
    injector_->run(inner_, call, send, recv);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    std::unique_ptr<Communicator> child = inner_.split(color, key);
    Communicator& ref = *child;
    return std::make_unique<FaultyComm>(ref, std::move(child), injector_);
  }
  void abort(const std::string& reason) override { inner_.abort(reason); }
  void attach(Context& ctx) override { inner_.attach(ctx); }
  void send(const void* data, std::size_t bytes, int peer) override {
    inner_.send(data, bytes, peer);
  }
  void recv(void* data, std::size_t bytes, int peer) override { inner_.recv(data, bytes, peer); }

 private:
  Communicator& inner_;
  std::unique_ptr<Communicator> owned_;  // set for a communicator split from rank R's
  std::shared_ptr<FaultInjector> injector_;
};

}  // namespace

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::throw_error:
      return "throw";
    case FaultKind::wrong_size:
      return "wrong-size";
    case FaultKind::skip_collective:
      return "skip-collective";
    case FaultKind::hang:
      return "hang";
  }
  return "?";
}

std::string FaultPlan::str() const {
  return "rank=" + std::to_string(rank) + ",at=" + at + ",kind=" + fault_kind_name(kind);
}

bool is_collective_kind_name(const std::string& name) {
  return std::any_of(std::begin(kCollectiveKinds), std::end(kCollectiveKinds),
                     [&](CollectiveKind k) { return name == collective_name(k); });
}

FaultPlan parse_fault_plan(const std::string& text) {
  FaultPlan plan;
  std::set<std::string> seen;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    parse_pair(text, text.substr(start, comma - start), seen, plan);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  if (!seen.count("rank")) refuse(text, "rank is missing");
  if (!seen.count("at")) refuse(text, "at is missing");
  return plan;
}

void check_fault_plan(const FaultPlan& plan, int world, bool check_calls) {
  if (plan.rank < 0 || plan.rank >= world) {
    throw ConfigError("fault plan " + plan.str() + ": rank " + std::to_string(plan.rank) +
                          " is not a rank of this run: expected 0.." + std::to_string(world - 1) +
                          " (world " + std::to_string(world) + ")",
                      {"fault", "world"});
  }
  if (plan.at.empty()) throw ConfigError("fault plan " + plan.str() + ": at is empty", {"fault"});
  const bool needs_check =
      plan.kind == FaultKind::wrong_size || plan.kind == FaultKind::skip_collective;
  if (needs_check && !check_calls) {
    throw ConfigError("fault plan " + plan.str() + ": kind " + fault_kind_name(plan.kind) +
                          " needs the call check (check_calls), which is off (it is what "
                          "turns the fault into an error on every rank)",
                      {"fault", "check_calls"});
  }
}

FaultInjector::FaultInjector(FaultPlan plan, std::chrono::milliseconds timeout)
    : plan_(std::move(plan)), timeout_(timeout) {}

bool FaultInjector::fired() const {
  return fired_;
}

std::chrono::milliseconds FaultInjector::hang_limit() const {
  return timeout_ + std::max(timeout_ / 2, std::chrono::milliseconds(1000));
}

void FaultInjector::interrupt() {
  std::lock_guard<std::mutex> lock(mutex_);
  interrupted_ = true;
  interrupted_cv_.notify_all();
}

std::string FaultInjector::header() const {
  return "rank " + std::to_string(plan_.rank) + " at " + plan_.at;
}

bool FaultInjector::take(const std::string& where) {
  if (fired_) return false;
  fired_ = true;
  fired_where_ = where;
  return true;
}

void FaultInjector::hang(const std::string& where) {
  const auto start = std::chrono::steady_clock::now();
  announce("rank " + std::to_string(plan_.rank) + " hangs instead of running " + where +
           " (kind hang), for up to " + std::to_string(hang_limit().count()) + " ms");
  bool early = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    early = interrupted_cv_.wait_for(lock, hang_limit(), [this] { return interrupted_; });
  }
  const auto slept = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  throw Error("injected hang on " + header() + " ended after " + std::to_string(slept.count()) +
              " ms" + (early ? " (another rank failed)" : "") + ": it slept instead of running " +
              where);
}

void FaultInjector::OpObserver::on_op_begin(const OpEvent& event) {
  FaultInjector& f = owner_;
  if (f.fired_) return;
  f.ops_seen_.emplace(event.site.op);
  const bool acts_on_ops =
      f.plan_.kind == FaultKind::throw_error || f.plan_.kind == FaultKind::hang;
  if (!acts_on_ops || event.site.op != f.plan_.at) return;
  const std::string where = format_where(event.site.op, event.site.scope, event.site.layer,
                                         event.site.phase, event.site.rank);
  f.take(where);
  if (f.plan_.kind == FaultKind::hang) f.hang(where);
  throw Error("injected fault on " + f.header() + " (" + where + ")");
}

void FaultInjector::run(Communicator& inner, const CollectiveCall& call, const void* send,
                        void* recv) {
  ++collective_calls_;
  const bool matches =
      !fired_ && (plan_.at == collective_name(call.kind) || plan_.at == call.site.op);
  if (!fired_) {
    collectives_seen_.insert(collective_name(call.kind));
    ops_seen_.insert(call.site.op);
  }
  if (!matches) {
    if (skipped_.empty()) {
      inner.run(call, send, recv);
      return;
    }
    try {  // after a skip: say on rank R why its collectives no longer line up
      inner.run(call, send, recv);
    } catch (const CommError& e) {
      throw CommError(std::string(e.what()) + "\n  (rank " + std::to_string(plan_.rank) +
                      " skipped " + skipped_ + " on purpose: fault plan " + plan_.str() + ")");
    }
    return;
  }
  const std::string where = call.str();
  take(where);
  switch (plan_.kind) {
    case FaultKind::throw_error:
      throw Error("injected fault on " + header() + " (" + where + ")");
    case FaultKind::hang:
      hang(where);
    case FaultKind::skip_collective:
      skipped_ = where;
      announce("rank " + std::to_string(plan_.rank) + " skips " + where +
               " (kind skip-collective): the other ranks run it without rank " +
               std::to_string(plan_.rank));
      return;
    case FaultKind::wrong_size:
      run_wrong_size(inner, call, send, recv);
      return;
  }
}

void FaultInjector::run_wrong_size(Communicator& inner, const CollectiveCall& call,
                                   const void* send, void* recv) {
  CollectiveCall changed = call;
  changed.count = wrong_count(call, inner.size());
  const std::string what = "rank " + std::to_string(plan_.rank) + " runs " + call.str() +
                           " with count " + std::to_string(changed.count) + " instead of " +
                           std::to_string(call.count);
  announce(what + " (kind wrong-size)");
  try {
    inner.run(changed, send, recv);
  } catch (const CommError& e) {
    throw CommError(std::string(e.what()) + "\n  (" + what + " on purpose: fault plan " +
                    plan_.str() + ")");
  }
  // Only a group of one rank has no one to disagree with.
  throw Error("injected wrong-size on " + header() + ": " + what +
              ", and the call check let it through (a group of " + std::to_string(inner.size()) +
              " rank)");
}

std::string FaultInjector::what_was_reached() const {
  std::string out = "rank " + std::to_string(plan_.rank) + " issued " +
                    std::to_string(collective_calls_) +
                    " collective(s) (kinds: " + joined(collectives_seen_) + ")";
  std::set<std::string> ops = ops_seen_;
  ops.erase("");
  return out + "; the op names it reached: " + joined(ops);
}

void FaultInjector::check_after_run() const {
  check_fired();
  if (!skipped_.empty()) {
    throw Error("injected skip-collective on " + header() + ": rank " + std::to_string(plan_.rank) +
                " skipped " + skipped_ +
                " and still reached the end of its function, a collective ahead of the other "
                "ranks");
  }
}

void FaultInjector::check_fired() const {
  if (!fired_) {
    const bool acts_on_ops = plan_.kind == FaultKind::throw_error || plan_.kind == FaultKind::hang;
    if (!acts_on_ops && !is_collective_kind_name(plan_.at) && ops_seen_.count(plan_.at)) {
      throw Error("injected fault: rank " + std::to_string(plan_.rank) +
                  " never reached a collective issued by " + plan_.at + ": kind " +
                  fault_kind_name(plan_.kind) + " acts on collectives, and " + plan_.at +
                  " ran without issuing one (" + what_was_reached() + ")");
    }
    throw Error("injected fault: rank " + std::to_string(plan_.rank) + " never reached " +
                plan_.at + " (" + what_was_reached() + ")");
  }
}

std::unique_ptr<Communicator> make_faulty_comm(Communicator& inner,
                                               std::shared_ptr<FaultInjector> injector) {
  return std::make_unique<FaultyComm>(inner, nullptr, std::move(injector));
}

}  // namespace shardscope
