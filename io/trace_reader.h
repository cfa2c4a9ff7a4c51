// Trace reader: reads a shardscope trace (docs/trace-format.md) back into TraceEvents, checking
// the schema as it goes. A malformed, truncated or foreign file is a TraceFormatError whose
// message names the file and the byte offset (JSON syntax) or the event index and field (schema);
// bad input never crashes the reader. Events stream through the parser one at a time, so a large
// file never sits in memory as a JSON tree. Also: the per-rank file names of an MPI run and the
// merge of per-rank files into one trace.
#pragma once

#include <istream>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "io/trace_event.h"

namespace shardscope {

class TraceFormatError : public Error {
 public:
  using Error::Error;
};

struct TraceFile {
  std::string source;  // the path it was read from, or the name given to parse_trace
  TraceMeta meta;
  std::vector<TraceEvent> events;  // in file order (by start time); metadata events excluded
};

// Throws TraceFormatError (or Error when the file cannot be opened).
TraceFile read_trace(const std::string& path);
// The same from a stream or a string; `source` names it in error messages.
TraceFile read_trace(std::istream& in, const std::string& source);
TraceFile parse_trace(const std::string& text, const std::string& source = "<memory>");

// Under MPI, rank r of "out/trace.json" writes "out/trace.rank<r>.json" (the name without its
// ".json", if any, then ".rank<r>.json").
std::string rank_trace_path(const std::string& path, int rank);
// One trace of several ranks' traces: events of all, by start time, on the clock of the earliest
// file (shifted by the difference of clock_origin_unix_us); config from the first. Throws
// TraceFormatError when two traces hold the same rank.
TraceFile merge_traces(const std::vector<TraceFile>& traces);
// Reads every input, merges them and writes `output`.
void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output);

}  // namespace shardscope
