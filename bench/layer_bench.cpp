// Transformer layer forward + backward on CPU, single device, f32, with and without the memory
// ledger attached (the observer overhead). Run: ./build/default/bench/layer_bench
#include <benchmark/benchmark.h>

#include "autograd/memory_ledger.h"
#include "autograd/ops.h"
#include "parallel/transformer_layer.h"

namespace shardscope {
namespace {

void layer_step(benchmark::State& state, bool with_ledger) {
  LayerConfig c;
  c.seq = state.range(0);
  c.batch = state.range(1);
  c.hidden = state.range(2);
  c.heads = state.range(3);
  c.dropout = 0.1;
  Context ctx;
  MemoryLedger ledger;
  if (with_ledger) ctx.add_observer(&ledger);
  TransformerLayer layer(c, make_layer_weights(ctx, c));
  Tensor x = Tensor::randn(ctx, {c.seq, c.batch, c.hidden}, 3);
  for (auto _ : state) {
    Tensor loss = sum(layer.forward(x));
    loss.backward();
    benchmark::DoNotOptimize(loss.raw_data());
  }
  ctx.remove_observer(&ledger);
  // Multiply-adds of the layer's GEMMs (forward 24 sbh^2 + 4 as^2 b d, backward twice that).
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double h = static_cast<double>(c.hidden);
  const double flops = 3.0 * 2.0 * (12.0 * s * b * h * h + 2.0 * s * s * b * h);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

void BM_LayerStep(benchmark::State& state) {
  layer_step(state, false);
}
void BM_LayerStepWithLedger(benchmark::State& state) {
  layer_step(state, true);
}

#define SHAPES Args({128, 4, 256, 8})->Args({512, 4, 1024, 16})->Unit(benchmark::kMillisecond)
BENCHMARK(BM_LayerStep)->SHAPES;
BENCHMARK(BM_LayerStepWithLedger)->SHAPES;

}  // namespace
}  // namespace shardscope

BENCHMARK_MAIN();
