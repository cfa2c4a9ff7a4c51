// The lab runner: finds labs/NN-*/ in the source tree this binary was built from, builds the lab's
// test target in this binary's build tree with CMake, and runs it.
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

}  // namespace

CLI::App* add_lab_subcommand(CLI::App& app, LabOptions& o) {
  CLI::App* lab = app.add_subcommand(
      "lab",
      "the course labs: with no number, list them; with a number, build the lab's tests against "
      "your labs/NN-*/starter.cpp (or, with --solution, the instructor's solution.cpp) and run "
      "them");
  lab->add_option("number", o.number, "the lab's number (1 for labs/01-*)");
  lab->add_flag("--solution", o.solution, "run the tests against the solution instead");
  lab->add_option("--filter", o.filter, "run only the tests matching this GoogleTest filter");
  return lab;
}

int lab_main(const LabOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<Lab> labs = find_labs();
  if (o.number == 0) {
    out << "labs in " << SHARDSCOPE_SOURCE_DIR << "/labs:\n";
    for (const Lab& lab : labs) {
      const bool has_solution = fs::exists(lab.dir / "solution.cpp");
      char num[8];
      std::snprintf(num, sizeof num, "%2d", lab.number);
      out << "  " << num << "  " << lab.title << "  (labs/" << lab.dir.filename().string()
          << (has_solution ? ", with solution" : "") << ")\n";
    }
    out << "run one: shardscope lab N [--solution] [--filter PATTERN]\n";
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
  std::string run = quoted((fs::path(SHARDSCOPE_BINARY_DIR) / "labs" / target).string());
  if (!o.filter.empty()) run += " --gtest_filter=" + quoted(o.filter);
  out << "running " << run << "\n";
  out.flush();
  const int rc = shell(run);
  if (rc == 0) {
    out << "lab " << o.number << " (" << kind << "): every test passes\n";
    return 0;
  }
  err << "shardscope: lab " << o.number << " (" << kind << "): tests fail (see above)\n";
  return 1;
}

}  // namespace shardscope
