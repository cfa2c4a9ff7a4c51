// Fault injection (`shardscope run --inject-fault rank=R,at=OP[,kind=K]`): rank R misbehaves at
// its first collective or op named OP, so the failure paths of every launcher can be exercised on
// purpose. OP is a collective kind (all_gather, all_reduce, reduce_scatter, all_to_all,
// broadcast, barrier) or an op name: the op that issued a collective (CollectiveCall::site.op:
// gather_matmul, copy_to_tp, reduce_parameter_gradients ...) or any op of the engine (matmul,
// layernorm, softmax ...). The kinds:
//   throw            rank R throws Error "injected fault on rank R at OP (<where>)"
//   wrong-size       rank R issues the collective with a smaller count (still divisible by the
//                    group size where the kind cuts chunks), so the communicators' call check fails
//                    it on every rank with a CommError naming each rank's call (collectives only)
//   skip-collective  rank R returns from the collective without issuing it; the others then fail
//                    by a mismatch or a timeout (collectives only)
//   hang             rank R sleeps for the communicator timeout plus a margin (ending early when
//                    another rank fails, on threads), then throws "injected hang on rank R at OP
//                    ended after N ms"
// The launchers (parallel/comm/spmd.h) apply a FaultPlan given in SpmdOptions: on rank R they wrap
// the rank's Communicator with make_faulty_comm and attach the injector's op observer to its
// Context.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "autograd/observer.h"
#include "parallel/comm/communicator.h"

namespace shardscope {

enum class FaultKind : std::uint8_t { throw_error, wrong_size, skip_collective, hang };
// "throw", "wrong-size", "skip-collective", "hang"
const char* fault_kind_name(FaultKind kind);

struct FaultPlan {
  int rank = 0;
  std::string at;  // a collective kind or an op name
  FaultKind kind = FaultKind::throw_error;
  std::string str() const;  // "rank=1,at=all_gather,kind=hang"
};

// Parses the value of --inject-fault, "rank=R,at=OP[,kind=throw|wrong-size|skip-collective|hang]"
// (pairs in any order). Throws ArgumentError naming the flag, what was given and what is accepted.
FaultPlan parse_fault_plan(const std::string& text);
// The checks that need the run: R in 0..world-1; wrong-size and skip-collective need the call
// check (NCCL with --no-call-check would move mismatched buffers). Throws ArgumentError.
void check_fault_plan(const FaultPlan& plan, int world, bool check_calls);
// Whether `name` is a collective kind ("all_gather"), as opposed to an op name.
bool is_collective_kind_name(const std::string& name);

// One planned fault on rank R: fires once, at the first collective (through the communicators
// make_faulty_comm returns) or op (through op_observer) that matches the plan. Used by rank R's
// thread only, except interrupt, which any thread may call.
class FaultInjector {
 public:
  // `timeout` is the communicator's: a hang lasts it plus a margin.
  FaultInjector(FaultPlan plan, std::chrono::milliseconds timeout);
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;

  const FaultPlan& plan() const { return plan_; }
  bool fired() const;
  // How long a hang sleeps when nothing interrupts it: timeout + max(timeout / 2, 1 s).
  std::chrono::milliseconds hang_limit() const;
  // Ends a hang that is sleeping or about to (another rank failed, so the group is already
  // failing): it then throws at once.
  void interrupt();
  // Rank R's op observer: throw and hang fire at the first op named plan().at; every op's name is
  // noted for the message of a fault that never fired.
  Observer& op_observer() { return observer_; }
  // After rank R's function and the launcher's final barrier. Throws Error when the fault never
  // fired ("--inject-fault: rank R never reached OP (...what rank R did reach...)"), and when
  // rank R skipped a collective yet got to its end (the others are a collective behind it and
  // would wait for it: under MPI, for ever).
  void check_after_run() const;
  // The first half of that: throws when the fault never fired. The launcher calls it before its
  // final barrier too (unless the plan is at=barrier, which that barrier may still fire), so the
  // other ranks fail in the barrier naming rank R instead of going on to print and write a run
  // that rank R is about to fail (under MPI, racing its abort).
  void check_fired() const;

  // The communicator's side (FaultyComm): runs `call` on `inner` with the fault applied when it
  // is the first call matching the plan, else as is.
  void run(Communicator& inner, const CollectiveCall& call, const void* send, void* recv);

 private:
  class OpObserver final : public Observer {
   public:
    explicit OpObserver(FaultInjector& owner) : owner_(owner) {}
    void on_op_begin(const OpEvent& event) override;

   private:
    FaultInjector& owner_;
  };

  bool take(const std::string& where);  // true once: at the first match
  [[noreturn]] void hang(const std::string& where);
  void run_wrong_size(Communicator& inner, const CollectiveCall& call, const void* send,
                      void* recv);
  std::string what_was_reached() const;
  std::string header() const;  // "rank R at OP"

  const FaultPlan plan_;
  const std::chrono::milliseconds timeout_;
  OpObserver observer_{*this};
  bool fired_ = false;
  std::string fired_where_;                            // the call or op it fired at
  std::set<std::string> ops_seen_, collectives_seen_;  // for a fault that never fired
  std::int64_t collective_calls_ = 0;
  std::string skipped_;  // the call skip-collective left out
  mutable std::mutex mutex_;
  std::condition_variable interrupted_cv_;
  bool interrupted_ = false;
};

// Rank R's communicator: `inner` (which must outlive it; abort, split, attach, send and recv go
// to it) with `injector` applied to its collectives and to those of the communicators split
// from it.
std::unique_ptr<Communicator> make_faulty_comm(Communicator& inner,
                                               std::shared_ptr<FaultInjector> injector);

}  // namespace shardscope
