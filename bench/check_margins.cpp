// The margins of the reference check's tolerance, both ways: for every correct run (tp, tp-sp,
// ulysses at t = 2, dropout 0.1, three SGD steps, every step checked) how far below its bound the
// worst element of any compared tensor stays (bound / |a - b|), and for every bug of the catalogue
// (planted in the first mode it applies to) how far above its bound the worst element of the
// *output alone* goes at the first step where the output fails. Both must be at least 100 for the
// tolerance to be trusted (docs/derivations.md, "The tolerance of the reference check"). One line
// per shape and dtype; the table is generated, and the docs check runs it again. With --against
// f32 (2-byte dtypes) the same margins of the check of step 0 against the f32 single-device layer
// (RankRun::f32_check) at f32_reference_tolerance.
//
//   ./build/default/bench/check_margins [--rtol R --atol A] [--per-bug] [--dtype D ...]
//                                       [--against f32]
//   (default: the per-dtype tolerance, f32 and f64; --per-bug adds each bug's margin on stderr)
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "autograd/errors.h"
#include "parallel/layers/parallel_layer.h"
#include "parallel/layers/planted_bug.h"
#include "parallel/run/layer_run.h"

namespace shardscope {
namespace {

struct ShapeCase {
  std::int64_t seq, batch, hidden, heads;
};

// Three shapes, one with s != a and one where s is not a multiple of a.
constexpr ShapeCase kShapes[] = {{8, 2, 16, 4}, {12, 1, 24, 6}, {10, 2, 32, 8}};
constexpr int kSteps = 3;

// The reference a run is measured against: the single-device layer in the run's dtype, or (a
// 2-byte run's step 0) in f32.
enum class Against { own, f32 };

CheckResult check_of(const LayerRunSpec& spec, Against against) {
  CheckResult out;
  std::mutex mutex;
  LayerRunSpec shared = spec;
  shared.reference = std::make_shared<SharedReference>();
  run_spmd(spec.layer.degree, SpmdOptions{}, [&](RankEnv& env) {
    RankRun run = run_layer_rank(env, shared);
    std::lock_guard<std::mutex> lock(mutex);
    if (env.rank == 0) out = std::move(against == Against::f32 ? run.f32_check : run.check);
  });
  return out;
}

LayerRunSpec spec_of(const ShapeCase& s, DType dtype, ParallelMode mode, PlantedBug bug,
                     const Tolerance& tolerance) {
  LayerRunSpec spec;
  spec.layer.seq = s.seq;
  spec.layer.batch = s.batch;
  spec.layer.hidden = s.hidden;
  spec.layer.heads = s.heads;
  spec.layer.dropout = 0.1;
  spec.layer.dtype = dtype;
  spec.layer.mode = mode;
  spec.layer.degree = 2;
  spec.layer.planted_bug = bug;
  spec.steps = kSteps;
  spec.tolerance = tolerance;
  spec.check_past_failure = true;
  return spec;
}

struct Margin {
  double value = std::numeric_limits<double>::infinity();
  std::string where;  // the run (and tensor, step) that sets it
};

// The correct runs: bound / |a - b| of the worst element of any tensor at any step.
Margin correct_margin(const ShapeCase& s, DType dtype, const Tolerance& tol, Against against) {
  Margin m;
  for (ParallelMode mode : {ParallelMode::tp, ParallelMode::tp_sp, ParallelMode::ulysses}) {
    const CheckResult r = check_of(spec_of(s, dtype, mode, PlantedBug::none, tol), against);
    for (const StepCheck& step : r.history) {
      const double margin =
          step.worst > 0 ? 1 / step.worst : std::numeric_limits<double>::infinity();
      if (margin < m.value) {
        m.value = margin;
        m.where = std::string(mode_name(mode)) + " " + step.worst_tensor + " step " +
                  std::to_string(step.step);
      }
    }
  }
  return m;
}

// The bugs that change the forward: |a - b| / bound of the output's worst element at the first
// step where the output fails (0 when it never does). The backward-only bugs (the catalogue's
// output_ok) leave the output of their step right and change the next step's by the learning rate
// times their gradient error; for them the margin is the worst element of any tensor at the first
// failing step (`backward`). The smallest of each over the catalogue, and the bug that sets it.
struct BugMargins {
  Margin forward, backward;
  Margin any;  // every bug: the worst element of any tensor at the first failing step
  int forward_caught = 0, forward_bugs = 0, backward_caught = 0, backward_bugs = 0;
};

BugMargins bug_margins(const ShapeCase& s, DType dtype, const Tolerance& tol, Against against,
                       bool per_bug) {
  BugMargins m;
  for (const PlantedBugInfo& info : planted_bugs()) {
    LayerRunSpec spec = spec_of(s, dtype, first_mode(info.bug), info.bug, tol);
    spec.layer.rope = info.needs_rope;  // a mistake of the rotary embedding needs one to make
    spec.layer.validate();
    const CheckResult r = check_of(spec, against);
    double margin = 0;
    int at = -1;
    for (const StepCheck& step : r.history) {
      const double v = info.output_ok ? step.worst : step.output_worst;
      if (v > 1) {
        margin = v;
        at = step.step;
        break;
      }
    }
    // A bug no checked step catches has margin 0 here, not none.
    Margin caught{0, std::string(info.name) + " never"};
    for (const StepCheck& step : r.history) {
      if (step.passed) continue;
      caught = {step.worst, std::string(info.name) + " " + step.worst_tensor + " step " +
                                std::to_string(step.step)};
      break;
    }
    if (caught.value < m.any.value) m.any = caught;
    if (per_bug) {
      std::fprintf(stderr, "%s s=%lld %s in %s: %.3g at step %d\n", dtype_name(dtype),
                   static_cast<long long>(s.seq), info.name, mode_name(first_mode(info.bug)),
                   margin, at);
    }
    Margin& into = info.output_ok ? m.backward : m.forward;
    (info.output_ok ? m.backward_bugs : m.forward_bugs) += 1;
    (info.output_ok ? m.backward_caught : m.forward_caught) += margin >= 100 ? 1 : 0;
    if (margin < into.value) {
      into.value = margin;
      into.where = std::string(info.name) + (at >= 0 ? " step " + std::to_string(at) : " never");
    }
  }
  return m;
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v >= 1e4 ? "%.1e" : "%.0f", v);
  return text;
}

}  // namespace
}  // namespace shardscope

