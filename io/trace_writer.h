// Trace writer: TraceEvents and TraceMeta to Chrome trace event JSON (docs/trace-format.md),
// as a JSON value or streamed to a file one event at a time (no whole-trace DOM in memory).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/trace_event.h"

namespace shardscope {

// Events a writer reads one at a time: `count` of them, the fields they are ordered by (`key`),
// and each whole (`event`), so that a recorder keeping them in another form (memory counters in
// a compact one) builds each TraceEvent only while it is written.
struct TraceOrderKey {
  double ts_us = 0;
  double dur_us = 0;
  TraceEventKind kind = TraceEventKind::op;
};
struct TraceEventSource {
  std::size_t count = 0;
  std::function<TraceOrderKey(std::size_t)> key;
  std::function<TraceEvent(std::size_t)> event;
};
TraceOrderKey order_key(const TraceEvent& event);
TraceEventSource trace_event_source(const std::vector<TraceEvent>& events);

// The traceEvents entry of one event.
nlohmann::json trace_event_to_json(const TraceEvent& event);
// The "otherData" object.
nlohmann::json trace_meta_to_json(const TraceMeta& meta);
// The whole trace: {"displayTimeUnit", "otherData", "traceEvents": [process and lane names,
// then the events by start time]}.
nlohmann::json trace_to_json(const std::vector<TraceEvent>& events, const TraceMeta& meta);
// The same JSON, streamed.
void write_trace(std::ostream& out, const std::vector<TraceEvent>& events, const TraceMeta& meta);
void write_trace(std::ostream& out, const TraceEventSource& events, const TraceMeta& meta);
// The same JSON into `path`, written to a temporary beside it and renamed (write_file_atomically),
// so a reader never sees a half-written file under `path`. Throws FileWriteError naming `path`
// and the system's reason when it cannot be written; no temporary is left behind.
void write_trace_file(const std::string& path, const std::vector<TraceEvent>& events,
                      const TraceMeta& meta);
void write_trace_file(const std::string& path, const TraceEventSource& events,
                      const TraceMeta& meta);

}  // namespace shardscope
