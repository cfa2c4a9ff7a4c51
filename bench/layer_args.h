// What the layer benchmarks of bench/ (layer_bench, observer_bench) share: the layer a benchmark
// runs, from its arguments (s, b, h, a), and the median of the samples of runs made in turn.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "parallel/layers/transformer_layer.h"

namespace shardscope {

// LayerConfig's defaults (the gpt preset, dropout 0.1) at the shape of the benchmark's first four
// arguments: seq, batch, hidden, heads.
inline LayerConfig layer_of_args(const benchmark::State& state) {
  LayerConfig c;
  c.seq = state.range(0);
  c.batch = state.range(1);
  c.hidden = state.range(2);
  c.heads = state.range(3);
  return c;
}

// The median of `v` (0 when empty).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace shardscope
