// The activation model of each mode, term by term.
#include "parallel/memory_model.h"

#include <algorithm>

#include "autograd/dtype.h"

namespace shardscope {
namespace {

// Which ops save the input of the fused QKV and fc1 linears in each mode.
const char* column_op(const LayerConfig& c) {
  return c.mode == ParallelMode::tp_sp ? "gather_matmul" : "matmul";
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
  // Heads are split in every parallel mode; the blocks' replicated parts only under tp.
  const double head_split = t;
  const double block_split = c.mode == ParallelMode::tp ? 1.0 : t;
  const double column_split =
      c.mode == ParallelMode::tp || (c.mode == ParallelMode::tp_sp && keep_gathered_input) ? 1.0
                                                                                           : t;
  const double mlp_split = t;  // GeLU and fc2 inputs: 4h/t columns, or s/t rows under Ulysses
  ActivationModel m;
  auto term = [&](std::string what, std::string scope, std::string op, std::string formula,
                  double bytes) {
    m.terms.push_back(
        {std::move(what), std::move(scope), std::move(op), std::move(formula), bytes});
    m.total_bytes += bytes;
  };
  const std::string tb = block_split > 1 ? "/t" : "", tc = column_split > 1 ? "/t" : "";
  term("LayerNorm 1 input", "ln1", "layernorm", "A sbh" + tb, A * sbh / block_split);
  term("QKV linear input", "attn.qkv", column_op(c), "A sbh" + tc, A * sbh / column_split);
  const std::string th = head_split > 1 ? "/t" : "";
  term("QK^T: Q and K", "attn.scores", "matmul", "2A sbh" + th, 2 * A * sbh / head_split);
  term("softmax output", "attn.softmax", "softmax", "A as^2b" + th, A * as2b / head_split);
  if (drop) {
    term("attention dropout mask", "attn.dropout", "dropout", "M as^2b" + th,
         M * as2b / head_split);
    term("probs x V: dropout output and V", "attn.context", "matmul", "(A as^2b + A sbh)" + th,
         (A * as2b + A * sbh) / head_split);
  } else {
    term("probs x V: V (probs are the softmax output)", "attn.context", "matmul", "A sbh" + th,
         A * sbh / head_split);
  }
  term("output linear input", "attn.proj", "matmul", "A sbh" + th, A * sbh / head_split);
  if (drop) {
    term("attention output dropout mask", "attn.out_dropout", "dropout", "M sbh" + tb,
         M * sbh / block_split);
  }
  term("LayerNorm 2 input", "ln2", "layernorm", "A sbh" + tb, A * sbh / block_split);
  term("fc1 input", "mlp.fc1", column_op(c), "A sbh" + tc, A * sbh / column_split);
  const std::string tm = mlp_split > 1 ? "/t" : "";
  term("GeLU input", "mlp.gelu", "gelu", "4A sbh" + tm, 4 * A * sbh / mlp_split);
  term("fc2 input", "mlp.fc2", "matmul", "4A sbh" + tm, 4 * A * sbh / mlp_split);
  if (drop) term("MLP dropout mask", "mlp.dropout", "dropout", "M sbh" + tb, M * sbh / block_split);
  m.formula = formula_text(c, keep_gathered_input);
  // Two LayerNorms, each a mean and an rstd per row it normalises.
  m.extras_bytes = 2.0 * 2.0 * A * s * b / block_split;
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
