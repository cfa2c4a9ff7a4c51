// The "find the bug" lab's grader: each answer against choose_random_bug, hints from the
// catalogue's table of diverging tensors.
#include "apps/lab_answers.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "autograd/errors.h"

namespace shardscope {
namespace {

std::string catalogue_names() {
  std::string names;
  for (const PlantedBugInfo& info : planted_bugs()) {
    names += (names.empty() ? "" : ", ") + std::string(info.name);
  }
  return names;
}

BugAnswer parse_answer_line(const std::string& text, int line, const std::string& where) {
  std::istringstream words(text);
  std::string mode, seed, bug, flag, value, extra;
  words >> mode >> seed >> bug >> flag >> value >> extra;
  const bool dropout_ok = flag.empty() || (flag == "--dropout" && !value.empty());
  if (bug.empty() || !dropout_ok || !extra.empty() ||
      seed.find_first_not_of("0123456789") != std::string::npos) {
    throw ArgumentError(where + ": expected MODE SEED BUG [--dropout P] (e.g. tp-sp 7 " +
                        planted_bugs().front().name + "), given '" + text + "'");
  }
  BugAnswer a;
  a.line = line;
  try {
    a.config.mode = parse_mode(mode);
    a.config.seed = std::stoull(seed);
    if (!flag.empty()) a.config.dropout = std::stod(value);
    choose_random_bug(a.config.seed, a.config);  // a mode with a bug to hide
  } catch (const std::exception& e) {
    throw ArgumentError(where + ": " + e.what());
  }
  a.answered = bug != "?";
  if (!a.answered) return a;
  if (bug == "none") {
    a.bug = PlantedBug::none;
    return a;
  }
  try {
    a.bug = parse_planted_bug(bug);
  } catch (const ArgumentError&) {
    throw ArgumentError(where + ": '" + bug +
                        "' is not a bug of the catalogue (docs/bug-catalogue.md); expected one "
                        "of " +
                        catalogue_names() + ", or ? for not answered yet");
  }
  return a;
}

// The names of `a` that are not in `b`, space-separated.
std::string missing_from(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::string names;
  for (const std::string& n : a) {
    if (std::find(b.begin(), b.end(), n) == b.end()) names += (names.empty() ? "" : " ") + n;
  }
  return names;
}

std::string run_command(const LayerConfig& c) {
  std::ostringstream s;
  s << "shardscope run --mode " << mode_name(c.mode) << " --degree 2 --seed " << c.seed;
  if (c.dropout != LayerConfig{}.dropout) s << " --dropout " << c.dropout;
  s << " --plant-bug random";
  return s.str();
}

}  // namespace

std::vector<BugAnswer> read_bug_answers(std::istream& in, const std::string& shown) {
  std::vector<BugAnswer> answers;
  std::string text;
  for (int line = 1; std::getline(in, text); ++line) {
    const std::size_t first = text.find_first_not_of(" \t\r");
    if (first == std::string::npos || text[first] == '#') continue;
    answers.push_back(parse_answer_line(text, line, shown + " line " + std::to_string(line)));
  }
  return answers;
}

std::string wrong_answer_hint(PlantedBug answer, PlantedBug planted, const LayerConfig& config) {
  if (answer == PlantedBug::none) {
    return "this run has a bug planted: its check fails (exit code 3)";
  }
  const PlantedBugInfo& info = planted_bug_info(answer);
  try {
    validate_planted_bug(answer, config);
  } catch (const ArgumentError& e) {
    return std::string(e.what()).substr(std::string("planted_bug ").size()) +
           ": it cannot be this run's bug";
  }
  const std::vector<std::string> yours = diverging_tensors(answer),
                                 theirs = diverging_tensors(planted);
  const std::string only_theirs = missing_from(theirs, yours),
                    only_yours = missing_from(yours, theirs);
  std::string hint =
      std::string(info.name) + " would make " + info.diverging + " diverge (docs/bug-catalogue.md)";
  // The catalogue's list is every tensor that diverges only where the entry is `exact`.
  const bool theirs_exact = planted_bug_info(planted).exact;
  if (only_theirs.empty() && (only_yours.empty() || !theirs_exact)) {
    return hint +
           "; this run's bug makes those diverge too: read how they differ (the check's "
           "diagnosis of each failed tensor) and compare the two entries";
  }
  if (!only_theirs.empty()) hint += "; this run's bug also makes " + only_theirs + " diverge";
  if (!only_yours.empty() && theirs_exact) {
    hint += (only_theirs.empty() ? "; this run's bug" : ", and") + std::string(" leaves ") +
            only_yours + " alone";
  }
  return hint;
}

int grade_bug_answers(int number, const std::filesystem::path& path, const std::string& shown,
                      std::ostream& out, std::ostream& err) {
  std::ifstream in(path);
  if (!in) {
    err << "shardscope: lab " << number << ": cannot read the answers file " << path.string()
        << " (expected lines MODE SEED BUG; see the lab's README.md)\n";
    return 2;
  }
  std::vector<BugAnswer> answers;
  try {
    answers = read_bug_answers(in, shown);
  } catch (const ArgumentError& e) {
    err << "shardscope: lab " << number << ": " << e.what() << "\n";
    return 2;
  }
  out << "grading " << shown << ": " << answers.size() << " run(s)\n";
  int right = 0;
  std::string next;
  for (const BugAnswer& a : answers) {
    const PlantedBug planted = choose_random_bug(a.config.seed, a.config);
    out << "  line " << a.line << ": " << run_command(a.config) << ": ";
    const bool ok = a.answered && a.bug == planted;
    right += ok;
    if (ok) {
      out << planted_bug_name(a.bug) << " is right\n";
      continue;
    }
    if (!a.answered) {
      out << "not answered yet (?)\n";
    } else {
      out << planted_bug_name(a.bug) << " is wrong: " << wrong_answer_hint(a.bug, planted, a.config)
          << "\n";
    }
    if (next.empty()) {
      next = (a.answered ? "look again at the bug of `" : "find the bug of `") +
             run_command(a.config) + "` (" + shown + " line " + std::to_string(a.line) + ")";
    }
  }
  out << "lab " << number << " (answers): ";
  if (answers.empty()) {
    out << "no answers yet; next: add a line MODE SEED BUG to " << shown << "\n";
    return 1;
  }
  if (next.empty()) {
    out << "every answer is right (" << right << " of " << answers.size() << ")\n";
    return 0;
  }
  out << right << " of " << answers.size() << " answers right; next: " << next << "\n";
  return 1;
}

}  // namespace shardscope
