// The activation model of each mode, term by term.
#include "parallel/models/memory_model.h"

#include <algorithm>
#include <cstdio>

#include "autograd/dtype.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {
namespace {

// A saved activation's sbw width as a multiple of a size symbol: k h where the width is a whole
// multiple of h (the fused QKV's 3h, GPT's f = 4h), else k f (SwiGLU's 2f).
struct SizeOf {
  double k;
  const char* size;  // "sbh", "sbf"
};
SizeOf size_of(decl::Width w, const LayerConfig& c) {
  const double h = static_cast<double>(c.hidden);
  const double width = static_cast<double>(decl::width(w, c));
  const double in_f = width / static_cast<double>(c.ffn_width());
  if (w == decl::Width::ffn || w == decl::Width::gate_up) {
    if (c.ffn_width() % c.hidden != 0) return {in_f, "sbf"};
  }
  return {width / h, "sbh"};
}

// "16A + 2M": a sum of A and M coefficients ("A" for 1A); empty for none.
std::string coefficients(double a, double m) {
  auto one = [](double k, const char* unit) {
    if (k == 0) return std::string();
    char text[32];
    std::snprintf(text, sizeof text, "%g", k);
    return (k == 1 ? std::string() : std::string(text)) + unit;
  };
  const std::string ta = one(a, "A"), tm = one(m, "M");
  return ta.empty() ? tm : tm.empty() ? ta : ta + " + " + tm;
}

// A term's formula as the papers write it: "A sbh", "2A sbh", "M as^2b", "(A as^2b + A sbh)",
// with "/t" when the term is split over the ranks.
std::string term_formula(const decl::SavedDecl& d, const LayerConfig& c, bool split) {
  std::vector<std::string> parts;
  auto add = [&](double k, const char* unit, const char* size) {
    if (k == 0) return;
    parts.push_back(coefficients(unit[0] == 'A' ? k : 0, unit[0] == 'M' ? k : 0) + " " + size);
  };
  const SizeOf w = size_of(d.width, c);
  add(d.a_as2b, "A", "as^2b");
  add(d.m_as2b, "M", "as^2b");
  add(d.a_sbh * w.k, "A", w.size);
  add(d.m_sbh * w.k, "M", w.size);
  std::string f;
  for (const std::string& part : parts) f += (f.empty() ? "" : " + ") + part;
  if (parts.size() > 1) f = "(" + f + ")";
  return f + (split ? "/t" : "");
}

// The closed form of the terms' sum, grouped by size (sbh, sbf, as^2b) and by whether the mode
// splits them: "sbh(16A + 2M) + as^2b(2A + M)", "sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t",
// "(sbh(16A + 2M) + as^2b(2A + M))/t" when every term is split.
struct Group {
  const char* size;
  double a[2] = {0, 0}, m[2] = {0, 0};  // [whole, split]
};
std::string closed_form(std::vector<Group> groups) {
  bool all_split = true;
  for (const Group& g : groups) all_split = all_split && g.a[0] == 0 && g.m[0] == 0;
  std::string out;
  for (const Group& g : groups) {
    const std::string whole = coefficients(g.a[0], g.m[0]);
    std::string split = coefficients(g.a[1], g.m[1]);
    if (whole.empty() && split.empty()) continue;
    std::string text;
    if (all_split || whole.empty()) {
      text = std::string(g.size) + "(" + split + ")" + (all_split ? "" : "/t");
    } else if (split.empty()) {
      text = std::string(g.size) + "(" + whole + ")";
    } else {
      if (split.find('+') != std::string::npos) split = "(" + split + ")";
      text = std::string(g.size) + "(" + whole + " + " + split + "/t)";
    }
    out += (out.empty() ? "" : " + ") + text;
  }
  return all_split && !out.empty() ? "(" + out + ")/t" : out;
}

}  // namespace

