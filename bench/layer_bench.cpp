// The single-device Transformer layer on CPU, f32, dropout 0.1 at its three sites:
//   BM_LayerStep/s/b/h/a       forward + backward of loss = sum(y) (parameter gradients
//                              accumulate), the step bench/torch_layer.py times in PyTorch;
//   BM_ObserverOverhead/s/b/h/a  a training step (forward, backward, SGD) with no observer and
//                              with the TraceRecorder and the MemoryLedger attached, the two
//                              alternating step by step so that drift of the machine's load hits
//                              both. Counters: none_ms and observed_ms (median wall time of each),
//                              ratio (median of the pairs' wall-time ratios) and cpu_ratio (the
//                              same with the process's CPU time, all threads: the work the
//                              observers add, which other programs on the machine inflate less).
// Threads: OPENBLAS_NUM_THREADS (GEMMs and the CPU backend's loops). Run:
//   ./build/default/bench/layer_bench
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "autograd/optim.h"
#include "io/trace_recorder.h"
#include "parallel/transformer_layer.h"

namespace shardscope {
namespace {

LayerConfig config_of(const benchmark::State& state) {
  LayerConfig c;
  c.seq = state.range(0);
  c.batch = state.range(1);
  c.hidden = state.range(2);
  c.heads = state.range(3);
  c.dropout = 0.1;
  return c;
}

// Multiply-adds of the layer's GEMMs: forward 24 sbh^2 + 4 s^2 bh flops, backward twice that.
double layer_flops(const LayerConfig& c) {
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double h = static_cast<double>(c.hidden);
  return 3.0 * 2.0 * (12.0 * s * b * h * h + 2.0 * s * s * b * h);
}

void BM_LayerStep(benchmark::State& state) {
  const LayerConfig c = config_of(state);
  Context ctx;
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3);
  sum(layer.forward(x)).backward();  // untimed: the first step maps its memory
  for (auto _ : state) {
    Tensor loss = sum(layer.forward(x));
    loss.backward();
    benchmark::DoNotOptimize(loss.raw_data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      layer_flops(c), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// CPU time of the whole process (every thread), in ms.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

struct StepTime {
  double wall_ms = 0, cpu_ms = 0;
};

void BM_ObserverOverhead(benchmark::State& state) {
  const LayerConfig c = config_of(state);
  Context ctx;
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  const std::vector<Tensor> params = layer.parameters();
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3);
  TraceRecorder recorder;
  MemoryLedger ledger;
  std::int64_t step = 0;
  auto train_step = [&] {
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = process_cpu_ms();
    ctx.set_step(step++);
    {
      Tensor loss = sum(layer.forward(x));
      loss.backward();
    }
    sgd_step(params, 1e-3);
    const auto wall = std::chrono::steady_clock::now() - start;
    return StepTime{std::chrono::duration<double, std::milli>(wall).count(),
                    process_cpu_ms() - cpu_start};
  };
  train_step();  // untimed: the first step maps its memory
  std::vector<double> bare, observed, wall_ratio, cpu_ratio;
  for (auto _ : state) {
    const StepTime none = train_step();
    ctx.add_observer(&ledger);
    ctx.add_observer(&recorder);
    const StepTime with = train_step();
    ctx.remove_observer(&recorder);
    ctx.remove_observer(&ledger);
    bare.push_back(none.wall_ms);
    observed.push_back(with.wall_ms);
    wall_ratio.push_back(with.wall_ms / none.wall_ms);
    cpu_ratio.push_back(with.cpu_ms / none.cpu_ms);
  }
  state.counters["none_ms"] = median(bare);
  state.counters["observed_ms"] = median(observed);
  state.counters["ratio"] = median(wall_ratio);
  state.counters["cpu_ratio"] = median(cpu_ratio);
  state.counters["events"] = static_cast<double>(recorder.events().size());
}

#define LAYER_SHAPES             \
  Args({128, 4, 256, 8})         \
      ->Args({256, 4, 512, 8})   \
      ->Args({512, 4, 1024, 16}) \
      ->ArgNames({"s", "b", "h", "a"})
BENCHMARK(BM_LayerStep)->LAYER_SHAPES->Unit(benchmark::kMillisecond)->UseRealTime();
// Not the largest shape: its 267 events a step cost about 0.2 ms of a 2 s step, far below the
// step-to-step spread of two steps in a row on a shared machine.
BENCHMARK(BM_ObserverOverhead)
    ->Args({64, 2, 128, 4})
    ->Args({128, 4, 256, 8})
    ->Args({256, 4, 512, 8})
    ->ArgNames({"s", "b", "h", "a"})
    ->MinTime(5.0)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace shardscope

BENCHMARK_MAIN();
