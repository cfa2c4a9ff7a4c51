// Helpers of the visualizer's tests: a real run of the layer (or of a stack of layers) recorded
// as a trace, and snapshots of it, so view-model tests check shapes computed from what the engine
// really did.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "apps/run.h"
#include "io/trace_reader.h"
#include "viz/model/replay.h"

namespace shardscope::viz::testing {

// Runs `o` on threads and returns its trace, read back from the file `shardscope run --trace`
// writes (named after the test and `mode`).
inline TraceFile record_options(RunOptions o, const std::string& mode) {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name() + "_" + mode;
  for (char& c : name) c = c == '/' ? '_' : c;  // parameterised tests are "Suite/Name/0"
  o.trace_path = ::testing::TempDir() + "viz_" + name + ".json";
  std::ostringstream out;
  run_layer(o, out);
  TraceFile t = read_trace(o.trace_path);
  std::remove(o.trace_path.c_str());
  return t;
}

// The options of `mode` at `degree` for `steps` steps, s=16 b=2 h=32 a=4 unless given.
inline RunOptions run_options(const std::string& mode, int degree, int steps = 1,
                              std::int64_t seq = 16, std::int64_t hidden = 32,
                              std::int64_t heads = 4) {
  RunOptions o;
  o.spec.layer.mode = parse_mode(mode);
  o.spec.layer.degree = degree;
  o.spec.layer.seq = seq;
  o.spec.layer.batch = 2;
  o.spec.layer.hidden = hidden;
  o.spec.layer.heads = heads;
  o.spec.steps = steps;
  return o;
}

// Runs `mode` at `degree` on threads for `steps` steps (s=16 b=2 h=32 a=4 unless given; the
// layer's other fields as `options` sets them) and returns its trace.
inline TraceFile record_run(const std::string& mode, int degree, int steps = 1,
                            std::int64_t seq = 16, std::int64_t hidden = 32, std::int64_t heads = 4,
                            void (*options)(LayerConfig&) = nullptr) {
  RunOptions o = run_options(mode, degree, steps, seq, hidden, heads);
  if (options) options(o.spec.layer);
  return record_options(o, mode);
}

// record_run of a stack of `layers` layers (LayerConfig::layers).
inline TraceFile record_stack(const std::string& mode, int degree, int layers, int steps = 1) {
  RunOptions o = run_options(mode, degree, steps);
  o.spec.layer.layers = layers;
  return record_options(o, mode + "_L" + std::to_string(layers));
}

// The replay's snapshot at `cursor` (all events when omitted).
inline Snapshot snapshot_at(const TraceFile& t, std::size_t cursor = static_cast<std::size_t>(-1)) {
  Replay r(t);
  r.seek(cursor);
  return r.snapshot();
}

}  // namespace shardscope::viz::testing
