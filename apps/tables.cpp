// The check, communication and memory tables of `shardscope run`.
#include <cstdio>

#include "apps/run.h"
#include "parallel/models/memory_model.h"

namespace shardscope {
namespace {

bool same_key(const CommLine& a, const CommLine& b) {
  return a.layer == b.layer && a.kind == b.kind && a.phase == b.phase && a.purpose == b.purpose;
}

// The first column: the collective, after its layer in a stack ("layer 1 all_gather"; a
// collective outside the layers, the loss's or the check's, "- all_reduce").
struct CommLabel {
  bool stack;
  std::string operator()(const CommLine& l) const {
    const std::string kind = collective_name(l.kind);
    if (!stack) return kind;
    return (l.layer >= 0 ? "layer " + std::to_string(l.layer) : std::string("-")) + " " + kind;
  }
  int width() const { return stack ? 26 : 16; }
};

void print_comm_line(const CommLabel& label, const CommLine& l, int count, double bytes,
                     int model_count, double model_bytes, std::ostream& out) {
  char line[240];
  const bool match = count == model_count && bytes == model_bytes;
  std::snprintf(line, sizeof line, "%-*s %-9s %-11s %7d %16.0f %7d %16.0f  %s\n", label.width(),
                label(l).c_str(), phase_name(l.phase), comm_purpose_name(l.purpose), count, bytes,
                model_count, model_bytes, match ? "match" : "DIFFERS");
  out << line;
}

// A line the model does not cover (the loss, the check's own collectives): measured only.
void print_unmodelled_line(const CommLabel& label, const CommLine& l, std::ostream& out) {
  char line[240];
  std::snprintf(line, sizeof line, "%-*s %-9s %-11s %7d %16.0f %7s %16s  %s\n", label.width(),
                label(l).c_str(), phase_name(l.phase), comm_purpose_name(l.purpose), l.count,
                l.bytes_sent, "-", "-", "no model");
  out << line;
}

// A sum wrapped in parentheses where a product would bind to its first term only: "sbh(15A)/t +
// sbgd(2A)/g" -> "(sbh(15A)/t + sbgd(2A)/g)"; "(sbh(16A + 2M) + as^2b(2A + M))/t" stays.
std::string parenthesised(const std::string& formula) {
  int depth = 0;
  for (std::size_t i = 0; i < formula.size(); ++i) {
    depth += formula[i] == '(' ? 1 : formula[i] == ')' ? -1 : 0;
    if (depth == 0 && formula[i] == '+') return "(" + formula + ")";
  }
  return formula;
}

bool is_modelled(const CommLine& line) {
  return line.purpose == CommPurpose::activation || line.purpose == CommPurpose::param_grad;
}

// The rows of a check's table, its diagnoses and its verdict.
void print_check_rows(const CheckResult& check, std::ostream& out) {
  char line[240];
  std::snprintf(line, sizeof line, "%-26s %20s %12s %12s %12s  %s\n", "tensor", "failed elements",
                "max_abs_err", "max_rel_err", "worst/bound", "result");
  out << line;
  for (const TensorCheck& t : check.tensors) {
    const std::string failed = std::to_string(t.failed) + " of " + std::to_string(t.elements);
    std::snprintf(line, sizeof line, "%-26s %20s %12.3e %12.3e %12.3e  %s\n", t.name.c_str(),
                  failed.c_str(), t.max_abs_err, t.max_rel_err, t.worst,
                  t.passed ? "pass" : "FAIL");
    out << line;
  }
  for (const TensorCheck& t : check.tensors) {
    if (!t.diagnosis.empty()) out << "  " << t.name << ": " << t.diagnosis << "\n";
  }
  out << "check " << (check.passed ? "passed" : "FAILED") << "\n";
}

}  // namespace

void print_check_table(const CheckResult& check, std::ostream& out) {
  out << "\nreference check against the single-device layer stepping in lockstep (same weights, "
         "data and SGD updates): an element passes when |a - b| <= "
      << check.tolerance.atol << " max|b| + " << check.tolerance.rtol << " |b|\n";
  if (check.passed) {
    out << "steps 0-" << check.step << " checked, every tensor passed; step " << check.step
        << ":\n";
  } else {
    out << "step " << check.step << " FAILED (steps before it passed):\n";
  }
  print_check_rows(check, out);
}

void print_f32_check_table(const CheckResult& check, std::ostream& out) {
  out << "\nstep 0 against the single-device layer in f32 (the same weights and data, widened "
         "exactly): an element passes when |a - b| <= "
      << check.tolerance.atol << " max|b| + " << check.tolerance.rtol << " |b|\n";
  print_check_rows(check, out);
}

void print_comm_table(const std::vector<CommLine>& measured, const std::vector<CommLine>& model,
                      std::ostream& out) {
  char line[200];
  out << "\ncommunication per rank, step 0: the collectives observed, with the bytes a rank sends "
         "for each under the ring algorithm (all-reduce 2(t-1)/t of the buffer, all-gather and "
         "reduce-scatter (t-1)/t of the full tensor, all-to-all (t-1)/t of it), not the bytes "
         "the communicator moved; the model covers activations and parameter gradients\n";
  bool stack = false;
  for (const CommLine& m : model) stack = stack || m.layer > 0;
  const CommLabel label{stack};
  std::snprintf(line, sizeof line, "%-*s %-9s %-11s %7s %16s %7s %16s\n", label.width(),
                stack ? "layer, collective" : "collective", "phase", "purpose", "calls",
                "bytes sent", "model", "model bytes");
  out << line;
  double total = 0, model_total = 0;
  for (const CommLine& m : measured) {
    int model_count = 0;
    double model_bytes = 0;
    for (const CommLine& e : model) {
      if (same_key(m, e)) model_count = e.count, model_bytes = e.bytes_sent;
    }
    if (m.purpose == CommPurpose::activation) total += m.bytes_sent;
    if (!is_modelled(m)) {
      print_unmodelled_line(label, m, out);
      continue;
    }
    print_comm_line(label, m, m.count, m.bytes_sent, model_count, model_bytes, out);
  }
  for (const CommLine& e : model) {
    bool seen = false;
    for (const CommLine& m : measured) seen = seen || same_key(m, e);
    if (e.purpose == CommPurpose::activation) model_total += e.bytes_sent;
    if (!seen) print_comm_line(label, e, 0, 0, e.count, e.bytes_sent, out);
  }
  std::snprintf(line, sizeof line, "%-*s %7s %16.0f %7s %16.0f  %s\n", label.width() + 22,
                "total (activations, forward + backward)", "", total, "", model_total,
                total == model_total ? "match" : "DIFFERS");
  out << line;
}

void print_memory_table(const RankMemory& m, const LayerConfig& c, std::ostream& out) {
  char line[256];
  const bool stack = c.layers > 1;
  out << "\nsaved activation memory of "
      << (stack ? "each layer" : "layer " + std::to_string(c.layer)) << ", rank " << m.rank
      << ", after the forward of step 0 (A = " << dtype_size(c.dtype) << " bytes, "
      << dtype_name(c.dtype) << "; M = 1 byte, u8 mask; " << c.shape_text() << ", t=" << c.degree
      << ")\n";
  if (stack) {
    out << "terms of layer 0; a term of another layer follows only where it differs\n";
  }
  std::snprintf(line, sizeof line, "%-34s %-30s %-22s %12s %12s\n", "term", "saved by", "formula",
                "measured B", "formula B");
  out << line;
  for (const MeasuredTerm& t : m.terms) {
    const bool differs = t.measured_bytes != t.model_bytes;
    if (t.layer != 0 && !differs) continue;
    const std::string what =
        (t.layer != 0 ? "layer " + std::to_string(t.layer) + ": " : "") + t.what;
    std::snprintf(line, sizeof line, "%-34s %-30s %-22s %12.0f %12.0f%s\n", what.c_str(),
                  (t.scope + "/" + t.op).c_str(), t.formula.c_str(), t.measured_bytes,
                  t.model_bytes, differs ? "  <- differs" : "");
    out << line;
  }
  double in_layers = 0;
  for (const LayerMemory& l : m.layers) {
    in_layers += l.saved_activation_bytes;
    if (!stack) continue;
    const std::string what = "layer " + std::to_string(l.layer);
    std::snprintf(line, sizeof line, "%-34s %-53s %12.0f %12.0f  %s\n", what.c_str(),
                  m.formula.c_str(), l.saved_activation_bytes, l.formula_bytes,
                  l.saved_activation_bytes == l.formula_bytes ? "match" : "MISMATCH");
    out << line;
  }
  if (stack || m.saved_activation_bytes != in_layers) {
    std::snprintf(line, sizeof line, "%-34s %-53s %12.0f %12.0f\n", "outside the layers",
                  "nothing saved for backward", m.saved_activation_bytes - in_layers, 0.0);
    out << line;
  }
  const bool match = m.saved_activation_bytes == m.formula_bytes;
  const std::string total = stack ? "total, " + std::to_string(c.layers) + " layers" : "total";
  const std::string formula =
      stack ? std::to_string(c.layers) + " x " + parenthesised(m.formula) : m.formula;
  std::snprintf(line, sizeof line, "%-34s %-53s %12.0f %12.0f  %s\n", total.c_str(),
                formula.c_str(), m.saved_activation_bytes, m.formula_bytes,
                match ? "match" : "MISMATCH");
  out << line;
  std::snprintf(line, sizeof line, "%-34s %-53s %12.0f %12.0f\n", "extras (norm statistics)",
                "not in the formula", m.extras_bytes, m.formula_extras_bytes);
  out << line;
  std::snprintf(line, sizeof line, "%-34s %-53s %12.0f\n", "peak live bytes",
                "all categories, whole run", m.peak_bytes);
  out << line;
}

std::vector<std::string> model_differences(const std::vector<RankMemory>& memory,
                                           const std::vector<CommLine>& measured,
                                           const std::vector<CommLine>& model) {
  std::vector<std::string> out;
  auto bytes = [](double b) { return std::to_string(static_cast<long long>(b)) + " B"; };
  for (const RankMemory& m : memory) {
    const std::string rank = "rank " + std::to_string(m.rank) + ": ";
    if (m.saved_activation_bytes != m.formula_bytes) {
      out.push_back(rank + "saved activations " + bytes(m.saved_activation_bytes) +
                    ", the formula " + bytes(m.formula_bytes));
    }
    for (const LayerMemory& l : m.layers) {
      if (l.saved_activation_bytes != l.formula_bytes) {
        out.push_back(rank + "layer " + std::to_string(l.layer) + "'s saved activations " +
                      bytes(l.saved_activation_bytes) + ", the formula " + bytes(l.formula_bytes));
      }
    }
    for (const MeasuredTerm& t : m.terms) {
      if (t.measured_bytes != t.model_bytes) {
        out.push_back(rank + "layer " + std::to_string(t.layer) + ", term '" + t.what + "' (" +
                      t.scope + "/" + t.op + ") " + bytes(t.measured_bytes) + ", its formula " +
                      bytes(t.model_bytes));
      }
    }
  }
  auto name = [](const CommLine& l) {
    return "layer " + std::to_string(l.layer) + ", " + collective_name(l.kind) + " " +
           phase_name(l.phase) + " " + comm_purpose_name(l.purpose);
  };
  for (const CommLine& m : measured) {
    if (!is_modelled(m)) continue;
    const CommLine* e = nullptr;
    for (const CommLine& candidate : model) e = same_key(m, candidate) ? &candidate : e;
    if (!e) {
      out.push_back("communication: " + name(m) + " observed (" + std::to_string(m.count) +
                    " calls, " + bytes(m.bytes_sent) + "), not in the model");
    } else if (e->count != m.count || e->bytes_sent != m.bytes_sent) {
      out.push_back("communication: " + name(m) + " " + std::to_string(m.count) + " calls, " +
                    bytes(m.bytes_sent) + "; the model " + std::to_string(e->count) + " calls, " +
                    bytes(e->bytes_sent));
    }
  }
  for (const CommLine& e : model) {
    bool seen = false;
    for (const CommLine& m : measured) seen = seen || same_key(m, e);
    if (!seen) out.push_back("communication: " + name(e) + " in the model, never observed");
  }
  return out;
}

}  // namespace shardscope
