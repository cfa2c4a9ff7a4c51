// The JSON report of `shardscope run`.
#include "apps/report.h"

#include "autograd/errors.h"
#include "io/atomic_file.h"
#include "io/manifest.h"
#include "parallel/comm/comm_log.h"
#include "parallel/models/comm_model.h"

namespace shardscope {
namespace {

nlohmann::json config_json(const RunOptions& o) {
  // The layer's configuration as dumps and traces record it, then the run's own settings.
  nlohmann::json j = layer_config_json(o.spec.layer);
  j["comm"] = comm_kind_name(o.comm);
  j["steps"] = o.spec.steps;
  j["lr"] = o.spec.learning_rate;
  j["check"] = o.spec.check;
  j["keep_gathered_input"] = o.spec.keep_gathered_input;
  j["backend"] = backend_name(o.backend);
  j["call_check"] = o.comm == CommKind::nccl && o.check_calls;
  j["report"] = o.report_path;
  return j;
}

nlohmann::json memory_json(const RunResult& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankMemory& m : r.memory) {
    nlohmann::json terms = nlohmann::json::array();
    for (const MeasuredTerm& t : m.terms) {
      terms.push_back({{"what", t.what},
                       {"saved_by", t.scope + "/" + t.op},
                       {"formula", t.formula},
                       {"measured_bytes", t.measured_bytes},
                       {"formula_bytes", t.model_bytes},
                       {"layer", t.layer}});
    }
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerMemory& l : m.layers) {
      layers.push_back({{"layer", l.layer},
                        {"saved_activation_bytes", l.saved_activation_bytes},
                        {"formula_bytes", l.formula_bytes},
                        {"extras_bytes", l.extras_bytes},
                        {"formula_extras_bytes", l.formula_extras_bytes}});
    }
    ranks.push_back({{"rank", m.rank},
                     {"saved_activation_bytes", m.saved_activation_bytes},
                     {"formula_bytes", m.formula_bytes},
                     {"extras_bytes", m.extras_bytes},
                     {"formula_extras_bytes", m.formula_extras_bytes},
                     {"peak_bytes", m.peak_bytes},
                     {"formula", m.formula},
                     {"layers", layers},
                     {"terms", terms}});
  }
  return {{"per_rank", ranks}};
}

nlohmann::json check_json(const CheckResult& check) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const TensorCheck& t : check.tensors) {
    tensors.push_back({{"name", t.name},
                       {"failed_elements", t.failed},
                       {"elements", t.elements},
                       {"max_abs_err", t.max_abs_err},
                       {"max_rel_err", t.max_rel_err},
                       {"worst_over_bound", t.worst},
                       {"passed", t.passed},
                       {"diagnosis", t.diagnosis}});
  }
  return {{"ran", check.ran},
          {"passed", check.passed},
          {"rtol", check.tolerance.rtol},
          {"atol", check.tolerance.atol},
          {"steps_checked", check.steps_checked},
          {"step", check.step},
          {"tensors", tensors}};
}

nlohmann::json comm_line_json(const CommLine& l) {
  return {{"layer", l.layer},
          {"kind", collective_name(l.kind)},
          {"phase", phase_name(l.phase)},
          {"purpose", comm_purpose_name(l.purpose)},
          {"count", l.count},
          {"bytes_per_rank", l.bytes_sent}};
}

nlohmann::json comm_json(const RunOptions& o, const RunResult& r) {
  nlohmann::json measured = nlohmann::json::array(), model = nlohmann::json::array();
  nlohmann::json param_grad = nlohmann::json::array(), other = nlohmann::json::array();
  nlohmann::json model_param_grad = nlohmann::json::array();
  double total = 0, model_total = 0;
  for (const CommLine& l : r.rank0.comm) {
    if (l.purpose == CommPurpose::activation) {
      measured.push_back(comm_line_json(l));
      total += l.bytes_sent;
    } else if (l.purpose == CommPurpose::param_grad) {
      param_grad.push_back(comm_line_json(l));
    } else {
      other.push_back(comm_line_json(l));
    }
  }
  for (const CommLine& l : comm_model(o.spec.layer, o.spec.keep_gathered_input)) {
    model.push_back(comm_line_json(l));
    if (l.purpose == CommPurpose::activation) model_total += l.bytes_sent;
  }
  return {
      {"lines", measured}, {"model_lines", model},          {"param_grad", param_grad},
      {"other", other},    {"total_bytes_per_rank", total}, {"model_bytes_per_rank", model_total}};
}

}  // namespace

nlohmann::json report_json(const RunOptions& o, const RunResult& r) {
  nlohmann::json j;
  j["format"] = "shardscope-run-report";
  j["version"] = 1;
  j["config"] = config_json(o);
  j["steps"] = nlohmann::json::array();
  for (const StepRecord& s : r.rank0.steps) {
    j["steps"].push_back({{"loss", s.loss}, {"time_ms", s.time_ms}});
  }
  j["memory"] = memory_json(r);
  j["flops"] = {{"forward", r.rank0.flops.forward}, {"recomputed", r.rank0.flops.recomputed}};
  j["check"] = check_json(r.rank0.check);
  j["f32_check"] = check_json(r.rank0.f32_check);  // ran: a 2-byte run's step 0 against f32
  j["comm"] = comm_json(o, r);
  j["model_differences"] = r.model_differences;  // empty: memory and traffic equal the models
  return j;
}

void write_report(const std::string& path, const nlohmann::json& report) {
  const std::string text = report.dump(2) + "\n";
  write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

}  // namespace shardscope
