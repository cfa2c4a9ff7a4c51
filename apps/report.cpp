// The JSON report of `shardscope run`.
#include "apps/report.h"

#include <fstream>

#include "autograd/errors.h"

namespace shardscope {

nlohmann::json report_json(const RunOptions& o, const RunResult& r) {
  const LayerConfig& c = o.layer;
  nlohmann::json j;
  j["format"] = "shardscope-run-report";
  j["version"] = 1;
  j["config"] = {{"mode", mode_name(c.mode)},
                 {"degree", c.degree},
                 {"seq", c.seq},
                 {"batch", c.batch},
                 {"hidden", c.hidden},
                 {"heads", c.heads},
                 {"dropout", c.dropout},
                 {"seed", c.seed},
                 {"steps", o.steps},
                 {"lr", o.learning_rate},
                 {"dtype", dtype_name(c.dtype)},
                 {"causal", c.causal},
                 {"backend", "cpu"},
                 {"report", o.report_path}};
  j["steps"] = nlohmann::json::array();
  for (const StepRecord& s : r.steps)
    j["steps"].push_back({{"loss", s.loss}, {"time_ms", s.time_ms}});
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& m : r.memory) {
    nlohmann::json terms = nlohmann::json::array();
    for (const MeasuredTerm& t : m.terms) {
      terms.push_back({{"what", t.what},
                       {"saved_by", t.scope + "/" + t.op},
                       {"formula", t.formula},
                       {"measured_bytes", t.measured_bytes},
                       {"formula_bytes", t.model_bytes}});
    }
    ranks.push_back({{"rank", m.rank},
                     {"saved_activation_bytes", m.saved_activation_bytes},
                     {"formula_bytes", m.formula_bytes},
                     {"extras_bytes", m.extras_bytes},
                     {"formula_extras_bytes", m.formula_extras_bytes},
                     {"peak_bytes", m.peak_bytes},
                     {"formula", m.formula},
                     {"terms", terms}});
  }
  j["memory"] = {{"per_rank", ranks}};
  return j;
}

void write_report(const std::string& path, const nlohmann::json& report) {
  std::ofstream file(path);
  if (!file) throw Error("--report " + path + ": cannot open the file for writing");
  file << report.dump(2) << "\n";
  if (!file) throw Error("--report " + path + ": writing failed");
}

}  // namespace shardscope
