// What shardscope's observers cost a training step of the single-device layer (GPT's: f32,
// dropout 0.1), on the CPU backend:
//   BM_ObserverOverhead/s/b/h/a  a training step (forward, backward, SGD) with no observer and
//                              with the TraceRecorder and the MemoryLedger attached, the two
//                              alternating step by step so that drift of the machine's load hits
//                              both, each pair in the other order from the last. Counters: none_ms
//                              and observed_ms (median wall time of each), ratio (median of the
//                              pairs' wall-time ratios) and cpu_ratio (the same with the process's
//                              CPU time, all threads: the work the observers add, which other
//                              programs on the machine inflate less).
//   BM_ObserverAlone/<part>/s/b/h/a  the same with one part attached alone: "events" (an observer
//                              that does nothing: the engine building each event and calling),
//                              "ledger", "recorder" (which counts each rank's live bytes itself,
//                              a LiveBytes per rank).
//   BM_ObserverHooks/s/b/h/a     one such step's observer calls made again, without the step, on
//                              a new recorder and a new ledger: each one's cost per call
//                              (counters recorder_ns, ledger_ns; calls: a step's).
// Threads: OPENBLAS_NUM_THREADS (GEMMs and the CPU backend's loops). Run:
//   ./build/default/bench/observer_bench [--benchmark_...]
// (bench/layer_bench times the layer's step itself, beside its GEMMs and PyTorch.)
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "bench/layer_args.h"
#include "io/trace_recorder.h"
#include "parallel/layers/transformer_layer.h"

namespace shardscope {
namespace {

// CPU time of the whole process (every thread), in ms.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct StepTime {
  double wall_ms = 0, cpu_ms = 0;
};

// The layer the observer benchmarks train: forward, backward of sum(y), SGD.
struct TrainedLayer {
  explicit TrainedLayer(const LayerConfig& c)
      : layer(c, make_layer_weights(ctx, c)),
        params(layer.parameters()),
        x(Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3)) {}
  void step(std::int64_t n) {
    ctx.set_step(n);
    {
      Tensor loss = sum(layer.forward(x));
      loss.backward();
    }
    sgd_step(params, 1e-3);
  }
  Context ctx;
  TransformerLayer layer;
  std::vector<Tensor> params;
  Tensor x;
};

// An observer that does nothing: attached, it costs the step only the engine's building of each
// event and the call (BM_ObserverAlone's "events").
class NoOpObserver final : public Observer {};

// Training steps alternating bare and with `observers` attached (see the top of the file).
void time_observed_steps(benchmark::State& state, const std::vector<Observer*>& observers) {
  TrainedLayer trained(layer_of_args(state));
  Context& ctx = trained.ctx;
  std::int64_t step = 0;
  auto train_step = [&] {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_ms();
    trained.step(step++);
    const auto wall = std::chrono::steady_clock::now() - start;
    return StepTime{std::chrono::duration<double, std::milli>(wall).count(),
                    process_cpu_ms() - cpu_start};
  };
  train_step();  // untimed: the first step maps its memory
  std::vector<double> bare, observed, wall_ratio, cpu_ratio;
  auto observed_step = [&] {
    for (Observer* o : observers) ctx.add_observer(o);
    const StepTime with = train_step();
    for (Observer* o : observers) ctx.remove_observer(o);
    return with;
  };
  bool observed_first = false;
  for (auto _ : state) {
    // Each pair in the other order from the last, so that what a step leaves the next (its
    // memory in the caches, the loop workers spinning or asleep) falls on both alike.
    StepTime none, with;
    if (observed_first) {
      with = observed_step();
      none = train_step();
    } else {
      none = train_step();
      with = observed_step();
    }
    observed_first = !observed_first;
    bare.push_back(none.wall_ms);
    observed.push_back(with.wall_ms);
    wall_ratio.push_back(with.wall_ms / none.wall_ms);
    cpu_ratio.push_back(with.cpu_ms / none.cpu_ms);
  }
  state.counters["none_ms"] = median(bare);
  state.counters["observed_ms"] = median(observed);
  state.counters["ratio"] = median(wall_ratio);
  state.counters["cpu_ratio"] = median(cpu_ratio);
}

void BM_ObserverOverhead(benchmark::State& state) {
  TraceRecorder recorder;
  MemoryLedger ledger;
  time_observed_steps(state, {&ledger, &recorder});
  state.counters["events"] = static_cast<double>(recorder.events().size());
}

// BM_ObserverAlone/<which>: BM_ObserverOverhead with one part attached, to say where its cost
// goes: "events" (an observer that does nothing), "ledger" (the MemoryLedger), "recorder" (the
// TraceRecorder, which counts each rank's live bytes itself).
enum class Alone { events, ledger, recorder };
void BM_ObserverAlone(benchmark::State& state, Alone which) {
  NoOpObserver nothing;
  MemoryLedger ledger;
  TraceRecorder recorder;
  Observer* const chosen = which == Alone::events   ? static_cast<Observer*>(&nothing)
                           : which == Alone::ledger ? static_cast<Observer*>(&ledger)
                                                    : static_cast<Observer*>(&recorder);
  time_observed_steps(state, {chosen});
}

