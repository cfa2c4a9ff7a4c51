// Trace schema checks: every field read through a typed getter that names it when it is missing
// or of the wrong type, so no nlohmann type_error escapes.
#include "io/trace_schema.h"

#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>

#include "io/trace_reader.h"

namespace shardscope::trace_schema {
namespace {

using nlohmann::json;

std::string given(const json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

std::string joined(const std::string& prefix, const std::string& key) {
  return prefix.empty() ? key : prefix + "." + key;
}

// Typed access to the fields of one JSON object; failures name the context and the field.
class Fields {
 public:
  explicit Fields(std::string context) : context_(std::move(context)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw TraceFormatError(context_ + ": field '" + field + "': " + problem);
  }

  const json& at(const json& obj, const std::string& prefix, const std::string& key) const {
    auto it = obj.find(key);
    if (it == obj.end()) fail(joined(prefix, key), "missing");
    return *it;
  }
  const json& object(const json& obj, const std::string& prefix, const std::string& key) const {
    const json& v = at(obj, prefix, key);
    if (!v.is_object()) fail(joined(prefix, key), "expected an object, given " + given(v));
    return v;
  }
  std::string string(const json& obj, const std::string& prefix, const std::string& key) const {
    const json& v = at(obj, prefix, key);
    if (!v.is_string()) fail(joined(prefix, key), "expected a string, given " + given(v));
    return v.get<std::string>();
  }
  double number(const json& obj, const std::string& prefix, const std::string& key,
                double min = 0) const {
    const json& v = at(obj, prefix, key);
    if (!v.is_number()) fail(joined(prefix, key), "expected a number, given " + given(v));
    const double x = v.get<double>();
    if (!(x >= min))
      fail(joined(prefix, key), "expected >= " + std::to_string(min) + ", given " + v.dump());
    return x;
  }
  std::int64_t integer(const json& obj, const std::string& prefix, const std::string& key,
                       std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
    const json& v = at(obj, prefix, key);
    const bool too_big =
        v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
    if (!v.is_number_integer() || too_big) {
      fail(joined(prefix, key), "expected an integer, given " + given(v));
    }
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min || x > max) {
      fail(joined(prefix, key), "expected an integer in [" + std::to_string(min) + ", " +
                                    std::to_string(max) + "], given " + std::to_string(x));
    }
    return x;
  }
  std::uint64_t count(const json& obj, const std::string& prefix, const std::string& key) const {
    const json& v = at(obj, prefix, key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      fail(joined(prefix, key), "expected a non-negative integer, given " + given(v));
    }
    return v.get<std::uint64_t>();
  }
  std::vector<std::string> strings(const json& obj, const std::string& prefix,
                                   const std::string& key) const {
    const json& v = at(obj, prefix, key);
    if (!v.is_array()) fail(joined(prefix, key), "expected an array, given " + given(v));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        fail(joined(prefix, key) + "[" + std::to_string(i) + "]",
             "expected a string, given " + given(v[i]));
      }
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
  // An enum stored by name: `name` maps each of the `size` values to its name.
  template <class E>
  E named(const json& obj, const std::string& prefix, const std::string& key, int size,
          const char* (*name)(E)) const {
    const std::string text = string(obj, prefix, key);
    std::string expected;
    for (int i = 0; i < size; ++i) {
      const E value = static_cast<E>(i);
      if (text == name(value)) return value;
      expected += std::string(i ? ", " : "") + name(value);
    }
    fail(joined(prefix, key), "unknown value \"" + text + "\" (expected one of " + expected + ")");
  }

 private:
  std::string context_;
};

const char* dtype_name_of(DType d) {
  return dtype_name(d);
}

void parse_op_args(const Fields& f, const json& args, TraceEvent& e) {
  e.op = f.string(args, "args", "op");
  e.scope = f.string(args, "args", "scope");
  e.layer = static_cast<int>(f.integer(args, "args", "layer", -1, INT_MAX));
  e.seq = f.count(args, "args", "seq");
  if (args.contains("placement")) e.placement = f.string(args, "args", "placement");
  e.inputs = f.strings(args, "args", "inputs");
  e.outputs = f.strings(args, "args", "outputs");
  e.alloc_bytes = f.count(args, "args", "alloc_bytes");
  e.saved_bytes = f.count(args, "args", "saved_bytes");
  // Optional (added within version 1): files written before it hold no split, so 0.
  if (args.contains("saved_extra_bytes")) {
    e.saved_extra_bytes = f.count(args, "args", "saved_extra_bytes");
    if (e.saved_extra_bytes > e.saved_bytes) {
      f.fail("args.saved_extra_bytes", "expected at most args.saved_bytes (" +
                                           std::to_string(e.saved_bytes) + "), given " +
                                           std::to_string(e.saved_extra_bytes));
    }
  }
  e.released_bytes = f.count(args, "args", "released_bytes");
}

void parse_collective_args(const Fields& f, const json& args, TraceEvent& e) {
  e.phase = f.named<Phase>(args, "args", "phase", 2, phase_name);
  e.op = f.string(args, "args", "op");
  e.scope = f.string(args, "args", "scope");
  e.layer = static_cast<int>(f.integer(args, "args", "layer", -1, INT_MAX));
  e.seq = f.count(args, "args", "seq");
  if (args.contains("placement")) e.placement = f.string(args, "args", "placement");
  e.collective = f.named<CollectiveKind>(args, "args", "collective", 6, collective_name);
  e.purpose = f.named<CommPurpose>(args, "args", "purpose", 4, comm_purpose_name);
  e.reduce = f.named<ReduceOp>(args, "args", "reduce", 2, reduce_op_name);
  e.group_size = static_cast<int>(f.integer(args, "args", "group_size", 1, INT_MAX));
  e.count = f.integer(args, "args", "count", 0);
  e.dtype = f.named<DType>(args, "args", "dtype", 3, dtype_name_of);
  e.full_bytes = f.number(args, "args", "full_bytes");
  e.bytes_sent = f.number(args, "args", "bytes_sent");
}

void parse_memory_args(const Fields& f, const json& args, TraceEvent& e) {
  std::string names;
  for (int c = 0; c < kMemoryCategoryCount; ++c) {
    const char* name = memory_category_name(static_cast<MemoryCategory>(c));
    names += std::string(c ? ", " : "") + name;
    e.memory[static_cast<std::size_t>(c)] = f.count(args, "args", name);
  }
  for (auto it = args.begin(); it != args.end(); ++it) {
    bool known = it.key() == "step";
    for (int c = 0; c < kMemoryCategoryCount; ++c) {
      known = known || it.key() == memory_category_name(static_cast<MemoryCategory>(c));
    }
    if (!known) {
      f.fail("args." + it.key(), "unknown memory category (expected step, " + names + ")");
    }
  }
}

// A slice: ph "X", the category says which kind and which lane it must be on.
void parse_slice(const Fields& f, const json& j, const std::string& cat, TraceEvent& e) {
  e.dur_us = f.number(j, "", "dur");
  const json& args = f.object(j, "", "args");
  const std::int64_t tid = f.integer(j, "", "tid");
  if (cat == "forward" || cat == "backward") {
    e.kind = TraceEventKind::op;
    e.phase = cat == "forward" ? Phase::forward : Phase::backward;
    if (tid != kComputeLane)
      f.fail("tid", "an op slice belongs on lane " + std::to_string(kComputeLane));
    parse_op_args(f, args, e);
  } else if (cat == "collective") {
    e.kind = TraceEventKind::collective;
    if (tid != kCollectiveLane) {
      f.fail("tid", "a collective belongs on lane " + std::to_string(kCollectiveLane));
    }
    parse_collective_args(f, args, e);
  } else {
    f.fail("cat", "unknown category \"" + cat +
                      "\" for ph \"X\" (expected forward, backward or collective)");
  }
}

TraceEvent parse_event(const Fields& f, const json& j, const std::string& ph) {
  TraceEvent e;
  e.rank = rank_of_pid(static_cast<int>(f.integer(j, "", "pid", 1, INT_MAX)));
  e.ts_us = f.number(j, "", "ts");
  const std::string cat = f.string(j, "", "cat");
  const json& args = f.object(j, "", "args");
  e.step = f.integer(args, "args", "step");
  if (ph == "X") {
    parse_slice(f, j, cat, e);
  } else if (ph == "C") {
    if (cat != "memory")
      f.fail("cat", "unknown category \"" + cat + "\" for ph \"C\" (expected memory)");
    e.kind = TraceEventKind::memory;
    parse_memory_args(f, args, e);
  } else if (ph == "i") {
    if (cat != "step")
      f.fail("cat", "unknown category \"" + cat + "\" for ph \"i\" (expected step)");
    e.kind = TraceEventKind::step;
  } else {
    f.fail("ph", "unknown phase \"" + ph + "\" (this format uses X, C, i and M)");
  }
  return e;
}

Entry parse_metadata(const Fields& f, const json& j) {
  const std::string name = f.string(j, "", "name");
  const int pid = static_cast<int>(f.integer(j, "", "pid", 1, INT_MAX));
  f.integer(j, "", "tid");
  const json& args = f.object(j, "", "args");
  Entry entry;
  if (name == "process_name") {
    f.string(args, "args", "name");
    entry.named_rank = rank_of_pid(pid);
  }
  return entry;
}

}  // namespace

Entry parse_entry(const json& j, const std::string& source, std::size_t index) {
  std::string context = source + ": event " + std::to_string(index);
  if (!j.is_object()) throw TraceFormatError(context + ": expected an object, given " + given(j));
  const std::string ph = Fields(context).string(j, "", "ph");
  const auto name = j.find("name");
  context += " (ph \"" + ph + "\"";
  if (name != j.end() && name->is_string())
    context += ", name \"" + name->get<std::string>() + "\"";
  const Fields f(context + ")");
  try {
    if (ph == "M") return parse_metadata(f, j);
    f.string(j, "", "name");
    Entry entry;
    entry.event = parse_event(f, j, ph);
    return entry;
  } catch (const nlohmann::json::exception& e) {  // a safety net: every read is checked above
    f.fail("?", e.what());
  }
}

TraceMeta parse_meta(const json& other, const std::string& source) {
  const Fields f(source);
  if (!other.is_object()) f.fail("otherData", "expected an object, given " + given(other));
  const std::string format = f.string(other, "otherData", "format");
  if (format != kTraceFormatName) {
    f.fail("otherData.format", "expected \"" + std::string(kTraceFormatName) + "\", given \"" +
                                   format + "\": not a shardscope trace");
  }
  TraceMeta meta;
  meta.version = static_cast<int>(f.integer(other, "otherData", "version", 0, INT_MAX));
  if (meta.version != kTraceFormatVersion) {
    f.fail("otherData.version", "version " + std::to_string(meta.version) +
                                    " is not supported (this reader reads version " +
                                    std::to_string(kTraceFormatVersion) + ")");
  }
  meta.config = f.at(other, "otherData", "config");
  const json& ranks = f.at(other, "otherData", "ranks");
  if (!ranks.is_array()) f.fail("otherData.ranks", "expected an array, given " + given(ranks));
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    const bool rank = ranks[i].is_number_integer() && ranks[i].get<std::int64_t>() >= 0 &&
                      ranks[i].get<std::int64_t>() <= INT_MAX;
    if (!rank) {
      f.fail("otherData.ranks[" + std::to_string(i) + "]",
             "expected a rank, given " + given(ranks[i]));
    }
    meta.ranks.push_back(ranks[i].get<int>());
  }
  meta.max_events = f.count(other, "otherData", "max_events");
  meta.dropped_events = f.count(other, "otherData", "dropped_events");
  // first_dropped_step is there exactly when events were dropped (the writer's rule), so a trace
  // read back writes the same otherData.
  if (meta.dropped_events > 0) {
    meta.first_dropped_step = f.integer(other, "otherData", "first_dropped_step", 0);
  } else if (other.contains("first_dropped_step")) {
    f.fail("otherData.first_dropped_step",
           "expected only when otherData.dropped_events > 0, given with dropped_events 0");
  }
  meta.clock_origin_unix_us = f.number(other, "otherData", "clock_origin_unix_us");
  return meta;
}

}  // namespace shardscope::trace_schema
