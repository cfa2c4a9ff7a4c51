// gradcheck: analytic gradients from backward against central finite differences, in f64 (values
// perturbed through the backend, so on any device), with a report written for the student.
#include "autograd/gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "autograd/backend.h"
#include "autograd/context.h"
#include "autograd/errors.h"

namespace shardscope {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}
std::string value_str(double v) {
  return fmt("%.10g", v);
}
std::string error_str(double v) {
  return fmt("%.3e", v);
}

// "input 1 (weight f64[3, 4])"
std::string label(const std::vector<Tensor>& inputs, std::size_t i) {
  return "input " + std::to_string(i) + " (" + inputs[i].describe() + ")";
}

// The multi-index of a flat row-major position: "[1, 2]".
std::string index_str(const Shape& shape, std::int64_t flat) {
  const std::vector<std::int64_t> strides = shape.strides();
  std::string out = "[";
  for (std::size_t d = 0; d < strides.size(); ++d) {
    out += (d ? ", " : "") + std::to_string(flat / strides[d]);
    flat %= strides[d];
  }
  return out + "]";
}

void check_inputs(const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  if (!(options.eps > 0.0) || options.atol < 0.0 || options.rtol < 0.0) {
    throw ArgumentError("gradcheck: eps must be > 0 and atol, rtol >= 0, given eps " +
                        value_str(options.eps) + ", atol " + value_str(options.atol) + ", rtol " +
                        value_str(options.rtol));
  }
  bool any = false;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined())
      throw ArgumentError("gradcheck: input " + std::to_string(i) + " is undefined");
    if (t.dtype() != DType::f64) {
      throw DTypeError("gradcheck: " + label(inputs, i) +
                       " must be f64: finite differences with eps " + value_str(options.eps) +
                       " are lost in f32 rounding; create the inputs with DType::f64");
    }
    if (!t.is_leaf()) {
      throw ArgumentError("gradcheck: " + label(inputs, i) +
                          " was produced by an op; pass leaves (x.detach() with "
                          "set_requires_grad(true)) and build the graph inside f");
    }
    any = any || t.requires_grad();
  }
  if (!any) {
    throw ArgumentError(
        "gradcheck: no input requires grad, so there is nothing to check; call "
        "set_requires_grad(true) on the inputs whose gradients you want checked");
  }
}

// L = sum(out * w) on the host.
double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  const std::vector<double> values = out.to_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < values.size(); ++i) total += values[i] * w[i];
  return total;
}

// Runs f without recording a graph (in every context the inputs belong to) and returns L.
double evaluate(const GradcheckFn& f, const std::vector<Tensor>& inputs, const Shape& out_shape,
                const std::vector<double>& w) {
  std::vector<std::unique_ptr<NoGradGuard>> guards;
  std::vector<Context*> seen;
  for (const Tensor& t : inputs) {
    if (std::find(seen.begin(), seen.end(), &t.ctx()) != seen.end()) continue;
    seen.push_back(&t.ctx());
    guards.push_back(std::make_unique<NoGradGuard>(t.ctx()));
  }
  const Tensor out = f(inputs);
  if (!out.defined() || out.shape() != out_shape || out.dtype() != DType::f64) {
    throw StateError("gradcheck: f returned " + out.describe() + " on a perturbed input but " +
                     "f64" + out_shape.str() + " the first time; f must keep its output shape");
  }
  return weighted_sum(out, w);
}

// Sets one element for its lifetime and restores the original value, even when f throws. The
// element is written through its backend's host copy, so inputs on a device work too.
class Perturbation {
 public:
  Perturbation(const Tensor& t, std::size_t j, double original, double value)
      : backend_(t.ctx().backend()),
        element_(static_cast<unsigned char*>(t.raw_data()) + j * sizeof(double)),
        original_(original) {
    backend_.copy_from_host(element_, &value, sizeof value);
  }
  ~Perturbation() { backend_.copy_from_host(element_, &original_, sizeof original_); }
  Perturbation(const Perturbation&) = delete;
  Perturbation& operator=(const Perturbation&) = delete;

 private:
  Backend& backend_;
  void* element_;
  double original_;
};

