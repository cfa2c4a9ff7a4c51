// The activation model of each mode, term by term.
#include "parallel/models/memory_model.h"

#include <algorithm>

#include "autograd/dtype.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {
namespace {

// A term's formula as the papers write it: "A sbh", "2A sbh", "M as^2b", "(A as^2b + A sbh)",
// with "/t" when the term is split over the ranks.
std::string term_formula(const decl::SavedDecl& d, bool split) {
  std::vector<std::string> parts;
  auto add = [&](double k, const char* unit, const char* size) {
    if (k == 0) return;
    std::string coefficient = k == 1 ? "" : std::to_string(static_cast<int>(k));
    parts.push_back(coefficient + unit + " " + size);
  };
  add(d.a_as2b, "A", "as^2b");
  add(d.m_as2b, "M", "as^2b");
  add(d.a_sbh, "A", "sbh");
  add(d.m_sbh, "M", "sbh");
  std::string f;
  for (const std::string& part : parts) f += (f.empty() ? "" : " + ") + part;
  if (parts.size() > 1) f = "(" + f + ")";
  return f + (split ? "/t" : "");
}

}  // namespace

ActivationModel activation_model(const LayerConfig& c, bool keep_gathered_input) {
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double M = 1.0;
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double t = static_cast<double>(c.mode == ParallelMode::single ? 1 : c.degree);
  const double sbh = s * b * static_cast<double>(c.hidden);
  const double as2b = static_cast<double>(c.heads) * s * s * b;
  const bool drop = c.dropout > 0.0;
  // How many ways each kind of saved activation is split (decl::SavedSplit): heads in every
  // parallel mode; the activations between blocks everywhere but tp; a column-parallel linear's
  // input where it is sequence-sharded; the MLP's inner ones by columns or rows, always.
  auto split_of = [&](decl::SavedSplit k) {
    switch (k) {
      case decl::SavedSplit::block:
        return c.mode == ParallelMode::tp ? 1.0 : t;
      case decl::SavedSplit::input:
        return c.mode == ParallelMode::tp || (c.mode == ParallelMode::tp_sp && keep_gathered_input)
                   ? 1.0
                   : t;
      case decl::SavedSplit::heads:
      case decl::SavedSplit::columns:
        return t;
    }
    return t;
  };
  // The op that saves a column-parallel linear's input: tp-sp's gather_matmul, else matmul.
  const char* column_op = c.mode == ParallelMode::tp_sp ? "gather_matmul" : "matmul";
  ActivationModel m;
  for (const decl::ModuleDecl& module : decl::modules()) {
    for (const decl::SavedDecl& d : module.saved) {
      if (!d.applies(drop)) continue;
      const double split = split_of(d.split);
      const double bytes =
          ((d.a_sbh * A + d.m_sbh * M) * sbh + (d.a_as2b * A + d.m_as2b * M) * as2b) / split;
      m.terms.push_back(
          {d.what, module.scope, *d.op ? d.op : column_op, term_formula(d, split > 1), bytes});
      m.total_bytes += bytes;
    }
  }
  m.formula = formula_text(c, keep_gathered_input);
  // Each declared LayerNorm keeps a mean and an rstd per row it normalises.
  const double norms = decl::count(decl::Kind::layernorm);
  m.extras_bytes = norms * 2.0 * A * s * b / split_of(decl::SavedSplit::block);
  return m;
}

std::string formula_text(const LayerConfig& c, bool keep_gathered_input) {
  if (c.dropout <= 0.0) return "the formula without dropout masks (docs/derivations.md)";
  switch (c.mode) {
    case ParallelMode::single:
      return "sbh(16A + 2M) + as^2b(2A + M)";
    case ParallelMode::tp:
      return "sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t";
    case ParallelMode::tp_sp:
      return keep_gathered_input ? "sbh(2A + (14A + 2M)/t) + as^2b(2A + M)/t"
                                 : "(sbh(16A + 2M) + as^2b(2A + M))/t";
    case ParallelMode::ulysses:
      return "(sbh(16A + 2M) + as^2b(2A + M))/t";
  }
  return "?";
}

