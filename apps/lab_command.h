// `shardscope lab [N] [--solution] [--filter PATTERN] [--answers FILE]`: lists the course labs,
// or builds lab N's tests against the student's starter.cpp (or the instructor's solution.cpp) in
// this build tree and runs them; a lab without tests but with answers.txt (lab 8, find the bug)
// is graded from that file (apps/lab_answers.h).
#pragma once

#include <ostream>
#include <string>

namespace CLI {
class App;
}

namespace shardscope {

struct LabOptions {
  int number = 0;  // 0: list the labs
  bool solution = false;
  std::string filter;   // a GoogleTest filter: "*Backward*"
  std::string answers;  // an answers lab: grade this file instead of the lab's answers.txt
};

CLI::App* add_lab_subcommand(CLI::App& app, LabOptions& options);
// Exit code: 0 when every test of the lab passes (or the list was printed), 1 when a test fails or
// the build fails (or an answer is wrong), 2 for a lab that does not exist or a tree without it,
// or options that do not fit the lab.
int lab_main(const LabOptions& options, std::ostream& out, std::ostream& err);

}  // namespace shardscope
