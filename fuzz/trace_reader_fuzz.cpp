// Fuzz target: the trace reader (io/trace_reader.h) on any bytes. Properties: bad input is a
// TraceFormatError (any other exception, a crash, a leak or undefined behaviour is a bug), and a
// trace the reader accepts reads back the same events after write_trace (which puts them in time
// order), and writing what was read back gives the same bytes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/fuzz_support.h"
#include "io/trace_reader.h"
#include "io/trace_writer.h"

namespace shardscope::fuzz {
namespace {

std::vector<std::string> sorted_events(const TraceFile& file) {
  std::vector<std::string> events;
  for (const TraceEvent& e : file.events) events.push_back(trace_event_to_json(e).dump());
  std::sort(events.begin(), events.end());
  return events;
}

void check_round_trip(const TraceFile& file) {
  std::ostringstream written;
  write_trace(written, file.events, file.meta);
  TraceFile again;
  try {
    again = parse_trace(written.str(), "rewritten.json");
  } catch (const TraceFormatError& e) {
    broken(std::string("an accepted trace does not read back after write_trace: ") + e.what());
  }
  if (trace_meta_to_json(again.meta) != trace_meta_to_json(file.meta)) {
    broken("otherData changed in the round trip: " + trace_meta_to_json(file.meta).dump() +
           " became " + trace_meta_to_json(again.meta).dump());
  }
  // The writer puts the events in time order, so compare them as sets.
  const std::vector<std::string> before = sorted_events(file), after = sorted_events(again);
  if (before != after) {
    for (std::size_t i = 0; i < std::min(before.size(), after.size()); ++i) {
      if (before[i] != after[i]) broken("an event changed in the round trip: " + before[i]);
    }
    broken("the round trip has " + std::to_string(after.size()) + " events, not " +
           std::to_string(before.size()));
  }
  std::ostringstream rewritten;
  write_trace(rewritten, again.events, again.meta);
  if (rewritten.str() != written.str()) broken("writing the trace read back gives other bytes");
}

}  // namespace
}  // namespace shardscope::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace shardscope;
  TraceFile file;
  try {
    file = parse_trace(fuzz::as_text(data, size), "fuzz.json");
  } catch (const TraceFormatError&) {
    return 0;
  }
  fuzz::check_round_trip(file);
  return 0;
}
