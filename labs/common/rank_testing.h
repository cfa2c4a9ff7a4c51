// The harness of the tensor-parallel labs' tests (Labs 3, 4 and 5): run a body on t ranks
// (threads) and keep what each rank produced as plain values (the ranks' contexts end with the
// run); judge a value against the reference with labs::matches plus "suspects", known wrong answers
// that name the mistake producing them; check the collectives a rank issued; and report a check
// that fails on several ranks once, naming the others. Last, the checks Labs 3 and 4 share: the
// weight shards and the gradients of a block whose input is Replicate.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/context.h"
#include "autograd/errors.h"
#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "labs/common/lab_testing.h"
#include "parallel/comm/spmd.h"
#include "parallel/layers/collective_ops.h"
#include "parallel/layers/placement.h"

namespace shardscope::labs {

// ---- values that outlive the rank's context ---------------------------------------------------

struct Values {
  bool defined = false;
  Shape shape;
  std::vector<double> v;
};

inline Values values_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {true, t.shape(), t.to_vector()};
}

inline Tensor tensor_of(Context& ctx, const Values& values) {
  return Tensor::from_vector(ctx, values.shape, values.v, DType::f64);
}

inline bool same_values(const Values& a, const Values& b) {
  if (!a.defined || !b.defined || a.shape != b.shape) return false;
  const Tolerance tol;
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    if (!(std::abs(a.v[i] - b.v[i]) <= tol.atol + tol.rtol * std::abs(b.v[i]))) return false;
  }
  return true;
}

// The element-wise sum of `parts` (undefined when one is undefined or of another shape).
inline Values sum_of(const std::vector<Values>& parts) {
  Values s = parts.at(0);
  for (std::size_t q = 1; q < parts.size(); ++q) {
    if (!parts[q].defined || parts[q].shape != s.shape) return {};
    for (std::size_t i = 0; i < s.v.size(); ++i) s.v[i] += parts[q].v[i];
  }
  return s;
}

// a + k * bias, the bias broadcast over a's leading dims.
inline Values plus_times(const Values& a, const Values& bias, double k) {
  Values out = a;
  for (std::size_t i = 0; i < out.v.size(); ++i) out.v[i] += k * bias.v[i % bias.v.size()];
  return out;
}

// A known wrong answer and the mistake that produces it.
struct Suspect {
  Values value;
  std::string hint;
};

// labs::matches on Values, with the suspects: when `got` equals one of them, the failure names it.
inline ::testing::AssertionResult judge(const std::string& what, const Values& got,
                                        const Values& want, int t, const Hints& hints,
                                        const std::vector<Suspect>& suspects = {},
                                        const std::string& if_undefined = "") {
  if (!got.defined) {
    return ::testing::AssertionFailure()
           << what << ": got no tensor" << (if_undefined.empty() ? "" : ": " + if_undefined);
  }
  for (const Suspect& s : suspects) {
    if (got.shape != want.shape && same_values(got, s.value)) {
      return ::testing::AssertionFailure() << what << ": shape " << got.shape.str() << ", expected "
                                           << want.shape.str() << ": " << s.hint;
    }
  }
  if (got.shape != want.shape) {
    return ::testing::AssertionFailure()
           << what << ": shape " << got.shape.str() << ", expected " << want.shape.str();
  }
  Hints plain = hints;
  plain.other.clear();
  ::testing::AssertionResult r = matches(what, got.v, want.v, t, plain);
  if (r) return r;
  for (const Suspect& s : suspects) {
    if (same_values(got, s.value))
      return ::testing::AssertionFailure() << r.message() << "; " << s.hint;
  }
  return matches(what, got.v, want.v, t, hints);
}

// On rank r, the value that makes the ranks' values add up to `want`: a rank that returns it holds
// a Partial term where a reduced value was due.
inline Values missing_reduction(const std::vector<Values>& per_rank, const Values& want, int r) {
  Values s = want;
  for (std::size_t q = 0; q < per_rank.size(); ++q) {
    if (static_cast<int>(q) == r || !per_rank[q].defined || per_rank[q].shape != want.shape) {
      continue;
    }
    for (std::size_t i = 0; i < s.v.size(); ++i) s.v[i] -= per_rank[q].v[i];
  }
  return s;
}