// One step's observer calls, kept (with their own copies of the texts and shapes the events point
// to) so that they can be made again: BM_ObserverHooks.
class HookLog final : public Observer {
 public:
  void on_op_begin(const OpEvent& e) override { keep_op(add(Kind::op_begin, e.site), e); }
  void on_op_end(const OpEvent& e) override { keep_op(add(Kind::op_end, e.site), e); }
  void on_alloc(const StorageEvent& e) override { add(Kind::alloc, e.site).storage = e; }
  void on_free(const StorageEvent& e) override { add(Kind::free, e.site).storage = e; }
  void on_recategorize(const StorageEvent& e) override {
    add(Kind::recategorize, e.site).storage = e;
  }
  void on_save(const SaveEvent& e) override { add(Kind::save, e.site).save = e; }
  void on_release(const SaveEvent& e) override { add(Kind::release, e.site).save = e; }

  std::size_t size() const { return calls_.size(); }
  // Makes the calls again on `o`, as step `step`.
  void replay(Observer& o, std::int64_t step) const {
    for (const Call& c : calls_) {
      Site site = c.site;
      site.op = c.op_text;
      site.scope = c.scope_text;
      site.step = step;
      if (c.kind == Kind::op_begin || c.kind == Kind::op_end) {
        OpEvent op = c.op;
        op.site = site;
        op.placement = c.placement;
        op.inputs = c.has_inputs ? &c.inputs : nullptr;
        op.outputs = c.has_outputs ? &c.outputs : nullptr;
        c.kind == Kind::op_begin ? o.on_op_begin(op) : o.on_op_end(op);
      } else if (c.kind == Kind::save || c.kind == Kind::release) {
        SaveEvent save = c.save;
        save.site = site;
        c.kind == Kind::save ? o.on_save(save) : o.on_release(save);
      } else {
        StorageEvent storage = c.storage;
        storage.site = site;
        if (c.kind == Kind::alloc) o.on_alloc(storage);
        if (c.kind == Kind::free) o.on_free(storage);
        if (c.kind == Kind::recategorize) o.on_recategorize(storage);
      }
    }
  }

 private:
  enum class Kind { op_begin, op_end, alloc, free, recategorize, save, release };
  struct Call {
    Kind kind = Kind::op_begin;
    Site site;
    std::string op_text, scope_text, placement;
    OpEvent op;
    StorageEvent storage;
    SaveEvent save;
    std::vector<Shape> inputs, outputs;
    bool has_inputs = false, has_outputs = false;
  };
  Call& add(Kind kind, const Site& site) {
    Call& c = calls_.emplace_back();
    c.kind = kind;
    c.site = site;
    c.op_text = std::string(site.op);
    c.scope_text = std::string(site.scope);
    return c;
  }
  static void keep_op(Call& c, const OpEvent& e) {
    c.placement = std::string(e.placement);
    c.has_inputs = e.inputs != nullptr;
    c.has_outputs = e.outputs != nullptr;
    if (e.inputs) c.inputs = *e.inputs;
    if (e.outputs) c.outputs = *e.outputs;
    c.op = e;
    c.op.input_tensors = c.op.output_tensors = nullptr;  // valid only during the call
  }
  std::deque<Call> calls_;
};

// BM_ObserverHooks/s/b/h/a: one training step's observer calls, recorded once, made again for 1000
// steps on a new TraceRecorder and a new MemoryLedger each iteration: what each observer costs a
// call away from the step's own work (warm caches, but fresh memory for the recorder's events:
// it is made anew). Counters: calls (a step's), recorder_ns and ledger_ns (per call).
void BM_ObserverHooks(benchmark::State& state) {
  TrainedLayer trained(layer_of_args(state));
  HookLog log;
  trained.step(0);  // the first step maps its memory
  trained.ctx.add_observer(&log);
  trained.step(1);
  trained.ctx.remove_observer(&log);
  constexpr int kSteps = 1000;
  double recorder_ns = 0, ledger_ns = 0;
  auto timed = [](Observer& o, const HookLog& calls) {
    const auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < kSteps; ++step) calls.replay(o, step);
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
        .count();
  };
  for (auto _ : state) {
    TraceRecorder recorder;
    MemoryLedger ledger;
    recorder_ns += timed(recorder, log);
    ledger_ns += timed(ledger, log);
  }
  const double calls =
      static_cast<double>(state.iterations()) * kSteps * static_cast<double>(log.size());
  state.counters["calls"] = static_cast<double>(log.size());
  state.counters["recorder_ns"] = recorder_ns / calls;
  state.counters["ledger_ns"] = ledger_ns / calls;
}

void register_benchmarks() {
  // Not the largest shape: its 267 events a step cost about 0.2 ms of a 2 s step, far below the
  // step-to-step spread of two steps in a row on a shared machine.
  benchmark::RegisterBenchmark("BM_ObserverOverhead", BM_ObserverOverhead)
      ->Args({64, 2, 128, 4})
      ->Args({128, 4, 256, 8})
      ->Args({256, 4, 512, 8})
      ->ArgNames({"s", "b", "h", "a"})
      ->MinTime(5.0)
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
  for (const auto& [name, which] :
       {std::pair{"events", Alone::events}, std::pair{"ledger", Alone::ledger},
        std::pair{"recorder", Alone::recorder}}) {
    benchmark::RegisterBenchmark((std::string("BM_ObserverAlone/") + name).c_str(),
                                 BM_ObserverAlone, which)
        ->Args({64, 2, 128, 4})
        ->ArgNames({"s", "b", "h", "a"})
        ->MinTime(5.0)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  benchmark::RegisterBenchmark("BM_ObserverHooks", BM_ObserverHooks)
      ->Args({64, 2, 128, 4})
      ->ArgNames({"s", "b", "h", "a"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  shardscope::register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
