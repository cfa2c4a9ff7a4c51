// The lab runner: finds labs/NN-*/ in the source tree this binary was built from, builds the lab's
// test target in this binary's build tree with CMake, runs it, and ends with the one line a
// student needs: how many tests pass and the next TODO (function and file). A lab with an
// answers.txt and no tests (lab 8) is graded from the answers instead (apps/lab_answers.h).
#include "apps/lab_command.h"

#include <sys/wait.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "apps/lab_answers.h"

namespace shardscope {
namespace {

namespace fs = std::filesystem;

struct Lab {
  int number = 0;
  fs::path dir;
  std::string title;  // the README's first heading
};

std::vector<Lab> find_labs() {
  std::vector<Lab> labs;
  const fs::path root = fs::path(SHARDSCOPE_SOURCE_DIR) / "labs";
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || name.size() < 4 ||
        !std::isdigit(static_cast<unsigned char>(name[0])) ||
        !std::isdigit(static_cast<unsigned char>(name[1])) || name[2] != '-') {
      continue;
    }
    Lab lab{std::stoi(name.substr(0, 2)), e.path(), name.substr(3)};
    std::ifstream readme(e.path() / "README.md");
    std::string line;
    if (std::getline(readme, line) && line.rfind("# ", 0) == 0) lab.title = line.substr(2);
    labs.push_back(lab);
  }
  std::sort(labs.begin(), labs.end(),
            [](const Lab& a, const Lab& b) { return a.number < b.number; });
  return labs;
}

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a shell command with the terminal as its output; returns its exit status (-1 on a signal).
int shell(const std::string& command) {
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What a run of a lab's tests said, read from GoogleTest's output.
struct TestRun {
  int exit_code = -1;
  int ran = -1, passed = 0;                  // from the closing summary; -1: it never came
  std::vector<std::string> not_implemented;  // the functions named "not implemented yet", in order
  std::string first_failed;                  // "Suite.Name" of the first test that failed
};

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// The identifier that follows `marker` in `line`, or "".
std::string identifier_after(const std::string& line, const std::string& marker) {
  const std::size_t at = line.find(marker);
  if (at == std::string::npos) return "";
  std::string name;
  for (std::size_t i = at + marker.size(); i < line.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(line[i]);
    if (!std::isalnum(c) && c != '_' && c != ':') break;
    name += line[i];
  }
  return name;
}

// Reads one line of the test binary's output into `run`; says whether to show it. The run's own
// lines are shown; of GoogleTest's closing summary, only the counts (its list of the failed tests
// gives way to the one line lab_main ends with).
bool read_line(const std::string& line, TestRun& run) {
  const std::string missing = identifier_after(line, "not implemented yet: ");
  if (!missing.empty() && std::find(run.not_implemented.begin(), run.not_implemented.end(),
                                    missing) == run.not_implemented.end()) {
    run.not_implemented.push_back(missing);
  }
  if (run.ran < 0 && starts_with(line, "[==========] ") &&
      line.find(" ran.") != std::string::npos) {
    run.ran = std::atoi(line.c_str() + 13);
    return true;
  }
  if (run.ran < 0) {
    if (run.first_failed.empty() && starts_with(line, "[  FAILED  ] ")) {
      run.first_failed = line.substr(13, line.find(' ', 13) - 13);
    }
    return true;
  }
  if (starts_with(line, "[  PASSED  ] ")) {
    run.passed = std::atoi(line.c_str() + 13);
    return true;
  }
  return false;
}

// Runs the test command, its output (stdout and stderr together) shown as it comes, but for the
// end of GoogleTest's summary.
TestRun run_tests(const std::string& command, std::ostream& out) {
  TestRun run;
  out.flush();
  std::fflush(stdout);
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return run;
  std::string line;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe)) {
    line += buffer;
    if (line.back() != '\n' && !std::feof(pipe)) continue;  // a line longer than the buffer
    if (read_line(line, run)) out << line << std::flush;
    line.clear();
  }
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The functions the file calls not_implemented("NAME") for, in the file's order.
std::vector<std::string> todo_order(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    const std::string name = identifier_after(line, "not_implemented(\"");
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

// The one thing to do next: the first TODO of the file (in its order) that a test reported as not
// implemented yet, else the first failed test.
std::string next_step(const TestRun& run, const fs::path& file, const std::string& shown) {
  if (!run.not_implemented.empty()) {
    std::string name = run.not_implemented.front();
    for (const std::string& todo : todo_order(file)) {
      if (std::find(run.not_implemented.begin(), run.not_implemented.end(), todo) !=
          run.not_implemented.end()) {
        name = todo;
        break;
      }
    }
    return "next: implement " + name + " in " + shown;
  }
  if (!run.first_failed.empty())
    return "next: make " + run.first_failed + " pass (its message is above)";
  return "next: the tests stopped before their summary (exit status " +
         std::to_string(run.exit_code) + "): see the last test above";
}

// A lab graded from the student's answers.txt rather than tests (lab 8, find the bug).
bool is_answers_lab(const Lab& lab) {
  return fs::exists(lab.dir / "answers.txt") && !fs::exists(lab.dir / "lab_test.cpp");
}

int grade_answers_lab(const Lab& lab, const LabOptions& o, std::ostream& out, std::ostream& err) {
  if (o.solution || !o.filter.empty()) {
    err << "shardscope: lab " << o.number << " is graded from your answers (labs/"
        << lab.dir.filename().string() << "/answers.txt): --solution and --filter apply to "
        << "labs graded by tests\n";
    return 2;
  }
  const fs::path file = o.answers.empty() ? lab.dir / "answers.txt" : fs::path(o.answers);
  const std::string shown =
      o.answers.empty() ? "labs/" + lab.dir.filename().string() + "/answers.txt" : o.answers;
  return grade_bug_answers(o.number, file, shown, out, err);
}

}  // namespace