// ---- the collectives a rank issued -------------------------------------------------------------

struct Collective {
  CollectiveKind kind;
  Phase phase;
  std::int64_t count;
  std::string op;
  CommPurpose purpose;
  ReduceOp reduce;
  double bytes_sent;
};

class CollectiveRecorder final : public Observer {
 public:
  void on_collective(const CollectiveEvent& e) override {
    events.push_back(
        {e.kind, e.site.phase, e.count, std::string(e.site.op), e.purpose, e.reduce, e.bytes_sent});
  }
  std::vector<Collective> events;
};

// The collectives `step` issues on ctx.
inline std::vector<Collective> collectives_of(Context& ctx, const std::function<void()>& step) {
  CollectiveRecorder recorder;
  ObserverGuard guard(ctx, recorder);
  step();
  return recorder.events;
}

// How describe names the op that issued each collective: "(issued by op 'copy_to_tp')" (Labs 3
// and 4), or "(op 'g_gather_seq')", left out when no op issued it (Lab 5).
enum class OpNames { issued_by, short_form };

inline std::string describe(const std::vector<Collective>& list,
                            OpNames names = OpNames::issued_by) {
  if (list.empty()) return "none";
  std::ostringstream out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    out << (i ? ", " : "") << collective_name(list[i].kind) << " of " << list[i].count
        << " elements";
    if (names == OpNames::issued_by) {
      out << " (issued by op '" << list[i].op << "')";
    } else if (!list[i].op.empty()) {
      out << " (op '" << list[i].op << "')";
    }
  }
  return out.str();
}

// What to say when a phase's collectives are not the expected ones.
struct CollectiveHints {
  std::string missing;     // fewer all-reduces than expected
  std::string extra;       // more all-reduces (or another kind) than expected
  std::string wrong_size;  // the right number of all-reduces, of the wrong size
};

// Passes when the collectives of `phase` are exactly `want_count` all-reduces of `elements` each.
inline ::testing::AssertionResult issued(const std::string& what,
                                         const std::vector<Collective>& all, Phase phase,
                                         int want_count, std::int64_t elements,
                                         const CollectiveHints& hints) {
  std::vector<Collective> got;
  for (const Collective& c : all) {
    if (c.phase == phase) got.push_back(c);
  }
  int all_reduces = 0;
  bool other_kind = false, wrong_size = false;
  for (const Collective& c : got) {
    if (c.kind == CollectiveKind::all_reduce) {
      ++all_reduces;
      wrong_size = wrong_size || c.count != elements;
    } else {
      other_kind = true;
    }
  }
  if (all_reduces == want_count && !other_kind && !wrong_size) {
    return ::testing::AssertionSuccess();
  }
  std::ostringstream m;
  m << what << ", " << phase_name(phase) << ": issued " << describe(got) << "; expected ";
  if (want_count == 0) {
    m << "none";
  } else {
    m << want_count << " all_reduce of " << elements << " elements";
  }
  const std::string& hint = all_reduces < want_count                 ? hints.missing
                            : all_reduces > want_count || other_kind ? hints.extra
                                                                     : hints.wrong_size;
  if (!hint.empty()) m << ": " << hint;
  return ::testing::AssertionFailure() << m.str();
}

// One collective a phase should issue.
struct ExpectedCollective {
  CollectiveKind kind;
  std::int64_t count;
};

