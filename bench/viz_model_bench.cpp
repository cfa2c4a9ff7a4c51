// The visualizer's view model on a synthetic trace of 8 ranks, without a window: how long each
// panel's shapes take to build from a snapshot of 10k and 100k events. Arg: events.
//   ./build/default/bench/viz_model_bench
// The whole frame (ImGui and OpenGL included) is bench/viz_frames.sh.
#include <benchmark/benchmark.h>

#include "viz/model/replay.h"
#include "viz/model/synthetic.h"
#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

constexpr PanelSize kTimeline{1000, 200}, kMemory{700, 220}, kShard{640, 470};

Snapshot whole(std::size_t events) {
  Replay r(synthetic_trace(8, events, 1));
  r.seek(r.size());
  return r.snapshot();
}

void BM_TimelineView(benchmark::State& state) {
  const Snapshot s = whole(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(timeline_view(s, {}, kTimeline));
}
BENCHMARK(BM_TimelineView)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

void BM_MemoryView(benchmark::State& state) {
  const Snapshot s = whole(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(memory_view(s, 0, kMemory));
}
BENCHMARK(BM_MemoryView)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

void BM_ShardView(benchmark::State& state) {
  const Snapshot s = whole(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(shard_view(s, 0, kShard));
}
BENCHMARK(BM_ShardView)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

// The snapshot itself: what a step of a replay copies before the views are rebuilt.
void BM_ReplaySnapshot(benchmark::State& state) {
  Replay r(synthetic_trace(8, static_cast<std::size_t>(state.range(0)), 1));
  r.seek(r.size());
  for (auto _ : state) benchmark::DoNotOptimize(r.snapshot());
}
BENCHMARK(BM_ReplaySnapshot)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace shardscope::viz

BENCHMARK_MAIN();