std::vector<MeasuredTerm> measure_sites(const ActivationModel& model,
                                        const std::vector<SavedAt>& sites) {
  std::vector<MeasuredTerm> rows;
  std::vector<bool> claimed(sites.size(), false);
  for (const ActivationTerm& t : model.terms) {
    MeasuredTerm row{t.what, t.scope, t.op, t.formula, t.bytes, 0};
    for (std::size_t i = 0; i < sites.size(); ++i) {
      if (!claimed[i] && sites[i].scope == t.scope && sites[i].op == t.op) {
        row.measured_bytes += sites[i].bytes;
        claimed[i] = true;
      }
    }
    rows.push_back(row);
  }
  for (std::size_t i = 0; i < sites.size(); ++i) {
    if (!claimed[i] && sites[i].bytes > 0) {
      rows.push_back({"(not in the model)", sites[i].scope, sites[i].op, "-", 0, sites[i].bytes});
    }
  }
  return rows;
}

std::vector<MeasuredTerm> measure_terms(const ActivationModel& model, const MemoryLedger& ledger,
                                        int layer) {
  std::vector<SavedAt> sites;
  for (const MemoryLedger::SavedSite& site : ledger.saved_by_site(layer)) {
    if (site.role == SaveRole::activation) {
      sites.push_back({site.scope, site.op, static_cast<double>(site.bytes)});
    }
  }
  return measure_sites(model, sites);
}

ActivationModel single_device_activation_model(const LayerConfig& c) {
  LayerConfig single = c;
  single.mode = ParallelMode::single;
  single.degree = 1;
  return activation_model(single, false);
}

namespace {

// The rank's bytes of its own run: see estimate_run_memory.
double rank_bytes(const LayerConfig& c, bool keep_gathered_input) {
  const ActivationModel model = activation_model(c, keep_gathered_input);
  const double a = static_cast<double>(dtype_size(c.dtype)), h = static_cast<double>(c.hidden);
  const double t = c.mode == ParallelMode::single ? 1.0 : static_cast<double>(c.degree);
  const double sbh = static_cast<double>(c.seq) * static_cast<double>(c.batch) * h;
  const bool split_weights = c.mode == ParallelMode::tp || c.mode == ParallelMode::tp_sp;
  // Weights [h, 3h], [h, h], [h, 4h], [4h, h] and biases 3h, h, 4h, h, LayerNorms 4h; tp and tp-sp
  // split the four weights, the QKV and fc1 biases.
  const double params = split_weights ? (12 * h * h + 7 * h) / t + 6 * h : 12 * h * h + 13 * h;
  const double local_sbh = c.mode == ParallelMode::tp ? sbh : sbh / t;
  // Backward frees the saved activations as it makes the gradients: the peak holds at least
  // either all the activations with the parameters, or the parameters with their gradients.
  const double held = std::max(model.total_bytes + model.extras_bytes + params * a, 2 * params * a);
  return held + 3 * local_sbh * a;  // with the input, the target and the output
}

double full_data_bytes(const LayerConfig& c) {
  const double h = static_cast<double>(c.hidden);
  const double sbh = static_cast<double>(c.seq) * static_cast<double>(c.batch) * h;
  return (12 * h * h + 13 * h + 2 * sbh) * static_cast<double>(dtype_size(c.dtype));
}

}  // namespace

RunMemoryEstimate estimate_run_memory(const LayerConfig& config, bool keep_gathered_input,
                                      bool checked, int ranks_in_process) {
  RunMemoryEstimate e;
  e.per_rank_bytes = rank_bytes(config, keep_gathered_input);
  e.process_bytes = ranks_in_process * (e.per_rank_bytes + full_data_bytes(config));
  if (checked) {
    LayerConfig single = config;
    single.mode = ParallelMode::single;
    single.degree = 1;
    e.process_bytes += rank_bytes(single, false) + full_data_bytes(config);
  }
  return e;
}

}  // namespace shardscope
