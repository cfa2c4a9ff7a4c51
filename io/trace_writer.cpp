// Trace writer: events to Chrome trace event JSON, sorted by start time, metadata first.
#include "io/trace_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>

#include "autograd/errors.h"
#include "io/atomic_file.h"

namespace shardscope {
namespace {

using nlohmann::json;

// Ties at one timestamp: a step mark first, then the longer slice (the parent), then by kind.
int tie_order(TraceEventKind kind) {
  switch (kind) {
    case TraceEventKind::step:
      return 0;
    case TraceEventKind::op:
      return 1;
    case TraceEventKind::collective:
      return 2;
    case TraceEventKind::memory:
      return 3;
  }
  return 4;
}

std::vector<std::size_t> time_order(const TraceEventSource& events) {
  std::vector<TraceOrderKey> keys;
  keys.reserve(events.count);
  for (std::size_t i = 0; i < events.count; ++i) keys.push_back(events.key(i));
  std::vector<std::size_t> order(events.count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const TraceOrderKey& x = keys[a];
    const TraceOrderKey& y = keys[b];
    if (x.ts_us != y.ts_us) return x.ts_us < y.ts_us;
    const bool x_mark = x.kind == TraceEventKind::step, y_mark = y.kind == TraceEventKind::step;
    if (x_mark != y_mark) return x_mark;
    if (x.dur_us != y.dur_us) return x.dur_us > y.dur_us;
    return tie_order(x.kind) < tie_order(y.kind);
  });
  return order;
}

std::string slice_name(const TraceEvent& e) {
  std::string name = e.scope.empty() ? e.op : e.scope + "/" + e.op;
  if (e.phase == Phase::backward) name += " (backward)";
  return name;
}

json op_args(const TraceEvent& e) {
  return {{"step", e.step},
          {"op", e.op},
          {"scope", e.scope},
          {"layer", e.layer},
          {"seq", e.seq},
          {"placement", e.placement},
          {"inputs", e.inputs.strings()},
          {"outputs", e.outputs.strings()},
          {"alloc_bytes", e.alloc_bytes},
          {"saved_bytes", e.saved_bytes},
          {"saved_extra_bytes", e.saved_extra_bytes},
          {"released_bytes", e.released_bytes}};
}

json collective_args(const TraceEvent& e) {
  return {{"step", e.step},
          {"phase", phase_name(e.phase)},
          {"op", e.op},
          {"scope", e.scope},
          {"layer", e.layer},
          {"seq", e.seq},
          {"placement", e.placement},
          {"collective", collective_name(e.collective)},
          {"purpose", comm_purpose_name(e.purpose)},
          {"reduce", reduce_op_name(e.reduce)},
          {"group_size", e.group_size},
          {"count", e.count},
          {"dtype", dtype_name(e.dtype)},
          {"full_bytes", e.full_bytes},
          {"bytes_sent", e.bytes_sent}};
}

json memory_args(const TraceEvent& e) {
  json args = json::object();
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    args[memory_category_name(static_cast<MemoryCategory>(c))] =
        e.memory[static_cast<std::size_t>(c)];
  }
  args["step"] = e.step;
  return args;
}

json metadata(const char* name, int rank, int tid, const json& args) {
  return {{"name", name}, {"ph", "M"}, {"pid", trace_pid(rank)}, {"tid", tid}, {"args", args}};
}

std::vector<json> metadata_events(const TraceMeta& meta) {
  std::vector<json> out;
  for (int rank : meta.ranks) {
    out.push_back(
        metadata("process_name", rank, kComputeLane, {{"name", "rank " + std::to_string(rank)}}));
    out.push_back(metadata("process_sort_index", rank, kComputeLane, {{"sort_index", rank}}));
    out.push_back(metadata("thread_name", rank, kComputeLane, {{"name", "compute"}}));
    out.push_back(metadata("thread_name", rank, kCollectiveLane, {{"name", "collectives"}}));
  }
  return out;
}

}  // namespace

json trace_event_to_json(const TraceEvent& e) {
  json j = {{"ts", e.ts_us}, {"pid", trace_pid(e.rank)}, {"tid", kComputeLane}};
  switch (e.kind) {
    case TraceEventKind::op:
      j.update({{"name", slice_name(e)}, {"cat", phase_name(e.phase)}, {"ph", "X"}});
      j["dur"] = e.dur_us;
      j["args"] = op_args(e);
      break;
    case TraceEventKind::collective:
      j.update({{"name", collective_name(e.collective)}, {"cat", "collective"}, {"ph", "X"}});
      j["tid"] = kCollectiveLane;
      j["dur"] = e.dur_us;
      j["args"] = collective_args(e);
      break;
    case TraceEventKind::memory:
      j.update({{"name", "memory"}, {"cat", "memory"}, {"ph", "C"}});
      j["args"] = memory_args(e);
      break;
    case TraceEventKind::step:
      j.update({{"name", "step " + std::to_string(e.step)}, {"cat", "step"}, {"ph", "i"}});
      j["s"] = "p";
      j["args"] = {{"step", e.step}};
      break;
  }
  return j;
}

json trace_meta_to_json(const TraceMeta& meta) {
  json j = {{"format", kTraceFormatName},
            {"version", meta.version},
            {"config", meta.config},
            {"ranks", meta.ranks},
            {"max_events", meta.max_events},
            {"dropped_events", meta.dropped_events},
            {"clock_origin_unix_us", meta.clock_origin_unix_us}};
  if (meta.dropped_events > 0) j["first_dropped_step"] = meta.first_dropped_step;
  return j;
}

TraceOrderKey order_key(const TraceEvent& e) {
  return {e.ts_us, e.dur_us, e.kind};
}

TraceEventSource trace_event_source(const std::vector<TraceEvent>& events) {
  TraceEventSource source;
  source.count = events.size();
  source.key = [&events](std::size_t i) { return order_key(events[i]); };
  source.event = [&events](std::size_t i) { return events[i]; };
  return source;
}

json trace_to_json(const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  json list = json::array();
  for (json& m : metadata_events(meta)) list.push_back(std::move(m));
  for (std::size_t i : time_order(trace_event_source(events)))
    list.push_back(trace_event_to_json(events[i]));
  return {{"displayTimeUnit", "ms"},
          {"otherData", trace_meta_to_json(meta)},
          {"traceEvents", std::move(list)}};
}

void write_trace(std::ostream& out, const std::vector<TraceEvent>& events, const TraceMeta& meta) {
  write_trace(out, trace_event_source(events), meta);
}

void write_trace(std::ostream& out, const TraceEventSource& events, const TraceMeta& meta) {
  out << "{\"displayTimeUnit\": \"ms\",\n\"otherData\": " << trace_meta_to_json(meta).dump()
      << ",\n\"traceEvents\": [";
  const char* separator = "\n";
  for (const json& m : metadata_events(meta)) {
    out << separator << m.dump();
    separator = ",\n";
  }
  for (std::size_t i : time_order(events)) {
    out << separator << trace_event_to_json(events.event(i)).dump();
    separator = ",\n";
  }
  out << "\n]}\n";
}

void write_trace_file(const std::string& path, const std::vector<TraceEvent>& events,
                      const TraceMeta& meta) {
  write_trace_file(path, trace_event_source(events), meta);
}

void write_trace_file(const std::string& path, const TraceEventSource& events,
                      const TraceMeta& meta) {
  write_file_atomically(path, [&](std::ostream& out) { write_trace(out, events, meta); });
}

}  // namespace shardscope
