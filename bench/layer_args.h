// The layer a benchmark of bench/ runs, from its arguments (s, b, h, a), for layer_bench and
// observer_bench alike.
#pragma once

#include <benchmark/benchmark.h>

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

}  // namespace shardscope
