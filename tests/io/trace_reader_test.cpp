// The trace reader refuses what is not a version 1 shardscope trace with a message that names
// the byte offset (JSON syntax) or the event and field (schema), and never crashes: a truncated
// file, a foreign format or version, missing or mistyped fields, and cuts and corruptions of a
// real trace at many offsets all end in TraceFormatError.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/io/trace_testing.h"

namespace shardscope {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using trace_testing::edited;
using trace_testing::first_entry;
using trace_testing::RecordedTrace;

std::string rejection(const std::string& text) {
  try {
    parse_trace(text, "bad.json");
  } catch (const TraceFormatError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << text.substr(0, 200);
  return "";
}

TEST(TraceReader, ReadsTheRecordedTrace) {
  const TraceFile file = parse_trace(RecordedTrace::get().text, "tp2.json");
  EXPECT_EQ(file.source, "tp2.json");
  EXPECT_FALSE(file.events.empty());
}

TEST(TraceReader, RejectsATruncatedFileNamingTheByte) {
  const std::string& text = RecordedTrace::get().text;
  const std::string cut = text.substr(0, text.size() / 2);
  EXPECT_THAT(rejection(cut), AllOf(StartsWith("bad.json: "),
                                    HasSubstr("ends early at byte " + std::to_string(cut.size())),
                                    HasSubstr("truncated")));
}

TEST(TraceReader, RejectsWhatIsNotJsonNamingTheByte) {
  EXPECT_THAT(rejection("hello"), HasSubstr("not valid JSON at byte 1 of 5"));
  EXPECT_THAT(rejection("{\"traceEvents\": [}"), HasSubstr("not valid JSON at byte 18"));
  EXPECT_THAT(rejection(""), HasSubstr("ends early at byte 0"));
}

TEST(TraceReader, RejectsAnotherFormatOrVersion) {
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["otherData"]["format"] = "perfetto"; })),
              AllOf(HasSubstr("field 'otherData.format'"), HasSubstr("given \"perfetto\""),
                    HasSubstr("not a shardscope trace")));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["otherData"]["version"] = 2; })),
              AllOf(HasSubstr("field 'otherData.version'"),
                    HasSubstr("version 2 is not supported (this reader reads version 1)")));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["otherData"]["version"] = "1"; })),
              AllOf(HasSubstr("otherData.version"), HasSubstr("expected an integer")));
  // A Chrome trace of another tool: no otherData, and its events lack our fields.
  EXPECT_THAT(rejection(R"({"traceEvents": [{"name": "a", "ph": "X", "ts": 1, "dur": 2,
                            "pid": 1, "tid": 1}]})"),
              AllOf(HasSubstr("'otherData': missing"), HasSubstr("not a shardscope trace")));
  EXPECT_THAT(rejection("[]"), HasSubstr("expected a JSON object"));
}

TEST(TraceReader, RejectsAnEventWithoutTsNamingItsIndex) {
  std::size_t index = 0;
  const std::string text = edited([&](nlohmann::json& j) {
    index = first_entry(j, "X", "forward");
    j["traceEvents"][index].erase("ts");
  });
  EXPECT_THAT(rejection(text), AllOf(HasSubstr("event " + std::to_string(index) + " (ph \"X\""),
                                     HasSubstr("field 'ts': missing")));
}

TEST(TraceReader, RejectsAStepThatIsNotAnInteger) {
  const std::string text = edited([](nlohmann::json& j) {
    j["traceEvents"][first_entry(j, "C", "memory")]["args"]["step"] = "3";
  });
  EXPECT_THAT(rejection(text), AllOf(HasSubstr("field 'args.step'"),
                                     HasSubstr("expected an integer, given string \"3\"")));
  const std::string fractional = edited([](nlohmann::json& j) {
    j["traceEvents"][first_entry(j, "X", "collective")]["args"]["step"] = 0.5;
  });
  EXPECT_THAT(rejection(fractional), HasSubstr("field 'args.step': expected an integer"));
}

TEST(TraceReader, RejectsUnknownCategoriesAndMistypedFields) {
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["traceEvents"][first_entry(j, "X", "forward")]["cat"] = "sideways";
              })),
              AllOf(HasSubstr("field 'cat'"), HasSubstr("unknown category \"sideways\"")));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["traceEvents"][first_entry(j, "C", "memory")]["args"]["heap"] = 1;
              })),
              AllOf(HasSubstr("field 'args.heap'"), HasSubstr("unknown memory category")));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["traceEvents"][first_entry(j, "X", "collective")]["args"]["purpose"] = "fun";
              })),
              AllOf(HasSubstr("field 'args.purpose'"), HasSubstr("unknown value \"fun\"")));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["traceEvents"][first_entry(j, "X", "backward")]["dur"] = -1;
              })),
              HasSubstr("field 'dur': expected >= 0"));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["traceEvents"][first_entry(j, "X", "backward")]["args"]["inputs"][0] = 7;
              })),
              HasSubstr("field 'args.inputs[0]': expected a string, given number 7"));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["traceEvents"].push_back(42); })),
              HasSubstr("expected an object, given number 42"));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["traceEvents"][0]["pid"] = 0; })),
              HasSubstr("field 'pid': expected an integer in [1, "));
}