CLI::App* add_lab_subcommand(CLI::App& app, LabOptions& o) {
  CLI::App* lab = app.add_subcommand(
      "lab",
      "the course labs: with no number, list them; with a number, build the lab's tests against "
      "your labs/NN-*/starter.cpp (or, with --solution, the instructor's solution.cpp) and run "
      "them");
  lab->add_option("number", o.number, "the lab's number (1 for labs/01-*)")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v.find_first_not_of("0123456789") == std::string::npos &&
                           v.find_first_not_of('0') != std::string::npos
                       ? ""
                       : "lab numbers start at 1, given " + v +
                             " (shardscope lab with no number lists the labs)";
          },
          "N >= 1"));
  lab->add_flag("--solution", o.solution, "run the tests against the solution instead");
  lab->add_option("--filter", o.filter, "run only the tests matching this GoogleTest filter");
  lab->add_option("--answers", o.answers,
                  "a lab graded from answers (8, find the bug): grade this file instead of "
                  "labs/NN-*/answers.txt");
  return lab;
}

int lab_main(const LabOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<Lab> labs = find_labs();
  if (o.number == 0) {
    out << "labs in " << SHARDSCOPE_SOURCE_DIR << "/labs:\n";
    for (const Lab& lab : labs) {
      const bool has_solution = fs::exists(lab.dir / "solution.cpp");
      const bool answers = is_answers_lab(lab);
      char num[8];
      std::snprintf(num, sizeof num, "%2d", lab.number);
      out << "  " << num << "  " << lab.title << "  (labs/" << lab.dir.filename().string()
          << (has_solution ? ", with solution" : "") << (answers ? ", graded from answers.txt" : "")
          << ")\n";
    }
    out << "run one: shardscope lab N [--solution] [--filter PATTERN] (an answers lab: "
           "[--answers FILE])\n";
    return 0;
  }
  const auto it = std::find_if(labs.begin(), labs.end(),
                               [&](const Lab& lab) { return lab.number == o.number; });
  if (it == labs.end()) {
    err << "shardscope: lab " << o.number << " does not exist; ";
    if (labs.empty()) {
      err << "there are no labs in " << SHARDSCOPE_SOURCE_DIR << "/labs\n";
    } else {
      err << "the labs are";
      for (const Lab& lab : labs) err << " " << lab.number;
      err << " (see shardscope lab)\n";
    }
    return 2;
  }
  if (is_answers_lab(*it)) return grade_answers_lab(*it, o, out, err);
  if (!o.answers.empty()) {
    err << "shardscope: lab " << o.number << " is graded by its tests: --answers applies to a "
        << "lab graded from answers.txt\n";
    return 2;
  }
  const char* kind = o.solution ? "solution" : "starter";
  if (o.solution && !fs::exists(it->dir / "solution.cpp")) {
    err << "shardscope: lab " << o.number << " has no solution.cpp in this tree ("
        << it->dir.string() << "): the handout leaves solutions out\n";
    return 2;
  }
  char target[32];
  std::snprintf(target, sizeof target, "lab_%02d_%s", o.number, kind);
  const std::string build = std::string(SHARDSCOPE_CMAKE_COMMAND) + " --build " +
                            quoted(SHARDSCOPE_BINARY_DIR) + " --target " + target;
  out << "building " << target << " (" << it->dir.filename().string() << "/" << kind
      << ".cpp): " << build << "\n";
  out.flush();
  if (shell(build) != 0) {
    err << "shardscope: lab " << o.number << ": the build failed (the compiler's messages are "
        << "above)\n";
    return 1;
  }
  std::string command = quoted((fs::path(SHARDSCOPE_BINARY_DIR) / "labs" / target).string());
  if (!o.filter.empty()) command += " --gtest_filter=" + quoted(o.filter);
  out << "running " << command << "\n";
  const TestRun run = run_tests(command, out);
  if (run.ran == 0 && !o.filter.empty()) {
    err << "shardscope: --filter " << o.filter << " matches no test of lab " << o.number
        << " (GoogleTest patterns such as 'Gelu*'; without --filter every test runs)\n";
    return 2;
  }
  const fs::path file = it->dir / (std::string(kind) + ".cpp");
  const std::string shown = "labs/" + it->dir.filename().string() + "/" + kind + ".cpp";
  out << "lab " << o.number << " (" << kind << "): ";
  if (run.exit_code == 0 && run.ran >= 0) {
    out << "every test passes (" << run.passed << " of " << run.ran << ")\n";
    return 0;
  }
  if (run.ran >= 0) out << run.passed << " of " << run.ran << " tests pass; ";
  out << next_step(run, file, shown) << "\n";
  return 1;
}

}  // namespace shardscope
