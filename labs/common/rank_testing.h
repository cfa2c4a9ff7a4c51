// The harness of the tensor-parallel labs' tests (Labs 3 and 4): run a body on t ranks (threads)
// and keep what each rank produced as plain values (the ranks' contexts end with the run); judge
// a value against the reference with labs::matches plus "suspects", known wrong answers that name
// the mistake producing them; check the collectives a rank issued; and report a check that fails
// on several ranks once, naming the others.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "autograd/tensor.h"
#include "labs/common/lab_testing.h"
#include "parallel/placement.h"
#include "parallel/spmd.h"

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
};

class CollectiveRecorder final : public Observer {
 public:
  void on_collective(const CollectiveEvent& e) override {
    events.push_back({e.kind, e.site.phase, e.count, std::string(e.site.op)});
  }
  std::vector<Collective> events;
};

struct ObserverGuard {
  Context& ctx;
  Observer* observer;
  ObserverGuard(Context& c, Observer* o) : ctx(c), observer(o) { ctx.add_observer(o); }
  ~ObserverGuard() { ctx.remove_observer(observer); }
  ObserverGuard(const ObserverGuard&) = delete;
  ObserverGuard& operator=(const ObserverGuard&) = delete;
};

inline std::string describe(const std::vector<Collective>& list) {
  if (list.empty()) return "none";
  std::ostringstream out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    out << (i ? ", " : "") << collective_name(list[i].kind) << " of " << list[i].count
        << " elements (issued by op '" << list[i].op << "')";
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

// Fails when the framework's f or g issued a collective where the student's op should have.
inline ::testing::AssertionResult written_by_hand(const std::string& what,
                                                  const std::vector<Collective>& all) {
  for (const Collective& c : all) {
    if (c.op == "copy_to_tp" || c.op == "reduce_from_tp") {
      return ::testing::AssertionFailure()
             << what << ": the " << collective_name(c.kind) << " came from the framework's '"
             << c.op << "'; this task is to write the operator yourself with apply_function "
             << "(autograd/function.h)";
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

// Runs `body` on t ranks (threads) and returns each rank's result; an error on any rank (the
// starter's "not implemented yet" among them) fails the test with every rank's message.
inline std::vector<RankResult> run_ranks(int t, const RankBody& body) {
  std::vector<RankResult> results(static_cast<std::size_t>(t));
  SpmdOptions options;
  options.timeout = std::chrono::milliseconds(5000);
  run_spmd(t, options, [&](RankEnv& env) {
    CollectiveRecorder recorder;
    RankResult& result = results[static_cast<std::size_t>(env.rank)];
    {
      ObserverGuard guard(env.ctx, &recorder);
      body(env, result);
    }
    result.collectives = recorder.events;
  });
  return results;
}

inline std::string at(int t, int rank) {
  return " (t = " + std::to_string(t) + ", rank " + std::to_string(rank) + ")";
}

// a + k * bias, the bias broadcast over a's leading dims.
inline Values plus_times(const Values& a, const Values& bias, double k) {
  Values out = a;
  for (std::size_t i = 0; i < out.v.size(); ++i) out.v[i] += k * bias.v[i % bias.v.size()];
  return out;
}

// The ranks' local tensors `name` put together by their placement (what gather_to_full gives).
inline Values gathered(Context& ctx, const std::vector<RankResult>& ranks, const std::string& name,
                       Placement placement) {
  if (!placement.is_shard()) return ranks[0][name];
  std::vector<Tensor> parts;
  for (const RankResult& r : ranks) {
    if (!r[name].defined) return {};
    parts.push_back(tensor_of(ctx, r[name]));
  }
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
  void add(const char* file, int line, int rank, const ::testing::AssertionResult& result) {
    auto it = std::find_if(checks_.begin(), checks_.end(),
                           [&](const Check& c) { return c.line == line && c.file == file; });
    if (it == checks_.end()) it = checks_.insert(checks_.end(), Check{file, line, {}, {}});
    if (result) return;
    if (it->failing.empty()) it->first = result.message();
    it->failing.push_back(rank);
  }

 private:
  struct Check {
    const char* file;
    int line;
    std::string first;
    std::vector<int> failing;
  };
  std::vector<Check> checks_;
};

#define EXPECT_ON_RANK(checks, rank, result) (checks).add(__FILE__, __LINE__, (rank), (result))

inline ::testing::AssertionResult placement_is(const std::string& what, const std::string& got,
                                               const std::string& want, const std::string& hint) {
  if (got == want) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": placement " << got << ", expected " << want << ": " << hint;
}

}  // namespace shardscope::labs
