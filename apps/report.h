// The JSON report of `shardscope run --report FILE.json`. Key names are stable: later versions
// add keys ("check", "comm") but never rename these.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "apps/run.h"

namespace shardscope {

// {"format": "shardscope-run-report", "version": 1, "config": {...}, "steps": [{"loss",
//  "time_ms"}], "memory": {"per_rank": [{"rank", "saved_activation_bytes", "formula_bytes",
//  "extras_bytes", "peak_bytes", "formula", "terms": [...]}]}}
nlohmann::json report_json(const RunOptions& options, const RunResult& result);
// Writes the report atomically; throws FileWriteError naming the path and the system's reason
// when it cannot be written (no file, and no temporary, is left then).
void write_report(const std::string& path, const nlohmann::json& report);

}  // namespace shardscope
