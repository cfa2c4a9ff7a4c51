// The Check panel: each tensor against the single-device reference, with its errors and a
// colour for passed, failed (above the tolerance) or not yet available.
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

// NaN compares false with everything: a row fails unless its error is known to be within.
bool within(const CheckRow& r, double tolerance) {
  return r.passed && r.max_rel_err <= tolerance;
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
      row.abs_err = row.rel_err = "pending";
      row.color = theme::kPending;
    } else {
      ++checked;
      row.abs_err = scientific(r.max_abs_err, 2);
      row.rel_err = scientific(r.max_rel_err, 2);
      row.color = within(r, s.tolerance) ? theme::kPassed : theme::kFailed;
      if (!within(r, s.tolerance)) failed.push_back(r.name);
    }
    v.rows.push_back(std::move(row));
  }
  v.summary = std::to_string(checked) + " of " + std::to_string(s.checks.size()) + " checked, ";
  if (failed.empty()) {
    v.summary += "all within " + scientific(s.tolerance, 0);
  } else {
    v.summary += std::to_string(failed.size()) + " above " + scientific(s.tolerance, 0) + ": ";
    for (std::size_t i = 0; i < failed.size(); ++i) v.summary += (i ? ", " : "") + failed[i];
  }
  return v;
}

}  // namespace shardscope::viz
