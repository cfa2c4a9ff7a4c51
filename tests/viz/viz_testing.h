// Helpers of the visualizer's tests: a real run of the layer recorded as a trace, and snapshots
// of it, so view-model tests check shapes computed from what the engine really did.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "apps/run.h"
#include "io/trace_reader.h"
#include "viz/model/replay.h"

namespace shardscope::viz::testing {

// Runs `mode` at `degree` on threads for `steps` steps (s=16 b=2 h=32 a=4 unless given; the
// layer's other fields as `options` sets them) and returns its trace, read back from the file
// `shardscope run --trace` writes.
inline TraceFile record_run(const std::string& mode, int degree, int steps = 1,
                            std::int64_t seq = 16, std::int64_t hidden = 32, std::int64_t heads = 4,
                            void (*options)(LayerConfig&) = nullptr) {
  RunOptions o;
  o.spec.layer.mode = parse_mode(mode);
  o.spec.layer.degree = degree;
  o.spec.layer.seq = seq;
  o.spec.layer.batch = 2;
  o.spec.layer.hidden = hidden;
  o.spec.layer.heads = heads;
  o.spec.steps = steps;
  if (options) options(o.spec.layer);
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

// The replay's snapshot at `cursor` (all events when omitted).
inline Snapshot snapshot_at(const TraceFile& t, std::size_t cursor = static_cast<std::size_t>(-1)) {
  Replay r(t);
  r.seek(cursor);
  return r.snapshot();
}

}  // namespace shardscope::viz::testing
