// Trace reader: a streaming parse (each traceEvents entry is checked, converted and dropped from
// the JSON tree as soon as it closes), JSON syntax errors turned into messages with byte offsets,
// and the merge of MPI ranks' files.
#include "io/trace_reader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "io/trace_schema.h"
#include "io/trace_writer.h"

namespace shardscope {
namespace {

using nlohmann::json;

// A trace nests four levels (document, traceEvents, entry, args); a free-form config a few more.
// Deeper input is refused while it is parsed: printing or copying a JSON value recurses, so a
// file of 100k '[' would otherwise overflow the stack.
constexpr int kMaxNesting = 64;

// The parser callback's state. Depths (nlohmann): 0 the document, 1 its top-level values, 2 the
// entries of traceEvents.
struct StreamState {
  explicit StreamState(std::string name) { file.source = std::move(name); }

  TraceFile file;
  std::string top_key;
  bool in_events = false;
  bool have_meta = false;
  std::size_t index = 0;             // traceEvents entries seen
  std::optional<std::string> early;  // an entry's error seen before otherData was checked
  std::set<int> named_ranks;

  void take(const json& entry) {
    try {
      trace_schema::Entry e = trace_schema::parse_entry(entry, file.source, index);
      if (e.event) file.events.push_back(std::move(*e.event));
      if (e.named_rank) named_ranks.insert(*e.named_rank);
    } catch (const TraceFormatError& error) {
      // Until otherData is checked, a foreign file's first complaint should be that it is not a
      // shardscope trace: keep the entry's error for later.
      if (have_meta) throw;
      if (!early) early = error.what();
    }
    ++index;
  }

  bool on_event(int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if (depth > kMaxNesting) {
      throw TraceFormatError(file.source + ": JSON nested more than " +
                             std::to_string(kMaxNesting) + " levels deep (event " +
                             std::to_string(index) + "): not a shardscope trace");
    }
    if (depth == 1) {
      if (event == E::key) top_key = parsed.get<std::string>();
      if (event == E::array_start) in_events = top_key == "traceEvents";
      if (event == E::array_end) in_events = false;
      if (event == E::object_end && top_key == "otherData") {
        file.meta = trace_schema::parse_meta(parsed, file.source);
        have_meta = true;
      }
      return true;
    }
    if (depth == 2 && in_events &&
        (event == E::object_end || event == E::value || event == E::array_end)) {
      take(parsed);
      return false;  // converted: drop it from the tree
    }
    return true;
  }
};

[[noreturn]] void syntax_error(const std::string& source, const json::parse_error& e,
                               std::optional<std::uintmax_t> size) {
  std::ostringstream message;
  message << source << ": ";
  if (size && e.byte > *size) {  // nlohmann counts the end of input as one more byte
    message << "the JSON ends early at byte " << *size << " (truncated file?): " << e.what();
  } else {
    message << "not valid JSON at byte " << e.byte;
    if (size) message << " of " << *size;
    message << ": " << e.what();
  }
  throw TraceFormatError(message.str());
}

void check_document(const json& root, StreamState& state) {
  const std::string& source = state.file.source;
  if (!root.is_object()) {
    throw TraceFormatError(source +
                           ": expected a JSON object with \"traceEvents\" and "
                           "\"otherData\", given " +
                           std::string(root.type_name()));
  }
  if (!state.have_meta) {
    auto other = root.find("otherData");
    if (other == root.end()) {
      throw TraceFormatError(source + ": field 'otherData': missing: not a shardscope trace (" +
                             kTraceFormatName + " version " + std::to_string(kTraceFormatVersion) +
                             ")");
    }
    state.file.meta = trace_schema::parse_meta(*other, source);  // throws: not an object
  }
  if (state.early) throw TraceFormatError(*state.early);
  auto events = root.find("traceEvents");
  if (events == root.end() || !events->is_array()) {
    throw TraceFormatError(source + ": field 'traceEvents': " +
                           (events == root.end()
                                ? std::string("missing")
                                : "expected an array, given " + std::string(events->type_name())));
  }
  for (int rank : state.file.meta.ranks) {
    if (!state.named_ranks.count(rank)) {
      throw TraceFormatError(source + ": field 'otherData.ranks': rank " + std::to_string(rank) +
                             " has no process_name metadata event");
    }
  }
}

TraceFile parse_stream(std::istream& in, const std::string& source,
                       std::optional<std::uintmax_t> size) {
  StreamState state(source);
  json root;
  try {
    root = json::parse(in, [&state](int depth, json::parse_event_t event, json& parsed) {
      return state.on_event(depth, event, parsed);
    });
  } catch (const json::parse_error& e) {
    syntax_error(source, e, size);
  } catch (const json::exception& e) {  // a safety net: the callback checks every type it reads
    throw TraceFormatError(source + ": " + e.what());
  }
  check_document(root, state);
  return std::move(state.file);
}

}  // namespace

TraceFile read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open trace file '" + path + "'");
  std::error_code ec;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  return parse_stream(in, path, ec ? std::nullopt : std::optional<std::uintmax_t>(size));
}

TraceFile read_trace(std::istream& in, const std::string& source) {
  return parse_stream(in, source, std::nullopt);
}

TraceFile parse_trace(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  return parse_stream(in, source, text.size());
}

std::string rank_trace_path(const std::string& path, int rank) {
  const std::string suffix = ".json";
  const bool has_suffix = path.size() > suffix.size() &&
                          path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string stem = has_suffix ? path.substr(0, path.size() - suffix.size()) : path;
  return stem + ".rank" + std::to_string(rank) + suffix;
}

TraceFile merge_traces(const std::vector<TraceFile>& traces) {
  TraceFile merged;
  merged.source = "<merged>";
  if (traces.empty()) return merged;
  double origin = traces.front().meta.clock_origin_unix_us;
  for (const TraceFile& t : traces) origin = std::min(origin, t.meta.clock_origin_unix_us);
  merged.meta.config = traces.front().meta.config;
  merged.meta.clock_origin_unix_us = origin;
  std::set<int> ranks;
  for (const TraceFile& t : traces) {
    for (int rank : t.meta.ranks) {
      if (!ranks.insert(rank).second) {
        throw TraceFormatError(t.source + ": rank " + std::to_string(rank) +
                               " is also in another trace being merged");
      }
    }
    merged.meta.max_events += t.meta.max_events;
    merged.meta.dropped_events += t.meta.dropped_events;
    if (t.meta.first_dropped_step >= 0 &&
        (merged.meta.first_dropped_step < 0 ||
         t.meta.first_dropped_step < merged.meta.first_dropped_step)) {
      merged.meta.first_dropped_step = t.meta.first_dropped_step;
    }
    const double shift = t.meta.clock_origin_unix_us - origin;
    for (TraceEvent e : t.events) {
      e.ts_us += shift;
      merged.events.push_back(std::move(e));
    }
  }
  merged.meta.ranks.assign(ranks.begin(), ranks.end());
  std::stable_sort(merged.events.begin(), merged.events.end(),
                   [](const TraceEvent& a, const TraceEvent& b) { return a.ts_us < b.ts_us; });
  return merged;
}

void merge_trace_files(const std::vector<std::string>& inputs, const std::string& output) {
  std::vector<TraceFile> traces;
  for (const std::string& path : inputs) traces.push_back(read_trace(path));
  const TraceFile merged = merge_traces(traces);
  write_trace_file(output, merged.events, merged.meta);
}

}  // namespace shardscope