std::vector<double> numeric_gradient(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                                     std::size_t i, const Shape& out_shape,
                                     const std::vector<double>& w, double eps) {
  const std::vector<double> values = inputs[i].to_vector();
  std::vector<double> grad(values.size());
  for (std::size_t j = 0; j < grad.size(); ++j) {
    const double x = values[j];
    double plus = 0.0, minus = 0.0;
    {
      Perturbation p(inputs[i], j, x, x + eps);
      plus = evaluate(f, inputs, out_shape, w);
    }
    {
      Perturbation p(inputs[i], j, x, x - eps);
      minus = evaluate(f, inputs, out_shape, w);
    }
    grad[j] = (plus - minus) / (2.0 * eps);
  }
  return grad;
}

void restore_grads(const std::vector<Tensor>& inputs, const std::vector<Tensor>& previous) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor handle = inputs[i];
    handle.set_grad(previous[i]);
  }
}

// The gradients one backward seeded with w leaves in the inputs' .grad; an input backward never
// reached gets an empty vector. The inputs' previous .grad values are put back afterwards.
std::vector<std::vector<double>> analytic_gradients(const Tensor& out,
                                                    const std::vector<Tensor>& inputs,
                                                    const std::vector<double>& w) {
  std::vector<Tensor> previous;
  for (const Tensor& t : inputs) {
    previous.push_back(t.grad());
    Tensor handle = t;  // shares t's TensorImpl
    handle.zero_grad();
  }
  std::vector<std::vector<double>> grads(inputs.size());
  try {
    if (out.requires_grad())
      out.backward(Tensor::from_vector(out.ctx(), out.shape(), w, DType::f64));
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].grad().defined()) grads[i] = inputs[i].grad().to_vector();
    }
  } catch (...) {
    restore_grads(inputs, previous);
    throw;
  }
  restore_grads(inputs, previous);
  return grads;
}

struct Comparison {
  std::int64_t failures = 0;
  std::size_t worst = 0;       // the element furthest outside (or least inside) its tolerance
  double worst_excess = -1.0;  // |diff| / (atol + rtol |numeric|) at `worst`
  double max_abs = 0.0;
  double max_rel = 0.0;
};

Comparison compare(const std::vector<double>& analytic, const std::vector<double>& numeric,
                   const GradcheckOptions& o) {
  Comparison c;
  for (std::size_t j = 0; j < numeric.size(); ++j) {
    const double diff = std::fabs(analytic[j] - numeric[j]);
    const double allowed = o.atol + o.rtol * std::fabs(numeric[j]);
    const double excess = allowed > 0.0 ? diff / allowed : (diff > 0.0 ? HUGE_VAL : 0.0);
    if (!(diff <= allowed)) ++c.failures;  // NaN counts as a failure
    if (!(excess <= c.worst_excess)) c.worst = j, c.worst_excess = excess;
    c.max_abs = std::max(c.max_abs, diff);
    const double scale = std::max(std::fabs(analytic[j]), std::fabs(numeric[j]));
    if (scale > o.atol) c.max_rel = std::max(c.max_rel, diff / scale);
  }
  return c;
}

bool all_within(const std::vector<double>& v, double tol) {
  return std::all_of(v.begin(), v.end(), [tol](double x) { return std::fabs(x) <= tol; });
}

// analytic / numeric when it is the same on every element that is clearly nonzero, else 0.
double constant_ratio(const std::vector<double>& analytic, const std::vector<double>& numeric,
                      double atol) {
  double ratio = 0.0;
  for (std::size_t j = 0; j < numeric.size(); ++j) {
    if (std::fabs(numeric[j]) <= 100 * atol) continue;
    const double r = analytic[j] / numeric[j];
    if (ratio == 0.0) ratio = r;
    if (!(std::fabs(r - ratio) <= 1e-3 * std::fabs(ratio))) return 0.0;
  }
  return ratio;
}