int main(int argc, char** argv) {
  using namespace shardscope;
  CLI::App app{"the reference check's margins, both ways, over three shapes and the catalogue"};
  std::optional<double> rtol, atol;
  app.add_option("--rtol", rtol, "relative tolerance (default: per dtype)");
  app.add_option("--atol", atol, "absolute tolerance in units of max|b| (default: per dtype)");
  bool per_bug = false;
  app.add_flag("--per-bug", per_bug, "also each bug's margin, on stderr");
  std::vector<std::string> dtype_names{"f32", "f64"};
  app.add_option("--dtype", dtype_names, "the dtypes to measure (f32, f64, bf16, f16)")
      ->capture_default_str();
  std::string against_name = "own";
  app.add_option("--against", against_name,
                 "the reference: own (the run's dtype) or f32 (2-byte dtypes, step 0)")
      ->check(CLI::IsMember({"own", "f32"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const Against against = against_name == "f32" ? Against::f32 : Against::own;
  std::vector<DType> dtypes;
  for (const std::string& name : dtype_names) {
    const std::optional<DType> d = dtype_from_name(name);
    if (!d || !is_floating(*d)) {
      std::fprintf(stderr, "check_margins: --dtype %s: expected f32, f64, bf16 or f16\n",
                   name.c_str());
      return 2;
    }
    if (against == Against::f32 && !is_half(*d)) {
      std::fprintf(stderr,
                   "check_margins: --against f32 measures the 2-byte dtypes (bf16, f16), "
                   "not %s\n",
                   name.c_str());
      return 2;
    }
    dtypes.push_back(*d);
  }
  std::printf(
      "| dtype | rtol, atol | s b h a | correct runs: bound / worst error (where) | "
      "forward bugs: output error / bound (smallest) | backward-only bugs: error / bound "
      "(smallest) | every bug: worst error / bound of any tensor (smallest) |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
  bool held = true, on_output = true;
  for (const DType dtype : dtypes) {
    const Tolerance d =
        against == Against::f32 ? f32_reference_tolerance(dtype) : default_tolerance(dtype);
    const Tolerance t{rtol.value_or(d.rtol), atol.value_or(d.atol)};
    for (const ShapeCase& s : kShapes) {
      const Margin ok = correct_margin(s, dtype, t, against);
      const BugMargins bad = bug_margins(s, dtype, t, against, per_bug);
      held = held && ok.value >= 100 && bad.any.value >= 100;
      on_output = on_output && bad.forward.value >= 100 && bad.backward.value >= 100;
      char tol[48];
      std::snprintf(tol, sizeof tol, "%g, %g", t.rtol, t.atol);
      std::printf(
          "| %s | %s | %lld %lld %lld %lld | %s (%s) | %d of %d >= 100; %s (%s) | "
          "%d of %d >= 100; %s (%s) | %s (%s) |\n",
          dtype_name(dtype), tol, static_cast<long long>(s.seq), static_cast<long long>(s.batch),
          static_cast<long long>(s.hidden), static_cast<long long>(s.heads),
          number(ok.value).c_str(), ok.where.c_str(), bad.forward_caught, bad.forward_bugs,
          number(bad.forward.value).c_str(), bad.forward.where.c_str(), bad.backward_caught,
          bad.backward_bugs, number(bad.backward.value).c_str(), bad.backward.where.c_str(),
          number(bad.any.value).c_str(), bad.any.where.c_str());
    }
  }
  std::printf(
      "\ncorrect runs and every bug (on its worst tensor) at least 100 both ways: %s\n"
      "every forward bug on the output alone, every backward-only bug, at least 100: %s\n",
      held ? "yes" : "NO", on_output ? "yes" : "no");
  return held ? 0 : 1;
}