ActivationModel activation_model(const LayerConfig& c, bool keep_gathered_input) {
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double M = 1.0;
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double t = static_cast<double>(c.mode == ParallelMode::single ? 1 : c.degree);
  const double sb = s * b;
  const double as2b = static_cast<double>(c.heads) * s * s * b;
  const bool drop = c.dropout > 0.0;
  // Whether the mode splits each kind of saved activation over its t ranks (decl::SavedSplit):
  // heads in every parallel mode; the activations between blocks everywhere but tp; a
  // column-parallel linear's input where it is sequence-sharded; the MLP's inner ones by columns
  // or rows, always.
  auto splits = [&](decl::SavedSplit k) {
    if (c.mode == ParallelMode::single) return false;
    switch (k) {
      case decl::SavedSplit::block:
        return c.mode != ParallelMode::tp;
      case decl::SavedSplit::input:
        return !(c.mode == ParallelMode::tp ||
                 (c.mode == ParallelMode::tp_sp && keep_gathered_input));
      case decl::SavedSplit::heads:
      case decl::SavedSplit::columns:
        return true;
    }
    return true;
  };
  // The op that saves a column-parallel linear's input: tp-sp's gather_matmul, else matmul.
  const char* column_op = c.mode == ParallelMode::tp_sp ? "gather_matmul" : "matmul";
  ActivationModel m;
  std::vector<Group> groups{{"sbh"}, {"sbf"}, {"as^2b"}};
  for (const decl::ModuleDecl& module : decl::modules(c)) {
    for (const decl::SavedDecl& d : module.saved) {
      if (!d.applies(drop)) continue;
      const bool split = splits(d.split);
      const double width = static_cast<double>(decl::width(d.width, c));
      const double bytes =
          ((d.a_sbh * A + d.m_sbh * M) * sb * width + (d.a_as2b * A + d.m_as2b * M) * as2b) /
          (split ? t : 1.0);
      m.terms.push_back(
          {d.what, module.scope, *d.op ? d.op : column_op, term_formula(d, c, split), bytes});
      m.total_bytes += bytes;
      const SizeOf w = size_of(d.width, c);
      Group& g = groups[w.size[2] == 'h' ? 0 : 1];
      g.a[split] += d.a_sbh * w.k;
      g.m[split] += d.m_sbh * w.k;
      groups[2].a[split] += d.a_as2b;
      groups[2].m[split] += d.m_as2b;
    }
    // A norm keeps its statistics per row it normalises (LayerNorm: mean and rstd; RMSNorm:
    // rstd), outside the formula.
    m.extras_bytes += module.row_statistics * A * sb / (splits(decl::SavedSplit::block) ? t : 1.0);
  }
  m.formula = closed_form(groups);
  return m;
}

std::string formula_text(const LayerConfig& c, bool keep_gathered_input) {
  return activation_model(c, keep_gathered_input).formula;
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

// The elements of the layer's parameters, whole and as a rank of config.mode holds them.
struct ParamCount {
  double full = 0, rank = 0;
};
ParamCount param_count(const LayerConfig& c) {
  const double t = c.mode == ParallelMode::single ? 1.0 : static_cast<double>(c.degree);
  ParamCount n;
  for (const decl::Param& p : decl::parameters(c)) {
    const double numel = static_cast<double>(p.shape.numel());
    n.full += numel;
    n.rank += decl::placement(*p.decl, c.mode).is_shard() ? numel / t : numel;
  }
  return n;
}

// The rank's bytes of its own run: see estimate_run_memory.
double rank_bytes(const LayerConfig& c, bool keep_gathered_input) {
  const ActivationModel model = activation_model(c, keep_gathered_input);
  const double a = static_cast<double>(dtype_size(c.dtype)), h = static_cast<double>(c.hidden);
  const double t = c.mode == ParallelMode::single ? 1.0 : static_cast<double>(c.degree);
  const double sbh = static_cast<double>(c.seq) * static_cast<double>(c.batch) * h;
  const double params = param_count(c).rank;
  const double local_sbh = c.mode == ParallelMode::tp ? sbh : sbh / t;
  // Backward frees the saved activations as it makes the gradients: the peak holds at least
  // either all the activations with the parameters, or the parameters with their gradients.
  const double held = std::max(model.total_bytes + model.extras_bytes + params * a, 2 * params * a);
  return held + 3 * local_sbh * a;  // with the input, the target and the output
}

double full_data_bytes(const LayerConfig& c) {
  const double h = static_cast<double>(c.hidden);
  const double sbh = static_cast<double>(c.seq) * static_cast<double>(c.batch) * h;
  return (param_count(c).full + 2 * sbh) * static_cast<double>(dtype_size(c.dtype));
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