// A likely cause for a failed input, in words a student can act on.
std::string hint(bool reached, bool output_tracked, const std::vector<double>& analytic,
                 const std::vector<double>& numeric, const GradcheckOptions& o) {
  if (!output_tracked) {
    return "f's output does not require grad: no recorded op connects it to the inputs (does "
           "the op call record() when an input requires grad, and run outside NoGradGuard?)";
  }
  if (!reached) {
    return "backward never reached this input: does the op add an edge for it and return a "
           "defined gradient at its position?";
  }
  if (all_within(analytic, o.atol)) {
    return "the analytic gradient is zero everywhere although L depends on this input: is the "
           "gradient computed but not returned, or overwritten?";
  }
  if (all_within(numeric, o.atol)) {
    return "L does not depend on this input, but backward returned a nonzero gradient: is the "
           "gradient returned at the wrong input position?";
  }
  const double ratio = constant_ratio(analytic, numeric, o.atol);
  if (std::fabs(ratio + 1.0) < 1e-3) return "analytic = -numeric everywhere: a sign is flipped";
  if (ratio != 0.0 && std::fabs(ratio - 1.0) < 1e-3) {
    // Close to 1 but outside the tolerance: a small term, not a factor (an eps left out, n - 1
    // for n in a variance).
    return "analytic = " + fmt("%.9g", ratio) +
           " x numeric on every element: close but not equal, as when a small term is missing or "
           "extra (an eps, n - 1 instead of n)";
  }
  if (ratio != 0.0) {
    return "analytic = " + fmt("%.4g", ratio) +
           " x numeric on every element: a constant factor (a scale, the 1/N of a mean, "
           "1/(1-p)) is missing or extra";
  }
  return "no simple pattern: print both gradients for a tiny input and compare them by hand "
         "(transposed? summed over the wrong dim? a term missing?)";
}

std::string input_line(const std::vector<Tensor>& inputs, std::size_t i, const Comparison& c,
                       const std::vector<double>& analytic, const std::vector<double>& numeric) {
  std::string line = "  " + label(inputs, i) + ": ";
  if (c.failures) {
    line += std::to_string(c.failures) + " of " + std::to_string(numeric.size()) +
            " elements out of tolerance; worst ";
  } else {
    line += "ok, max abs error " + error_str(c.max_abs) + "; worst ";
  }
  if (numeric.empty()) return line + "(no elements)\n";
  const std::size_t j = c.worst;
  return line + "element " + index_str(inputs[i].shape(), static_cast<std::int64_t>(j)) +
         ": analytic " + value_str(analytic[j]) + " vs numeric " + value_str(numeric[j]) +
         " (|diff| " + error_str(std::fabs(analytic[j] - numeric[j])) + ")\n";
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options) {
  check_inputs(inputs, options);
  const Tensor out = f(inputs);
  if (!out.defined() || out.dtype() != DType::f64) {
    throw DTypeError("gradcheck: f must return a defined f64 tensor, given " + out.describe());
  }
  const std::vector<double> w =
      Tensor::randn(out.ctx(), out.shape(), options.seed, 1.0, DType::f64).to_vector();
  GradcheckResult result;
  const double recorded = weighted_sum(out, w);
  const double again = evaluate(f, inputs, out.shape(), w);
  if (!(std::fabs(recorded - again) <= options.atol + options.rtol * std::fabs(recorded))) {
    result.ok = false;
    result.report +=
        "  f is not deterministic: two calls at the same inputs gave L = " + value_str(recorded) +
        " and " + value_str(again) +
        " (a dropout whose seed or step changes between calls? an op that computes "
        "differently with and without grad?)\n";
  }
  const bool tracked = out.requires_grad();
  const std::vector<std::vector<double>> analytic = analytic_gradients(out, inputs, w);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) {
      result.report += "  " + label(inputs, i) + ": does not require grad, skipped\n";
      continue;
    }
    const std::vector<double> numeric = numeric_gradient(f, inputs, i, out.shape(), w, options.eps);
    const bool reached = !analytic[i].empty();
    const std::vector<double> a = reached ? analytic[i] : std::vector<double>(numeric.size(), 0.0);
    const Comparison c = compare(a, numeric, options);
    result.max_abs_error = std::max(result.max_abs_error, c.max_abs);
    result.max_rel_error = std::max(result.max_rel_error, c.max_rel);
    result.report += input_line(inputs, i, c, a, numeric);
    if (c.failures) {
      result.ok = false;
      result.report += "    hint: " + hint(reached, tracked, a, numeric, options) + "\n";
    }
  }
  const std::string head = std::string("gradcheck ") + (result.ok ? "passed" : "FAILED") +
                           ": L = sum(f(inputs) * w), eps " + value_str(options.eps) + ", atol " +
                           value_str(options.atol) + ", rtol " + value_str(options.rtol) +
                           ", max abs error " + error_str(result.max_abs_error) +
                           ", max rel error " + error_str(result.max_rel_error) + "\n";
  result.report = head + result.report;
  return result;
}

}  // namespace shardscope
