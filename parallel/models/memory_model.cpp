// The activation model of each mode, term by term.
#include "parallel/models/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "autograd/dtype.h"
#include "parallel/layers/layer_decl.h"

namespace shardscope {
namespace {

// The sizes the formulas are written in, in their order: s b h, s b g d (keys and values under
// grouped-query attention), s b f (the MLP's width where it is no multiple of h), a s^2 b.
const char* const kSizes[] = {"sbh", "sbgd", "sbf", "as^2b"};
constexpr int kSizeCount = 4;

// A part's size as a multiple of one of kSizes: its width in units (decl::width_in) times s b.
struct SizeOf {
  double k;
  int size;  // index into kSizes
};
SizeOf size_of(const decl::SavedPart& p, const LayerConfig& c) {
  if (p.as2b) return {p.coeff, 3};
  const decl::WidthIn in = decl::width_in(p.width, c);
  const int size = in.unit[0] == 'h' ? 0 : in.unit[0] == 'g' ? 1 : 2;
  return {p.coeff * static_cast<double>(in.k), size};
}

// How a mode splits a part over its ranks: the divisor and its symbol ("" for whole).
struct SplitOf {
  double divisor;
  const char* symbol;  // "", "t" or "g"
};

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

// The A and M coefficients of one size, per split symbol: [0] whole, [1] /t, [2] /g.
struct Coefficients {
  double a[3] = {0, 0, 0}, m[3] = {0, 0, 0};
  bool empty() const {
    for (int i = 0; i < 3; ++i) {
      if (a[i] != 0 || m[i] != 0) return false;
    }
    return true;
  }
};
using Sizes = Coefficients[kSizeCount];  // one per kSizes
int split_index(const char* symbol) {
  return symbol[0] == 't' ? 1 : symbol[0] == 'g' ? 2 : 0;
}
const char* const kSplitSymbols[] = {"", "/t", "/g"};

// "sbh(4A + 2M + 12A/t)", "as^2b(2A + M)/t": one size's coefficients, those split written with
// their divisor (factored out of the parentheses when the whole size is split one way).
std::string size_text(const char* size, const Coefficients& k) {
  int used = 0, only = 0;
  for (int i = 0; i < 3; ++i) {
    if (k.a[i] != 0 || k.m[i] != 0) {
      ++used;
      only = i;
    }
  }
  if (used == 1)
    return std::string(size) + "(" + coefficients(k.a[only], k.m[only]) + ")" + kSplitSymbols[only];
  std::string inside;
  for (int i = 0; i < 3; ++i) {
    std::string c = coefficients(k.a[i], k.m[i]);
    if (c.empty()) continue;
    if (i > 0 && c.find('+') != std::string::npos) c = "(" + c + ")";
    inside += (inside.empty() ? "" : " + ") + c + kSplitSymbols[i];
  }
  return std::string(size) + "(" + inside + ")";
}

// The closed form of the terms' sum: "sbh(16A + 2M) + as^2b(2A + M)",
// "sbh(4A + 2M + 12A/t) + as^2b(2A + M)/t", and "(sbh(16A + 2M) + as^2b(2A + M))/t" when every
// part of two sizes or more is split over t.
std::string closed_form(const Sizes& sizes) {
  bool all_t = true;
  int used = 0;
  for (const Coefficients& k : sizes) {
    all_t = all_t && k.a[0] == 0 && k.m[0] == 0 && k.a[2] == 0 && k.m[2] == 0;
    used += k.empty() ? 0 : 1;
  }
  if (used == 1) all_t = false;  // one size: "sbh(16A + 2M)/t" as it stands
  std::string out;
  for (int i = 0; i < kSizeCount; ++i) {
    if (sizes[i].empty()) continue;
    Coefficients k = sizes[i];
    if (all_t) {  // the /t is factored out of the whole sum
      k.a[0] = k.a[1];
      k.m[0] = k.m[1];
      k.a[1] = k.m[1] = 0;
    }
    out += (out.empty() ? "" : " + ") + size_text(kSizes[i], k);
  }
  return all_t && !out.empty() ? "(" + out + ")/t" : out;
}

// Adds a part's coefficient, in its size's units, to `sizes` under its split.
void add_part(Sizes& sizes, const decl::SavedPart& p, const LayerConfig& c, const SplitOf& split) {
  const SizeOf z = size_of(p, c);
  (p.unit == 'A' ? sizes[z.size].a : sizes[z.size].m)[split_index(split.symbol)] += z.k;
}

// A term's formula as the papers write it, from its parts summed by size and split: "A sbh",
// "2A sbh/t", "(A as^2b + A sbh)/t", and with parts split two ways "(A sbh/t + A sbgd/g)".
std::string term_formula(const Sizes& sizes) {
  struct Part {
    std::string text;  // "2A sbh"
    int split;
  };
  std::vector<Part> parts;
  std::set<int> used_splits;
  for (const int size : {3, 0, 1, 2}) {  // as^2b first, as the papers write probs x V
    const Coefficients& k = sizes[size];
    for (int split = 0; split < 3; ++split) {
      for (const std::string& c : {coefficients(k.a[split], 0), coefficients(0, k.m[split])}) {
        if (c.empty()) continue;
        parts.push_back({c + " " + kSizes[size], split});
        used_splits.insert(split);
      }
    }
  }
  const bool one_split = used_splits.size() == 1;
  std::string f;
  for (const Part& part : parts) {
    f += (f.empty() ? "" : " + ") + part.text + (one_split ? "" : kSplitSymbols[part.split]);
  }
  if (parts.size() > 1) f = "(" + f + ")";
  return f + (one_split ? kSplitSymbols[*used_splits.begin()] : "");
}

}  // namespace

ActivationModel activation_model(const LayerConfig& c, bool keep_gathered_input) {
  const double A = static_cast<double>(dtype_size(c.dtype));
  const double M = 1.0;
  // The norms' statistics: f32 for the 2-byte types (statistics_dtype), else the layer's dtype.
  const double S = static_cast<double>(dtype_size(statistics_dtype(c.dtype)));
  const double s = static_cast<double>(c.seq), b = static_cast<double>(c.batch);
  const double t = static_cast<double>(c.mode == ParallelMode::single ? 1 : c.degree);
  const double g = static_cast<double>(c.kv_heads_count());
  const double sb = s * b;
  const double as2b = static_cast<double>(c.heads) * s * s * b;
  const bool drop = c.dropout > 0.0;
  // How the mode splits each kind of saved activation over its t ranks (decl::SavedSplit):
  // heads in every parallel mode; the activations between blocks everywhere but tp; a
  // column-parallel linear's input where it is sequence-sharded; the MLP's inner ones by columns
  // or rows, always; keys and values over min(t, g) (a rank holds one of g heads where t > g).
  auto split_of = [&](decl::SavedSplit k) -> SplitOf {
    if (c.mode == ParallelMode::single) return {1, ""};
    switch (k) {
      case decl::SavedSplit::block:
        return c.mode == ParallelMode::tp ? SplitOf{1, ""} : SplitOf{t, "t"};
      case decl::SavedSplit::input:
        return c.mode == ParallelMode::tp || (c.mode == ParallelMode::tp_sp && keep_gathered_input)
                   ? SplitOf{1, ""}
                   : SplitOf{t, "t"};
      case decl::SavedSplit::kv_heads:
        return t <= g ? SplitOf{t, "t"} : SplitOf{g, "g"};
      case decl::SavedSplit::heads:
      case decl::SavedSplit::columns:
        return {t, "t"};
    }
    return {t, "t"};
  };
  // The op that saves a column-parallel linear's input: tp-sp's gather_matmul, else matmul.
  const char* column_op = c.mode == ParallelMode::tp_sp ? "gather_matmul" : "matmul";
  ActivationModel m;
  Sizes sizes;
  for (const decl::ModuleDecl& module : decl::modules(c)) {
    for (const decl::SavedDecl& d : module.saved) {
      if (!d.applies(drop)) continue;
      Sizes term_sizes;
      double bytes = 0;
      for (const decl::SavedPart& p : d.parts) {
        const SplitOf split = split_of(p.split);
        const double size = p.as2b ? as2b : sb * static_cast<double>(decl::width(p.width, c));
        bytes += p.coeff * (p.unit == 'A' ? A : M) * size / split.divisor;
        add_part(term_sizes, p, c, split);
        add_part(sizes, p, c, split);
      }
      m.terms.push_back(
          {d.what, module.scope, *d.op ? d.op : column_op, term_formula(term_sizes), bytes});
      m.total_bytes += bytes;
    }
    // A norm keeps its statistics per row it normalises (LayerNorm: mean and rstd; RMSNorm:
    // rstd), outside the formula, S bytes each.
    m.extras_bytes += module.row_statistics * S * sb / split_of(decl::SavedSplit::block).divisor;
  }
  m.formula = closed_form(sizes);
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
  std::vector<MeasuredTerm> terms = measure_sites(model, sites);
  for (MeasuredTerm& t : terms) t.layer = layer;
  return terms;
}

ActivationModel single_device_activation_model(const LayerConfig& c) {
  LayerConfig single = c;
  single.mode = ParallelMode::single;
  single.degree = 1;
  return activation_model(single, false);
}

namespace {

// The elements of the stack's parameters, whole and as a rank of config.mode holds them.
struct ParamCount {
  double full = 0, rank = 0;
};
ParamCount param_count(const LayerConfig& c) {
  const double t = c.mode == ParallelMode::single ? 1.0 : static_cast<double>(c.degree);
  ParamCount n;
  for (const decl::Param& p : decl::parameters(c)) {
    const double numel = static_cast<double>(c.layers) * static_cast<double>(p.shape.numel());
    n.full += numel;
    n.rank += decl::placement(*p.decl, c).is_shard() ? numel / t : numel;
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
  const double activations = c.layers * (model.total_bytes + model.extras_bytes);
  const double held = std::max(activations + params * a, 2 * params * a);
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
