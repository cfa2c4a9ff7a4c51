// Shared by the trace tests: one tp run at degree 2 recorded once (2 steps, reference check on),
// its file on disk, and helpers to edit the file's JSON.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/trace_reader.h"
#include "io/trace_recorder.h"
#include "parallel/run/layer_run.h"
#include "tests/temp_path.h"

namespace shardscope::trace_testing {

inline LayerRunSpec tp_spec(int steps) {
  LayerRunSpec spec;
  spec.layer.seq = 8;
  spec.layer.batch = 2;
  spec.layer.hidden = 16;
  spec.layer.heads = 2;
  spec.layer.mode = ParallelMode::tp;
  spec.layer.degree = 2;
  spec.steps = steps;
  return spec;
}

// Runs `spec` on threads with `recorder` attached to every rank's context.
inline std::vector<RankRun> record_run(const LayerRunSpec& spec, TraceRecorder& recorder) {
  std::vector<RankRun> runs(static_cast<std::size_t>(spec.layer.degree));
  std::mutex mutex;
  run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
    RankRun run;
    {
      ObserverGuard attach(env.ctx, recorder);
      run = run_layer_rank(env, spec);
    }
    std::lock_guard<std::mutex> lock(mutex);
    runs[static_cast<std::size_t>(env.rank)] = std::move(run);
  });
  return runs;
}

inline std::string temp_path(const std::string& name) {
  return testing_files::temp_path(name).string();
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The recorded tp run, written once per test binary.
struct RecordedTrace {
  static const RecordedTrace& get() {
    static const RecordedTrace trace;
    return trace;
  }
  ~RecordedTrace() { std::remove(path.c_str()); }
  LayerRunSpec spec = tp_spec(2);
  std::vector<RankRun> runs;
  std::string path = temp_path("tp2.json");
  std::string text;
  nlohmann::json written;  // what the recorder wrote, as JSON

 private:
  RecordedTrace() {
    TraceOptions options;
    options.config = {{"mode", "tp"}, {"degree", 2}};
    TraceRecorder recorder(options);
    runs = record_run(spec, recorder);
    recorder.write_chrome_trace(path);
    text = read_text(path);
    written = recorder.to_chrome_trace();
  }
};

// The recorded trace's text after `edit` changed its JSON.
inline std::string edited(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(RecordedTrace::get().text);
  edit(j);
  return j.dump();
}

// Index in traceEvents of the first entry with this ph and cat.
inline std::size_t first_entry(const nlohmann::json& j, const std::string& ph,
                               const std::string& cat) {
  const nlohmann::json& events = j["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (events[i]["ph"] == ph && events[i].value("cat", "") == cat) return i;
  }
  ADD_FAILURE() << "no entry with ph " << ph << " and cat " << cat;
  return 0;
}

}  // namespace shardscope::trace_testing