// Passes when the activation collectives of `phase` (CommPurpose::activation: the parameter
// gradients' all-reduces aside) are exactly `want`, of any kinds, in any order.
inline ::testing::AssertionResult issued(const std::string& what,
                                         const std::vector<Collective>& all, Phase phase,
                                         const std::vector<ExpectedCollective>& want,
                                         const std::string& hint) {
  std::vector<Collective> got;
  for (const Collective& c : all) {
    if (c.phase == phase && c.purpose == CommPurpose::activation) got.push_back(c);
  }
  std::vector<std::pair<int, std::int64_t>> a, b;
  for (const Collective& c : got) a.emplace_back(static_cast<int>(c.kind), c.count);
  for (const ExpectedCollective& e : want) b.emplace_back(static_cast<int>(e.kind), e.count);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a == b) return ::testing::AssertionSuccess();
  std::ostringstream m;
  m << what << ", " << phase_name(phase) << ": issued " << describe(got, OpNames::short_form)
    << "; expected ";
  if (want.empty()) m << "none";
  for (std::size_t i = 0; i < want.size(); ++i) {
    m << (i ? " and " : "") << "one " << collective_name(want[i].kind) << " of " << want[i].count
      << " elements";
  }
  if (!hint.empty()) m << ": " << hint;
  return ::testing::AssertionFailure() << m.str();
}

// The framework's ops that a lab's task writes by hand, and what to say when one of them issued a
// collective.
struct HandWritten {
  std::vector<std::string> framework_ops;
  std::string task;
};

// Labs 3 and 4: the operators f and g.
inline const HandWritten kTpOperators{
    {"copy_to_tp", "reduce_from_tp"},
    "this task is to write the operator yourself with apply_function (autograd/function.h)"};

