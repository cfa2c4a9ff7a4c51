// The Check panel: each tensor against the single-device reference, with its errors and a
// colour for passed, failed (an element out of tolerance) or not yet available.
#include <cstdio>

#include "viz/model/view_model.h"

namespace shardscope::viz {
namespace {

// 1.234e-05 -> "1.23e-5": short enough for a table column, exact enough to compare.
std::string scientific(double x, int digits) {
  if (x == 0) return "0";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.*e", digits, x);
  std::string text = buffer;
  const std::size_t e = text.find('e');
  if (e == std::string::npos) return text;  // inf, nan
  std::string mantissa = text.substr(0, e), exponent = text.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  std::size_t first = exponent.find_first_not_of("+-0");
  exponent = first == std::string::npos ? "0" : exponent.substr(first);
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

std::string rule(const Tolerance& t) {
  return "|a - b| <= " + scientific(t.atol, 0) + " max|b| + " + scientific(t.rtol, 0) + " |b|";
}

}  // namespace

CheckView check_view(const Snapshot& s) {
  CheckView v;
  if (s.checks.empty()) {
    v.summary = s.check_note.empty() ? "no reference check yet" : s.check_note;
    return v;
  }
  int checked = 0;
  std::vector<std::string> failed;
  for (const CheckRow& r : s.checks) {
    CheckView::Row row;
    row.name = r.name;
    if (!r.available) {
      row.failed = row.abs_err = row.rel_err = "pending";
      row.color = theme::kPending;
    } else {
      ++checked;
      row.failed = std::to_string(r.failed) + " of " + std::to_string(r.elements);
      row.abs_err = scientific(r.max_abs_err, 2);
      row.rel_err = scientific(r.max_rel_err, 2);
      row.color = r.passed ? theme::kPassed : theme::kFailed;
      if (!r.passed) failed.push_back(r.name);
    }
    v.rows.push_back(std::move(row));
  }
  v.summary = std::to_string(checked) + " of " + std::to_string(s.checks.size()) + " checked, ";
  if (failed.empty()) {
    v.summary += "all within " + rule(s.tolerance);
  } else {
    v.summary += std::to_string(failed.size()) + " out of " + rule(s.tolerance) + ": ";
    for (std::size_t i = 0; i < failed.size(); ++i) v.summary += (i ? ", " : "") + failed[i];
  }
  return v;
}

}  // namespace shardscope::viz
