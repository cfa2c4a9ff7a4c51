// Trace schema (docs/trace-format.md, version 1): one traceEvents entry or the otherData object,
// checked field by field and turned into a TraceEvent or TraceMeta. Used by the trace reader; a
// violation throws TraceFormatError naming the context ("trace.json: event 17 (ph \"X\", name
// \"attn.qkv/matmul\")"), the field ("args.step") and what was expected and given.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "io/trace_event.h"

namespace shardscope::trace_schema {

struct Entry {
  std::optional<TraceEvent> event;  // empty for a metadata ("M") entry
  std::optional<int> named_rank;    // the rank a "process_name" metadata entry names
};

// Entry `index` of traceEvents in `source`.
Entry parse_entry(const nlohmann::json& entry, const std::string& source, std::size_t index);
// The otherData object; checks format and version first.
TraceMeta parse_meta(const nlohmann::json& other_data, const std::string& source);

}  // namespace shardscope::trace_schema