// Fails when one of the framework's ops issued a collective where the student's should have.
inline ::testing::AssertionResult written_by_hand(const std::string& what,
                                                  const std::vector<Collective>& all,
                                                  const HandWritten& rule = kTpOperators) {
  for (const Collective& c : all) {
    const auto& ops = rule.framework_ops;
    if (std::find(ops.begin(), ops.end(), c.op) != ops.end()) {
      return ::testing::AssertionFailure()
             << what << ": the " << collective_name(c.kind) << " came from the framework's '"
             << c.op << "'; " << rule.task;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- running the ranks -------------------------------------------------------------------------

// What one rank hands back: named values, its output's placement, every collective it issued
// and whatever else the test keeps.
struct RankResult {
  std::map<std::string, Values> values;
  std::string placement;  // ParallelTensor::str() of the result
  std::vector<Collective> collectives;
  std::map<std::string, std::vector<Collective>> steps;  // a step's, recorded apart
  std::map<std::string, double> numbers;  // anything else a test measures on the rank
  std::map<std::string, std::string> texts;
  void keep(const std::string& name, const Tensor& t) { values[name] = values_of(t); }
  const Values& operator[](const std::string& name) const {
    static const Values none;
    const auto it = values.find(name);
    return it == values.end() ? none : it->second;
  }
};

using RankBody = std::function<void(RankEnv&, RankResult&)>;
// What a rank's error message most likely means; empty when nothing is known about it.
using ErrorHint = std::function<std::string(const std::string& message)>;

// The options of every run: a rank that waits for a collective the others never issue fails after
// 5 s instead of hanging the test.
inline SpmdOptions spmd_options() {
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  return options;
}

// Runs `body` on t ranks (threads) and returns each rank's result; an error on any rank (the
// starter's "not implemented yet" among them) fails the test with every rank's message, and with
// `hint_for`'s hint when it has one.
inline std::vector<RankResult> run_ranks(int t, const RankBody& body,
                                         const ErrorHint& hint_for = nullptr) {
  std::vector<RankResult> results(static_cast<std::size_t>(t));
  try {
    run_spmd(t, spmd_options(), [&](RankEnv& env) {
      RankResult& result = results[static_cast<std::size_t>(env.rank)];
      result.collectives = collectives_of(env.ctx, [&] { body(env, result); });
    });
  } catch (const SpmdError& e) {
    const std::string hint = hint_for ? hint_for(e.what()) : "";
    if (hint.empty()) throw;
    throw Error("at t = " + std::to_string(t) + ": " + e.what() + "\n  hint: " + hint);
  }
  return results;
}

inline std::string at(int t, int rank) {
  return " (t = " + std::to_string(t) + ", rank " + std::to_string(rank) + ")";
}

// Each rank's value `name`.
inline std::vector<Values> per_rank(const std::vector<RankResult>& ranks, const std::string& name) {
  std::vector<Values> out;
  for (const RankResult& r : ranks) out.push_back(r[name]);
  return out;
}

// The ranks' local tensors `name` put together by their placement (what gather_to_full gives);
// none when one is missing or has no such dim.
inline Values gathered(Context& ctx, const std::vector<RankResult>& ranks, const std::string& name,
                       Placement placement) {
  if (!placement.is_shard()) return ranks[0][name];
  std::vector<Tensor> parts;
  for (const RankResult& r : ranks) {
    if (!r[name].defined) return {};
    parts.push_back(tensor_of(ctx, r[name]));
  }
  if (parts[0].rank() <= placement.dim) return {};
  return values_of(concat(parts, placement.dim));
}

// The checks of one run, rank by rank: a check that fails on several ranks is reported once, at
// its first failing rank, with the others named, so a mistake made on every rank reads as one.
class RankChecks {
 public:
  RankChecks() = default;
  RankChecks(const RankChecks&) = delete;
  RankChecks& operator=(const RankChecks&) = delete;
  ~RankChecks() {
    for (const Check& c : checks_) {
      if (c.failing.empty()) continue;
      std::string others;
      for (std::size_t i = 1; i < c.failing.size(); ++i) {
        others += (i > 1 ? ", " : "") + std::to_string(c.failing[i]);
      }
      ADD_FAILURE_AT(c.file, c.line)
          << c.first
          << (others.empty() ? ""
                             : std::string("\n  (the same check fails on rank") +
                                   (c.failing.size() > 2 ? "s " : " ") + others + " too)");
    }
  }
  // Returns whether the check passed. `key` tells apart the checks a loop makes on one line.
  bool add(const char* file, int line, const std::string& key, int rank,
           const ::testing::AssertionResult& result) {
    auto it = std::find_if(checks_.begin(), checks_.end(), [&](const Check& c) {
      return c.line == line && c.file == file && c.key == key;
    });
    if (it == checks_.end()) it = checks_.insert(checks_.end(), Check{file, line, key, {}, {}});
    if (result) return true;
    if (it->failing.empty()) it->first = result.message();
    it->failing.push_back(rank);
    return false;
  }

 private:
  struct Check {
    const char* file;
    int line;
    std::string key;
    std::string first;
    std::vector<int> failing;
  };
  std::vector<Check> checks_;
};

#define EXPECT_ON_RANK(checks, rank, result) (checks).add(__FILE__, __LINE__, "", (rank), (result))
#define EXPECT_ON_RANK_FOR(checks, key, rank, result) \
  (checks).add(__FILE__, __LINE__, (key), (rank), (result))

inline ::testing::AssertionResult placement_is(const std::string& what, const std::string& got,
                                               const std::string& want, const std::string& hint) {
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": placement " << got << ", expected " << want << ": " << hint;
}

// ---- the test data -----------------------------------------------------------------------------

// `values` as a leaf that takes a gradient.
inline Tensor leaf(const Tensor& values) {
  Tensor x = values;
  x.set_requires_grad(true);
  return x;
}

// A leaf of the test data: every rank makes the same one from the seed.
inline Tensor leaf(Context& ctx, const Shape& shape, std::uint64_t seed, double std = 1.0) {
  return leaf(Tensor::randn(ctx, shape, seed, std, DType::f64));
}

// This rank's slice of a full weight as a parameter of the rank's context, as the framework
// shards it.
inline Tensor shard_parameter(ProcessGroup& group, const Tensor& full, Placement placement,
                              const std::string& name) {
  return Tensor::parameter(
      slice_of_full(full, placement, group.rank(), group.size()).copy_to(group.ctx()), name);
}

// ---- what Labs 3 and 4 check alike -------------------------------------------------------------

inline const char* const kGBackwardIsIdentity =
    "g's backward must be the identity: an all-reduce there multiplies the gradients upstream of "
    "it by t";

// Keeps the student's shard `got` as `name`, the framework's as `name.want`, and `got` again as
// `name.not_a_parameter` when it is not a parameter (a leaf taking a gradient) of this rank.
inline void keep_shard(RankEnv& env, RankResult& out, const std::string& name, const Tensor& got,
                       const Tensor& want) {
  out.keep(name, got);
  out.keep(name + ".want", want);
  if (got.defined() && (!got.is_leaf() || !got.requires_grad() || &got.ctx() != &env.ctx)) {
    out.keep(name + ".not_a_parameter", got);
  }
}

// The ranks' shards (kept by keep_shard) against the framework's, weight by weight; `suspects`
// names, for each weight, the values kept under other names that a wrong cut gives and its hint.
using ShardSuspects = std::map<std::string, std::vector<std::pair<std::string, std::string>>>;

inline void expect_shards(const std::vector<RankResult>& ranks, int t,
                          const ShardSuspects& suspects) {
  for (const auto& [name, list] : suspects) {
    RankChecks checks;
    for (int r = 0; r < t; ++r) {
      const RankResult& res = ranks[static_cast<std::size_t>(r)];
      std::vector<Suspect> known;
      for (const auto& [key, hint] : list) known.push_back({res[key], hint});
      EXPECT_ON_RANK(
          checks, r,
          judge(name + " shard" + at(t, r), res[name], res[name + ".want"], t, Hints(), known));
      EXPECT_ON_RANK(
          checks, r,
          ::testing::AssertionResult(!res[name + ".not_a_parameter"].defined)
              << name << " shard" << at(t, r)
              << ": not a parameter of this rank's context; make it with "
              << "Tensor::parameter(slice, name) so that backward accumulates its gradient");
    }
  }
}

// A block's input gradient ("x.grad") on every rank against the single-device one: x is
// Replicate, so each rank holds all of it. `partial_hint` names a rank that holds its own partial
// term (f's backward all-reduce missing).
inline void expect_input_gradient(const std::string& what, const std::vector<RankResult>& ranks,
                                  const Values& want, int t, const std::string& partial_hint,
                                  const std::string& if_undefined) {
  const std::vector<Values> x_grads = per_rank(ranks, "x.grad");
  RankChecks checks;
  for (int r = 0; r < t; ++r) {
    EXPECT_ON_RANK(
        checks, r,
        judge(what + at(t, r), x_grads[static_cast<std::size_t>(r)], want, t,
              Hints()
                  .if_over_t("input gradient = want / t: is the backward all-reduce of f missing?")
                  .if_times_t(kGBackwardIsIdentity),
              {{missing_reduction(x_grads, want, r), partial_hint}}, if_undefined));
  }
}

// A block's weight gradients (name + ".grad" on the ranks) against the single-device ones (`grads`,
// by name): a sharded weight's gathered from the ranks, a Replicate one's on every rank.
inline void expect_weight_gradients(
    Context& ctx, const std::vector<RankResult>& ranks, int t,
    const std::map<std::string, Values>& grads,
    const std::function<Placement(const std::string&)>& placement_of,
    const std::string& if_undefined) {
  const Hints hints = Hints().if_times_t(kGBackwardIsIdentity);
  for (const auto& [name, want] : grads) {
    const Placement p = placement_of(name);
    if (p.is_shard()) {
      EXPECT_TRUE(judge(name + " gradient (gathered, t = " + std::to_string(t) + ")",
                        gathered(ctx, ranks, name + ".grad", p), want, t, hints, {}, if_undefined));
      continue;
    }
    RankChecks checks;
    for (int r = 0; r < t; ++r) {  // Replicate: every rank holds the whole gradient
      EXPECT_ON_RANK(
          checks, r,
          judge(name + " gradient" + at(t, r), ranks[static_cast<std::size_t>(r)][name + ".grad"],
                want, t, hints, {}, if_undefined));
    }
  }
}

}  // namespace shardscope::labs
