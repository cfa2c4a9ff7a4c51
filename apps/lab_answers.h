// The grader of a "find the bug" lab (lab 8): reads the student's answers file, one line per run
// of `shardscope run --plant-bug random`, and says for each whether the named bug is the one
// that run hides (parallel/layers/planted_bug.h, choose_random_bug), with a hint when it is not.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "parallel/layers/layer_config.h"

namespace shardscope {

// One line of an answers file: `MODE SEED BUG [--dropout P]`, BUG "?" while not answered yet.
struct BugAnswer {
  int line = 0;        // in the file, from 1
  LayerConfig config;  // mode, seed and dropout of the run; the rest as the run's defaults
  bool answered = false;
  PlantedBug bug = PlantedBug::none;  // the student's answer, when answered
};

// Parses the file's lines; blank lines and lines starting with '#' are skipped. Throws
// ArgumentError naming `shown` and the line for a malformed line, a mode without a bug to plant,
// or a bug name outside the catalogue (listing the names).
std::vector<BugAnswer> read_bug_answers(std::istream& in, const std::string& shown);

// Why `answer` is not the bug of the run of `config` whose hidden bug is `planted`, without
// naming it: the mode or dropout it needs, or the tensors the catalogue says each makes diverge.
std::string wrong_answer_hint(PlantedBug answer, PlantedBug planted, const LayerConfig& config);

// Grades the answers file `path` (shown as `shown`) of lab `number`: one line per answer, ending
// with "lab N (answers): X of Y answers right; next: ..." or "every answer is right". Exit code
// 0 when every answer is right, 1 when one is wrong or missing, 2 for a file that cannot be read
// or parsed (the error on `err`).
int grade_bug_answers(int number, const std::filesystem::path& path, const std::string& shown,
                      std::ostream& out, std::ostream& err);

}  // namespace shardscope
