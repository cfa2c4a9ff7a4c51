// Before a run starts: the estimate of its memory against the machine's available memory.
#include "apps/memory_check.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "autograd/errors.h"
#include "parallel/models/memory_model.h"

namespace shardscope {
namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

}  // namespace

std::optional<double> mem_available_bytes(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string key, unit;
  double value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * (unit.find("kB") != std::string::npos ? 1024 : 1);
  }
  return std::nullopt;
}

std::optional<double> mem_available_bytes() {
  std::ifstream file("/proc/meminfo");
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return mem_available_bytes(text.str());
}

void check_memory_fits(const RunOptions& o, std::optional<double> available) {
  if (!available || o.backend == DeviceKind::cuda) return;
  const LayerConfig& c = o.spec.layer;
  const int ranks = ranks_are_processes(o.comm) ? 1 : c.degree;
  const bool checked = o.spec.check && c.mode != ParallelMode::single;
  const RunMemoryEstimate e = estimate_run_memory(c, o.spec.keep_gathered_input, checked, ranks);
  if (e.process_bytes <= *available) return;
  throw ArgumentError(
      "the run needs at least " + gib(e.process_bytes) + " (" + std::to_string(ranks) +
      " rank(s) of " + gib(e.per_rank_bytes) + " each, their full weights and data" +
      (checked ? ", and the single-device reference" : "") + ", estimated from the models) and " +
      gib(*available) + " is available (MemAvailable): make --seq, --batch or --hidden smaller" +
      (ranks > 1 ? ", or run the ranks as processes (--comm mpi)" : ""));
}

}  // namespace shardscope