// saved_extra_bytes is optional (files written before it hold none) and at most saved_bytes.
TEST(TraceReader, ReadsSavedExtraBytesWhenPresentAndChecksThem) {
  const TraceFile without = parse_trace(edited([](nlohmann::json& j) {
    for (nlohmann::json& e : j["traceEvents"]) {
      if (e.contains("args")) e["args"].erase("saved_extra_bytes");
    }
  }));
  for (const TraceEvent& e : without.events) EXPECT_EQ(e.saved_extra_bytes, 0u);
  const TraceFile with = parse_trace(RecordedTrace::get().text);
  const bool some = std::any_of(with.events.begin(), with.events.end(),
                                [](const TraceEvent& e) { return e.saved_extra_bytes > 0; });
  EXPECT_TRUE(some) << "the LayerNorms save their statistics as extras";
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                nlohmann::json& args = j["traceEvents"][first_entry(j, "X", "forward")]["args"];
                args["saved_extra_bytes"] = args["saved_bytes"].get<std::uint64_t>() + 1;
              })),
              AllOf(HasSubstr("field 'args.saved_extra_bytes'"),
                    HasSubstr("expected at most args.saved_bytes")));
}

// Found by fuzzing: a trace with dropped events but no first_dropped_step was accepted (-1) and
// written back with -1, which the reader refused. The field is there exactly when events were
// dropped.
TEST(TraceReader, FirstDroppedStepIsThereExactlyWhenEventsWereDropped) {
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) { j["otherData"]["dropped_events"] = 3; })),
              HasSubstr("field 'otherData.first_dropped_step': missing"));
  EXPECT_THAT(rejection(edited([](nlohmann::json& j) {
                j["otherData"]["dropped_events"] = 3;
                j["otherData"]["first_dropped_step"] = -1;
              })),
              HasSubstr("field 'otherData.first_dropped_step': expected an integer in [0, "));
  EXPECT_THAT(
      rejection(edited([](nlohmann::json& j) { j["otherData"]["first_dropped_step"] = 2; })),
      AllOf(HasSubstr("field 'otherData.first_dropped_step'"),
            HasSubstr("expected only when otherData.dropped_events > 0")));
  const TraceFile dropped = parse_trace(edited([](nlohmann::json& j) {
    j["otherData"]["dropped_events"] = 3;
    j["otherData"]["first_dropped_step"] = 2;
  }));
  EXPECT_EQ(dropped.meta.first_dropped_step, 2);
}

TEST(TraceReader, RejectsAFileThatCannotBeOpened) {
  EXPECT_THROW(read_trace(trace_testing::temp_path("no_such_trace.json")), Error);
}

// Found by fuzzing (fuzz/trace_reader_fuzz.cpp): 100k nested '[' in a field overflowed the stack
// when the error message printed the value; the reader now refuses nesting past 64 levels as it
// parses. A number out of range is a TraceFormatError too.
TEST(TraceReader, RejectsDeepNestingAndNumbersOutOfRange) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string head = R"({"otherData": {"format": "shardscope-trace", "config": )";
  EXPECT_THAT(rejection(head + deep + "}}"),
              AllOf(StartsWith("bad.json: "), HasSubstr("nested more than 64 levels deep")));
  EXPECT_THAT(rejection(R"({"traceEvents": [{"ph": )" + deep + "}]}"),
              HasSubstr("nested more than 64 levels deep (event 0)"));
  EXPECT_THAT(rejection(R"({"traceEvents": [{"ts": 1e400}]})"), HasSubstr("number overflow"));
}

// Cut the file at 64 offsets and corrupt one byte at 64 others: each parses or throws
// TraceFormatError, never anything else.
TEST(TraceReader, NeverCrashesOnCutsOrCorruptions) {
  const std::string& text = RecordedTrace::get().text;
  const std::size_t end = text.rfind('}');  // a cut after it leaves the whole document
  const std::size_t stride = std::max<std::size_t>(1, end / 64);
  for (std::size_t at = 0; at < end; at += stride) {
    EXPECT_THROW(parse_trace(text.substr(0, at), "cut.json"), TraceFormatError) << "cut at " << at;
    std::string corrupt = text;
    corrupt[at] = static_cast<char>(corrupt[at] ^ 0x5a);
    try {
      parse_trace(corrupt, "corrupt.json");
    } catch (const TraceFormatError&) {
    }
  }
}

}  // namespace
}  // namespace shardscope
