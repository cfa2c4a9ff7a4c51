// compare_dumps and its table.
#include "io/check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include <fnmatch.h>

#include "io/npy.h"
#include "parallel/run/diagnosis.h"

namespace shardscope {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<std::int64_t> unravel(std::int64_t flat, const Shape& shape) {
  std::vector<std::int64_t> index(static_cast<std::size_t>(shape.rank()));
  for (int d = shape.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

std::string number(double v, const char* format = "%.3e") {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

std::string index_text(const TensorComparison& c) {
  if (!c.in_a || !c.in_b || c.shape_a != c.shape_b || c.worst_index.empty()) return "-";
  if (c.max_abs == 0) return "-";  // identical: no element is worse than another
  std::string s = "[";
  for (std::size_t i = 0; i < c.worst_index.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(c.worst_index[i]);
  }
  return s + "] (" + number(c.worst_a, "%.7g") + " vs " + number(c.worst_b, "%.7g") + ")";
}

// "rtol 1e-3, atol 1e-3" as asked, or the per-dtype defaults.
std::string tolerance_text(const DumpComparison& c) {
  const Tolerance f32 = default_tolerance(DType::f32), f64 = default_tolerance(DType::f64);
  auto one = [](const char* what, const std::optional<double>& asked, double a32, double a64) {
    return std::string(what) + " " +
           (asked ? number(*asked, "%g")
                  : number(a32, "%g") + " (f32) / " + number(a64, "%g") + " (f64)");
  };
  return one("rtol", c.rtol, f32.rtol, f64.rtol) + ", " + one("atol", c.atol, f32.atol, f64.atol);
}

TensorComparison missing_row(const ManifestTensor& present, bool in_a) {
  TensorComparison c;
  c.name = present.name;
  c.rank = present.rank;
  c.in_a = in_a;
  c.in_b = !in_a;
  (in_a ? c.shape_a : c.shape_b) = present.shape;
  c.note = in_a ? "missing in B" : "missing in A";
  return c;
}

std::vector<std::string> table_row(const TensorComparison& c) {
  const bool both = c.in_a && c.in_b;
  const std::string shape = c.in_a ? c.shape_a.str() : c.shape_b.str();
  std::string result = c.passed ? "pass" : "FAIL";
  if (!c.note.empty()) result += " (" + c.note + ")";
  const bool measured = both && c.shape_a == c.shape_b;
  const std::string failed =
      measured ? std::to_string(c.failed_elements) + " of " + std::to_string(c.elements) : "-";
  return {c.label(),
          shape,
          failed,
          measured ? number(c.max_abs) : "-",
          measured ? number(c.max_rel) : "-",
          index_text(c),
          result};
}

}  // namespace

std::string TensorComparison::label() const {
  return rank == kFullRank ? name : name + " (rank " + std::to_string(rank) + ")";
}

bool DumpComparison::passed() const {
  return !rows.empty() &&
         std::all_of(rows.begin(), rows.end(), [](const TensorComparison& c) { return c.passed; });
}

TensorComparison compare_tensors(const std::string& name, const Tensor& a, const Tensor& b,
                                 const Tolerance& tolerance, int t) {
  TensorComparison c;
  c.name = name;
  c.in_a = c.in_b = true;
  c.shape_a = a.shape();
  c.shape_b = b.shape();
  if (a.shape() != b.shape()) {
    c.note = "shape " + a.shape().str() + " in A, " + b.shape().str() + " in B";
    return c;
  }
  if (a.dtype() != b.dtype()) {
    c.note =
        std::string("dtype ") + dtype_name(a.dtype()) + " in A, " + dtype_name(b.dtype()) + " in B";
  }
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  const double scale = scale_of(vb);
  const ElementStats stats = compare_elements(name, va, vb, scale, tolerance);
  c.failed_elements = stats.failed;
  c.elements = stats.elements;
  // The element furthest past its bound (a NaN or an unmatched infinity first), and max |a-b|/|b|.
  double worst_excess = -kInf;
  std::size_t worst = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double diff = va[i] == vb[i] ? 0.0 : std::fabs(va[i] - vb[i]);
    const double rel = vb[i] != 0 ? diff / std::fabs(vb[i]) : (diff == 0 ? 0.0 : kInf);
    c.max_abs =
        std::isnan(diff) || std::isnan(c.max_abs) ? std::nan("") : std::max(c.max_abs, diff);
    c.max_rel = std::isnan(rel) || std::isnan(c.max_rel) ? std::nan("") : std::max(c.max_rel, rel);
    double excess = diff - element_bound(vb[i], scale, tolerance);
    if (!std::isfinite(excess) && diff != 0) excess = kInf;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (!va.empty()) {
    c.worst_index = unravel(static_cast<std::int64_t>(worst), a.shape());
    c.worst_a = va[worst];
    c.worst_b = vb[worst];
  }
  c.passed = c.failed_elements == 0;
  if (!c.passed) {
    c.diagnosis = diagnose(va, vb, a.shape(), t, tolerance.rtol, tolerance.atol * scale).text;
  }
  return c;
}

namespace {

bool matches(const std::string& pattern, const std::string& name) {
  return fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

bool matches_any(const std::vector<std::string>& patterns, const std::string& name) {
  for (const std::string& p : patterns) {
    if (matches(p, name)) return true;
  }
  return false;
}

// Every entry of `patterns` matches a tensor of one dump or the other.
void check_patterns_match(const std::vector<std::string>& patterns, const char* field,
                          const Manifest& ma, const Manifest& mb) {
  for (const std::string& p : patterns) {
    bool found = false;
    for (const Manifest* m : {&ma, &mb}) {
      for (const ManifestTensor& t : m->tensors) found = found || matches(p, t.name);
    }
    if (!found) throw UnmatchedNameError(field, p);
  }
}

}  // namespace

DumpComparison compare_dumps(const std::string& dir_a, const std::string& dir_b,
                             const CompareOptions& o) {
  const Manifest ma = read_manifest(dir_a), mb = read_manifest(dir_b);
  if (o.shards && ma.degree != mb.degree) {
    throw DegreeMismatchError("A (" + dir_a + ") was dumped by " + std::to_string(ma.degree) +
                              " rank(s) in mode " + ma.mode + ", B (" + dir_b + ") by " +
                              std::to_string(mb.degree) + " in mode " + mb.mode +
                              ": their shards do not pair up; compare the full tensors");
  }
  for (const ManifestTensor& ta : ma.tensors) {  // the same degree, sharded another way
    const ManifestTensor* tb = o.shards && ta.full() ? mb.find(ta.name) : nullptr;
    if (tb && !(tb->placement == ta.placement)) {
      throw DegreeMismatchError("A (" + dir_a + ", mode " + ma.mode + ") holds tensor '" + ta.name +
                                "' as " + ta.placement.str() + ", B (" + dir_b + ", mode " +
                                mb.mode + ") as " + tb->placement.str() +
                                ": their shards do not pair up; compare the full tensors");
    }
  }
  check_patterns_match(o.only, "only", ma, mb);
  check_patterns_match(o.ignore, "ignore", ma, mb);
  DumpComparison out{dir_a, dir_b, o.rtol, o.atol, {}, 0};
  // The tolerance of a pair: what was asked, else the narrower dtype's default.
  const auto tolerance = [&o](const Tensor& a, const Tensor& b) {
    const bool wide = a.dtype() == DType::f64 && b.dtype() == DType::f64;
    const Tolerance d = default_tolerance(wide ? DType::f64 : DType::f32);
    return Tolerance{o.rtol.value_or(d.rtol), o.atol.value_or(d.atol)};
  };
  const auto wanted = [&](const ManifestTensor& t) {
    if (!t.full() && !o.shards) return false;
    return (o.only.empty() || matches_any(o.only, t.name)) && !matches_any(o.ignore, t.name);
  };
  Context ctx(0);
  auto path = [](const std::string& dir, const ManifestTensor& t) {
    return (std::filesystem::path(dir) / t.file).string();
  };
  for (const ManifestTensor& ea : ma.tensors) {
    if (!wanted(ea)) {
      out.left_out += (ea.full() || o.shards) ? 1 : 0;
      continue;
    }
    const ManifestTensor* eb = mb.find(ea.name, ea.rank);
    if (!eb) {
      out.rows.push_back(missing_row(ea, true));
      continue;
    }
    const Tensor a = read_npy(path(dir_a, ea), ctx), b = read_npy(path(dir_b, *eb), ctx);
    out.rows.push_back(
        compare_tensors(ea.name, a, b, tolerance(a, b), std::max(ma.degree, mb.degree)));
    out.rows.back().rank = ea.rank;
  }
  for (const ManifestTensor& eb : mb.tensors) {
    if (wanted(eb) && !ma.find(eb.name, eb.rank)) out.rows.push_back(missing_row(eb, false));
  }
  return out;
}

DumpComparison compare_dumps(const std::string& dir_a, const std::string& dir_b,
                             std::optional<double> rtol, std::optional<double> atol, bool shards) {
  CompareOptions options;
  options.rtol = rtol;
  options.atol = atol;
  options.shards = shards;
  return compare_dumps(dir_a, dir_b, options);
}

void print_comparison(const DumpComparison& c, std::ostream& out) {
  out << "shardscope check: A = " << c.dir_a << ", B = " << c.dir_b << "\n"
      << "an element passes when |a - b| <= atol max|b| + rtol |b| (max|b| over the tensor): "
      << tolerance_text(c) << "\n";
  std::vector<std::vector<std::string>> rows{{"tensor", "shape", "failed elements", "max_abs",
                                              "max_rel", "worst index (a vs b)", "result"}};
  for (const TensorComparison& r : c.rows) rows.push_back(table_row(r));
  std::vector<std::size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool right = i >= 2 && i <= 4;  // numbers
      const std::string pad(width[i] - row[i].size(), ' ');
      line +=
          (i ? "  " : "") + (right ? pad + row[i] : (i + 1 < row.size() ? row[i] + pad : row[i]));
    }
    out << line << "\n";
  }
  std::size_t passed = 0;
  for (const TensorComparison& r : c.rows) passed += r.passed ? 1 : 0;
  if (c.rows.empty()) {
    out << (c.left_out ? "FAIL: no tensors to compare (every one was left out as asked)\n"
                       : "FAIL: no tensors to compare (neither manifest lists a full tensor)\n");
    return;
  }
  for (const TensorComparison& r : c.rows) {
    if (!r.diagnosis.empty()) out << "  " << r.label() << ": " << r.diagnosis << "\n";
  }
  out << passed << " of " << c.rows.size() << " tensors passed";
  if (c.left_out) out << " (" << c.left_out << " left out as asked)";
  out << (c.passed() ? "\n" : ": FAIL\n");
}

}  // namespace shardscope
